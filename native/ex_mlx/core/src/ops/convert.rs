//! Type conversions.

use mlx_rs::{Array, Dtype};

use crate::dtype::{display, size_of};
use crate::error::{Error, Result};

/// Converts element values to `dtype` (as MLX casts: floats to integers
/// truncate, out-of-range integers wrap).
pub fn as_type(a: &Array, dtype: Dtype) -> Result<Array> {
    // MLX 0.32's CUDA backend casts true to 1 + 1i (seen on an H100, see
    // bench/gpu/README.md): booleans reach complex64 through f32, which is
    // exact on every device.
    if a.dtype() == Dtype::Bool && dtype == Dtype::Complex64 {
        return Ok(a.as_dtype(Dtype::Float32)?.as_dtype(dtype)?);
    }
    Ok(a.as_dtype(dtype)?)
}

/// Whether an overwrite of `dtype` elements (a scatter, a slice update) on
/// this thread's stream must go through [`as_u32_pairs`]: MLX 0.32's CUDA
/// backend has no scatter kernels for 8-byte integers and complex64 ("GPU
/// scatter does not yet support int64", seen on an H100), while it has them
/// for u32. Writing the elements' bytes as pairs of u32 is the same write,
/// bit for bit; sums (a scatter-add) are not, and run on a CPU stream
/// instead (`indexing::scatter`).
pub fn overwrite_as_u32_pairs(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::Int64 | Dtype::Uint64 | Dtype::Complex64)
        && !crate::device::Device::current_is_cpu()
}

/// The bytes of `a` (8-byte elements) as u32 pairs: shape `a.shape ++ [2]`.
pub fn as_u32_pairs(a: &Array) -> Result<Array> {
    let mut shape = a.shape().to_vec();
    shape.push(1);
    Ok(a.reshape(&shape)?.view_dtype(Dtype::Uint32)?)
}

/// The inverse of [`as_u32_pairs`]: u32 pairs read back as `dtype`, in
/// `shape`.
pub fn from_u32_pairs(pairs: &Array, dtype: Dtype, shape: &[i32]) -> Result<Array> {
    Ok(pairs.view_dtype(dtype)?.reshape(shape)?)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_become_complex_with_a_zero_imaginary_part() {
        let b = Array::from_slice(&[true, false, true], &[3]);
        let c = as_type(&b, Dtype::Complex64).unwrap();
        let re = mlx_rs::ops::real(&c).unwrap();
        let im = mlx_rs::ops::imag(&c).unwrap();
        assert_eq!(re.as_slice::<f32>(), &[1.0, 0.0, 1.0]);
        assert_eq!(im.as_slice::<f32>(), &[0.0, 0.0, 0.0]);
    }
}
