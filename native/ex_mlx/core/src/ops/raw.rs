//! Calling MLX operations that mlx-rs 0.33 does not wrap, through mlx-sys.
//!
//! Callers check their arguments first, so MLX has nothing left to reject in
//! practice; should it still fail, the error names the operation (mlx-rs keeps
//! MLX's own message to itself).

use mlx_rs::{Array, Stream};
use mlx_sys::mlx_array;

use crate::error::{Error, Result};

/// Runs `call(result, stream)` and wraps the array it creates.
///
/// # Safety
/// `call` must pass its arguments to one mlx-c function that writes a new
/// array into `result` on success and returns its status, with every other
/// argument (arrays, pointers and lengths) valid for the duration of the call.
pub unsafe fn op(
    name: &str,
    call: impl FnOnce(*mut mlx_array, mlx_sys::mlx_stream) -> i32,
) -> Result<Array> {
    let stream = Stream::thread_local_or_default();
    let mut res = mlx_sys::mlx_array_new();
    let status = call(&mut res, stream.as_ptr());
    if status != 0 {
        mlx_sys::mlx_array_free(res);
        return Err(Error::Mlx(format!("MLX rejected {name}")));
    }
    Ok(Array::from_ptr(res))
}
