//! Fusion (opt-in, `ExMLX.Compiler`'s `fuse: true`, on a GPU): a
//! straight-line program's instructions compiled as one function with MLX's
//! compile, which simplifies the graph and fuses runs of element-wise ops
//! into single kernels (built with NVRTC at their first run).
//!
//! CPU programs are not given to MLX's compile (`Program::fuse`;
//! crate::elementwise_fusion fuses them). On the CPU MLX's compile builds
//! C++ at run time, and first checks for a compiler with `system()`; inside
//! the BEAM, which ignores `SIGCHLD`, that check always fails and MLX hands
//! back the function uncompiled. The core's own tests, outside the BEAM,
//! run the compiled CPU path.
//!
//! mlx-rs's compiled functions are tied to the thread that made them (they
//! are neither `Send` nor `Sync`), and MLX's streams to their thread too, so
//! each lives in a table of the device's worker thread, under the id of its
//! [`FusedProgram`]; dropping that handle removes it there.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::RefUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mlx_rs::error::Exception;
use mlx_rs::Array;

use crate::device::Device;
use crate::error::Result;
use crate::worker;

/// The instructions of a program as one function of its inputs and
/// constants (in slot order) giving its outputs.
pub type Body = Arc<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + RefUnwindSafe>;

type Compiled = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// A program's function on its worker: compiled by MLX, or its
/// instructions one by one where MLX's compile could not trace them.
enum Function {
    Compiled(Compiled),
    Unfused,
}

thread_local! {
    /// The functions of this worker thread's fused programs, by program id.
    static COMPILED: RefCell<HashMap<u64, Function>> = RefCell::new(HashMap::new());
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A program's fused function: compiled on its device's worker at the first
/// call, kept there until this handle is dropped.
pub struct FusedProgram {
    id: u64,
    device: Device,
    body: Body,
}

impl std::fmt::Debug for FusedProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedProgram")
            .field("id", &self.id)
            .finish()
    }
}

impl FusedProgram {
    pub fn new(device: Device, body: Body) -> FusedProgram {
        FusedProgram {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            device,
            body,
        }
    }

    /// Runs the fused function on `args` (on the worker thread of the
    /// program's device, where the caller is). Where MLX's compile fails
    /// (an instruction that reads values on the host, which a trace cannot:
    /// `cbrt` and `erfc` of float32 on a GPU), the program runs unfused,
    /// from then on too; an error of the instructions themselves is theirs.
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        let compiled = COMPILED.with(|table| {
            let mut table = table.borrow_mut();
            let function = table.entry(self.id).or_insert_with(|| {
                let body = self.body.clone();
                let f = move |args: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                    body(args).map_err(|e| Exception::custom(e.to_string()))
                };
                Function::Compiled(Box::new(mlx_rs::transforms::compile::compile(f, false)))
            });
            match function {
                Function::Compiled(compiled) => Some(compiled(args)),
                Function::Unfused => None,
            }
        });
        match compiled {
            Some(Ok(outputs)) => Ok(outputs),
            Some(Err(_)) => {
                let outputs = (self.body)(args)?;
                COMPILED.with(|table| table.borrow_mut().insert(self.id, Function::Unfused));
                Ok(outputs)
            }
            None => (self.body)(args),
        }
    }
}

impl Drop for FusedProgram {
    fn drop(&mut self) {
        let id = self.id;
        // (a worker that is gone has no table left to clean)
        let _ = worker::submit(
            self.device,
            Box::new(move || {
                COMPILED.with(|table| table.borrow_mut().remove(&id));
            }),
        );
    }
}
