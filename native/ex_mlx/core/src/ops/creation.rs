//! Creating tensors: from scalars, ranges, identity matrices.

use half::{bf16, f16};
use mlx_rs::{ops, Array, Dtype};

use crate::dtype::display;
use crate::error::{Error, Result};
use crate::host::array_from_bytes;

/// A number as Elixir passes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Int(i128),
    Float(f64),
    Complex(f64, f64),
}

/// The little-endian bytes of `value` as one element of `dtype`. Integers must
/// fit; floats are rounded to the nearest representable value (as any float
/// conversion does); a complex value needs a complex dtype.
pub fn scalar_bytes(value: Scalar, dtype: Dtype) -> Result<Vec<u8>> {
    let out_of_range =
        |v: i128| Error::arg("value", format!("{v} does not fit in {}", display(dtype)));
    macro_rules! int {
        ($t:ty) => {
            match value {
                Scalar::Int(v) => <$t>::try_from(v)
                    .map_err(|_| out_of_range(v))?
                    .to_le_bytes()
                    .to_vec(),
                Scalar::Float(f) if f.fract() == 0.0 && f.is_finite() => <$t>::try_from(f as i128)
                    .map_err(|_| out_of_range(f as i128))?
                    .to_le_bytes()
                    .to_vec(),
                other => {
                    return Err(Error::arg(
                        "value",
                        format!("{other:?} is not an integer, as {} needs", display(dtype)),
                    ))
                }
            }
        };
    }
    let real = |v: Scalar| -> Result<f64> {
        match v {
            Scalar::Int(i) => Ok(i as f64),
            Scalar::Float(f) => Ok(f),
            Scalar::Complex(..) => Err(Error::arg(
                "value",
                format!(
                    "a complex value needs a complex type, not {}",
                    display(dtype)
                ),
            )),
        }
    };
    Ok(match dtype {
        Dtype::Bool => match value {
            Scalar::Int(0) => vec![0],
            Scalar::Int(1) => vec![1],
            other => {
                return Err(Error::arg(
                    "value",
                    format!("{other:?} is not 0 or 1, as :bool needs"),
                ))
            }
        },
        Dtype::Uint8 => int!(u8),
        Dtype::Uint16 => int!(u16),
        Dtype::Uint32 => int!(u32),
        Dtype::Uint64 => int!(u64),
        Dtype::Int8 => int!(i8),
        Dtype::Int16 => int!(i16),
        Dtype::Int32 => int!(i32),
        Dtype::Int64 => int!(i64),
        Dtype::Float16 => f16::from_f64(real(value)?).to_le_bytes().to_vec(),
        Dtype::Bfloat16 => bf16::from_f64(real(value)?).to_le_bytes().to_vec(),
        Dtype::Float32 => (real(value)? as f32).to_le_bytes().to_vec(),
        Dtype::Float64 => real(value)?.to_le_bytes().to_vec(),
        Dtype::Complex64 => {
            let (re, im) = match value {
                Scalar::Complex(re, im) => (re, im),
                other => (real(other)?, 0.0),
            };
            let mut bytes = (re as f32).to_le_bytes().to_vec();
            bytes.extend_from_slice(&(im as f32).to_le_bytes());
            bytes
        }
    })
}

/// A rank-0 array holding `value` as `dtype`.
pub fn scalar(value: Scalar, dtype: Dtype) -> Result<Array> {
    array_from_bytes(&scalar_bytes(value, dtype)?, &[], dtype)
}

/// A tensor of `shape` filled with `value`: MLX's `full`, whose evaluated
/// result is a contiguous buffer of its own (as Python's `mx.full` gives
/// it), not a broadcast view of one value that every consumer needing
/// contiguous data (a collective, a kernel's contiguous path) would copy
/// again at each use.
pub fn full(value: Scalar, dtype: Dtype, shape: &[i32]) -> Result<Array> {
    let s = scalar(value, dtype)?;
    // SAFETY: one mlx-c call writing a new array; `s` and `shape` outlive it.
    unsafe {
        crate::mlx_c::new_array("full", |res, stream| {
            mlx_sys::mlx_full(
                res,
                shape.as_ptr(),
                shape.len(),
                s.as_ptr(),
                dtype.into(),
                stream,
            )
        })
    }
    .map_err(Error::Mlx)
}

/// `0, 1, ..., n-1` along `axis` of `shape` (Nx's iota); the whole tensor
/// counted row-major when `axis` is `None`.
pub fn iota(dtype: Dtype, shape: &[i32], axis: Option<i64>) -> Result<Array> {
    match axis {
        None => {
            let n = crate::host::element_count("shape", shape)?;
            let n =
                i32::try_from(n).map_err(|_| Error::arg("shape", "too many elements for iota"))?;
            let flat = ops::arange::<i32, i32>(0, n, None)?.as_dtype(dtype)?;
            Ok(ops::reshape(&flat, shape)?)
        }
        Some(axis) => {
            let axis = super::check_axis("axis", axis, shape.len())? as usize;
            let n = shape[axis];
            let line = ops::arange::<i32, i32>(0, n, None)?.as_dtype(dtype)?;
            let mut line_shape = vec![1; shape.len()];
            line_shape[axis] = n;
            Ok(ops::broadcast_to(ops::reshape(&line, &line_shape)?, shape)?)
        }
    }
}

/// An `n × m` matrix with ones on the diagonal.
pub fn eye(n: i32, m: i32, dtype: Dtype) -> Result<Array> {
    if n < 0 || m < 0 {
        return Err(Error::arg(
            "shape",
            format!("{n} × {m} has a negative dimension"),
        ));
    }
    let rows = ops::arange::<i32, i32>(0, n, None)?.reshape(&[n, 1])?;
    let cols = ops::arange::<i32, i32>(0, m, None)?.reshape(&[1, m])?;
    Ok(ops::eq(&rows, &cols)?.as_dtype(dtype)?)
}
