//! Calling MLX operations that mlx-rs 0.33 does not wrap, through mlx-sys
//! (`crate::mlx_c`).
//!
//! Callers check their arguments first, so MLX has nothing left to reject in
//! practice; should it still fail, the error is MLX's own message.

use mlx_rs::Array;
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
    crate::mlx_c::new_array(name, call).map_err(Error::Mlx)
}
