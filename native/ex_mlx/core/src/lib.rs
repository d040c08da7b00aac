//! ExMLX's MLX logic, independent of the BEAM, so `cargo test` can cover it.
//!
//! Modules, one concern each: [`error`] (the error enum), [`mlx_c`] (calls
//! through mlx-c with MLX's error messages), [`dtype`] (the type
//! table), [`device`], [`worker`] (the thread model), [`wait`] (how a thread
//! waits for another: spin while a core is spare, else block), [`exit`] (workers
//! stopped before MLX's static objects go at the process's exit), [`ahead`] (evaluation
//! ahead of reads on an idle worker), [`host`] (bytes in and
//! out), [`item`], [`memory`], [`wire`], [`ops`] (the op table and the op
//! families), [`program`] (op-table instructions run in one go), [`step_graph`]
//! (a loop step's MLX graph written out for profiling), [`fusion`] and
//! [`elementwise_fusion`] (`fuse: true` on the GPU and on the CPU), [`simd`] (loops
//! compiled for AVX-512F/AVX2 chosen at run time), [`split_work`] (halves of a
//! product that a thread waiting for the worker computes), [`distributed`]
//! (MLX's distributed groups and collectives, and the thread they run on),
//! [`collect`] (when to hint a garbage collection). The NIF
//! crate (`ex_mlx`) turns Elixir terms into calls on these.

pub mod ahead;
pub mod collect;
pub mod cpu_kernels;
pub mod device;
pub mod distributed;
pub mod dtype;
pub mod elementwise_fusion;
pub mod error;
pub mod exit;
pub mod fusion;
pub mod host;
pub mod host_tensor;
pub mod item;
pub mod memory;
pub mod mlx_c;
pub mod ops;
pub mod program;
pub mod program_format;
pub mod simd;
pub mod split_work;
pub mod step_graph;
#[cfg(test)]
mod test_arrays;
pub mod unified;
pub mod wait;
pub mod wire;
pub mod worker;

pub use error::{Error, Result};

/// The version of the MLX library this process runs (MLX's own `version()`,
/// through mlx-c), read once.
pub fn mlx_version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        // SAFETY: mlx_string_new makes an empty string that mlx_version sets;
        // its data is a NUL-terminated copy owned by the string, read before
        // the string is freed once.
        unsafe {
            let mut text = mlx_sys::mlx_string_new();
            let status = mlx_sys::mlx_version(&mut text);
            let data = mlx_sys::mlx_string_data(text);
            let version = if status == 0 && !data.is_null() {
                std::ffi::CStr::from_ptr(data)
                    .to_string_lossy()
                    .into_owned()
            } else {
                "unknown".to_string()
            };
            mlx_sys::mlx_string_free(text);
            version
        }
    })
}
