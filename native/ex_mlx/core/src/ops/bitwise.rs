//! Bitwise operations on integer (and bool) tensors.
//!
//! mlx-rs 0.33 does not wrap MLX's bitwise ops, so they are called through
//! mlx-sys here. Arguments are checked first (integer types, shapes that
//! broadcast), so MLX has nothing left to reject in practice.

use mlx_rs::{ops, Array, Dtype};
use mlx_sys::{mlx_array, mlx_stream};

use crate::dtype::broadcast_shape;
use crate::dtype::{display, size_of};
use crate::error::{Error, Result};

/// An mlx-c binary bitwise function (`mlx_sys::mlx_bitwise_and`, ...).
pub type RawBinary = unsafe extern "C" fn(*mut mlx_array, mlx_array, mlx_array, mlx_stream) -> i32;
type RawUnary = unsafe extern "C" fn(*mut mlx_array, mlx_array, mlx_stream) -> i32;

fn check_integer(name: &'static str, a: &Array) -> Result<()> {
    if a.dtype().is_float() || a.dtype().is_complex() {
        return Err(Error::Type(format!(
            "{name}: bitwise operations need integer types, got {}",
            display(a.dtype())
        )));
    }
    Ok(())
}

/// `a op b` with broadcasting, `op` being the mlx-c function `f` (`name`
/// for errors).
pub fn binary(name: &str, f: RawBinary, a: &Array, b: &Array) -> Result<Array> {
    check_integer("a", a)?;
    check_integer("b", b)?;
    broadcast_shape(a.shape(), b.shape())?;
    // SAFETY: one mlx-c call; `a` and `b` are live arrays for its duration.
    unsafe { super::raw::op(name, |res, s| f(res, a.as_ptr(), b.as_ptr(), s)) }
}

/// `a << b` (`left`) or `a >> b` with Nx's result for every count: MLX
/// shifts with C's `<<` and `>>`, whose result for a count outside
/// `0..bits` is the processor's (x86 masks the count: `1 << 32` gave 1).
/// Here such a count shifts every bit out: 0, or -1 for `>>` of a negative
/// signed value, as Nx.BinaryBackend computes it. (Counts known to be in
/// range, a small computed `b` read here, skip the check.)
pub fn shift(name: &str, f: RawBinary, left: bool, a: &Array, b: &Array) -> Result<Array> {
    let out = binary(name, f, a, b)?;
    let dtype = out.dtype();
    if dtype == Dtype::Bool {
        return Ok(out);
    }
    let bits = (size_of(dtype) * 8) as i128;
    if counts_in_range(b, bits) == Some(true) {
        return Ok(out);
    }
    let counts = b.as_dtype(dtype)?;
    let zero = Array::from_int(0).as_dtype(dtype)?;
    let width = Array::from_int(bits as i32).as_dtype(dtype)?;
    let too_far = ops::logical_or(ops::lt(&counts, &zero)?, ops::ge(&counts, &width)?)?;
    let signed = !matches!(
        dtype,
        Dtype::Uint8 | Dtype::Uint16 | Dtype::Uint32 | Dtype::Uint64
    );
    let fill = if left || !signed {
        zero.clone()
    } else {
        let minus_one = Array::from_int(-1).as_dtype(dtype)?;
        ops::select(&ops::lt(&a.as_dtype(dtype)?, &zero)?, &minus_one, &zero)?
    };
    Ok(ops::select(&too_far, &fill, &out)?)
}

/// Whether every count in `b` lies in `0..bits`, when `b` is small and
/// already computed (its values read here); `None` otherwise.
fn counts_in_range(b: &Array, bits: i128) -> Option<bool> {
    if b.size() > 64 || !crate::ahead::is_available(b) {
        return None;
    }
    let counts = crate::item::integers(b)?;
    Some(counts.iter().all(|v| (0..bits).contains(v)))
}

/// `~a` (logical not for `:bool`).
pub fn bitwise_not(a: &Array) -> Result<Array> {
    check_integer("tensor", a)?;
    let f: RawUnary = mlx_sys::mlx_bitwise_invert;
    // SAFETY: one mlx-c call; `a` is a live array for its duration.
    unsafe { super::raw::op("bitwise_not", |res, s| f(res, a.as_ptr(), s)) }
}

fn unsigned_of(dtype: Dtype) -> Result<Dtype> {
    Ok(match size_of(dtype) {
        1 => Dtype::Uint8,
        2 => Dtype::Uint16,
        4 => Dtype::Uint32,
        8 => Dtype::Uint64,
        _ => {
            return Err(Error::Internal(format!(
                "no unsigned type for {}",
                display(dtype)
            )))
        }
    })
}

/// `[(x >> i) for i in 0..bits]` as unsigned values of `a`'s width.
fn shifted(a: &Array) -> Result<(Array, usize)> {
    check_integer("tensor", a)?;
    if a.dtype() == Dtype::Bool {
        return Err(Error::Type(
            "tensor: bit counting needs an integer type, got :bool".into(),
        ));
    }
    let unsigned = unsigned_of(a.dtype())?;
    let bits = size_of(a.dtype()) * 8;
    let u = a.view_dtype(unsigned)?;
    let shifts = ops::arange::<i32, i32>(0, bits as i32, None)?.as_dtype(unsigned)?;
    // [..., bits]: element i is x >> i
    let expanded = ops::expand_dims_axes(&u, &[-1])?;
    Ok((
        binary("right_shift", mlx_sys::mlx_right_shift, &expanded, &shifts)?,
        bits,
    ))
}

/// Number of set bits of each element (of its two's-complement pattern).
pub fn population_count(a: &Array) -> Result<Array> {
    let (s, _) = shifted(a)?;
    let one = Array::from_int(1).as_dtype(s.dtype())?;
    let bits = binary("bitwise_and", mlx_sys::mlx_bitwise_and, &s, &one)?;
    Ok(bits.sum_axes(&[-1], false)?.as_dtype(a.dtype())?)
}

/// Number of leading zero bits of each element.
pub fn count_leading_zeros(a: &Array) -> Result<Array> {
    let (s, bits) = shifted(a)?;
    // bit length = how many of x >> 0, x >> 1, ... are non-zero
    let length = ops::ne(&s, Array::from_int(0).as_dtype(s.dtype())?)?
        .as_dtype(Dtype::Int32)?
        .sum_axes(&[-1], false)?;
    Ok(ops::subtract(Array::from_int(bits as i32), &length)?.as_dtype(a.dtype())?)
}
