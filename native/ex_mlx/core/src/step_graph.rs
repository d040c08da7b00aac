//! A loop step's MLX graph written out, for profiling what a step queues:
//! with `EXMLX_STEP_GRAPH=PREFIX` set, the graph of one step of each
//! outermost loop (its [`STEP`]th) is written to `PREFIX.N.txt` (N counts
//! the loops so written in this process) in MLX's `print_graph` form: the
//! step's inputs, then a line per node, its primitive, input and output
//! arrays with their shapes and types (bench/gpu/README.md, "A step's
//! graph"). A program without loops writes the graph of its outputs at its
//! first call, to `PREFIX.program.N.txt` ([`write_program`]). Unset,
//! nothing is written and nothing is checked but the variable, once.

use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use mlx_rs::Array;

/// The step of a loop whose graph is written: past the first ones, which
/// may differ (a pipelined loop builds its steps ahead from the third).
pub const STEP: usize = 4;

fn prefix() -> Option<&'static str> {
    static PREFIX: OnceLock<Option<String>> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            std::env::var("EXMLX_STEP_GRAPH")
                .ok()
                .filter(|p| !p.is_empty())
        })
        .as_deref()
}

/// Whether step graphs are written (`EXMLX_STEP_GRAPH` is set).
pub fn enabled() -> bool {
    prefix().is_some()
}

/// Writes the graph that computes `outputs` (the arrays not yet evaluated,
/// back to evaluated ones) to the next file of the prefix.
pub fn write(outputs: &[Array]) -> Result<(), String> {
    static WRITTEN: AtomicUsize = AtomicUsize::new(0);
    write_numbered(&WRITTEN, "", outputs)
}

/// Writes the graph that computes a loop-free program's `outputs` to the
/// next `PREFIX.program.N.txt`.
pub fn write_program(outputs: &[Array]) -> Result<(), String> {
    static WRITTEN: AtomicUsize = AtomicUsize::new(0);
    write_numbered(&WRITTEN, ".program", outputs)
}

/// Writes `outputs`' graph to `PREFIX{kind}.N.txt`, N the next of `written`
/// (nothing when the prefix is unset).
fn write_numbered(written: &AtomicUsize, kind: &str, outputs: &[Array]) -> Result<(), String> {
    let Some(prefix) = prefix() else {
        return Ok(());
    };
    let n = written.fetch_add(1, Ordering::Relaxed);
    write_to(&format!("{prefix}{kind}.{n}.txt"), outputs)
}

/// Writes the graph that computes `outputs` to the file at `path`, in MLX's
/// `print_graph` form.
pub fn write_to(path: &str, outputs: &[Array]) -> Result<(), String> {
    let path = CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: both strings are NUL-terminated and alive for the call.
    let file = unsafe { libc::fopen(path.as_ptr(), c"w".as_ptr()) };
    if file.is_null() {
        return Err(format!("cannot write {}", path.to_string_lossy()));
    }
    let handles: Vec<mlx_sys::mlx_array> = outputs.iter().map(Array::as_ptr).collect();
    // SAFETY: `handles` are live arrays borrowed from `outputs` for the
    // call (the vector copies its references); `file` is open until closed
    // here; the namer and the vector are freed once each.
    unsafe {
        let vector = mlx_sys::mlx_vector_array_new_data(handles.as_ptr(), handles.len());
        let namer = mlx_sys::mlx_node_namer_new();
        let status = crate::mlx_c::call("print_graph", || {
            mlx_sys::mlx_print_graph(file.cast(), namer, vector)
        });
        mlx_sys::mlx_node_namer_free(namer);
        mlx_sys::mlx_vector_array_free(vector);
        libc::fclose(file);
        status
    }
}
