//! Type conversions.

use mlx_rs::{Array, Dtype};

use crate::dtype::{display, size_of};
use crate::error::{Error, Result};

/// Converts element values to `dtype` (as MLX casts: floats to integers
/// truncate, out-of-range integers wrap).
pub fn as_type(a: &Array, dtype: Dtype) -> Result<Array> {
    Ok(a.as_dtype(dtype)?)
}

/// Reinterprets the bytes of `a` as `dtype`, which must have the same size.
pub fn bitcast(a: &Array, dtype: Dtype) -> Result<Array> {
    if size_of(dtype) != size_of(a.dtype()) {
        return Err(Error::Type(format!(
            "cannot bitcast {} to {}: element sizes differ ({} and {} bytes)",
            display(a.dtype()),
            display(dtype),
            size_of(a.dtype()),
            size_of(dtype)
        )));
    }
    Ok(a.view_dtype(dtype)?)
}
