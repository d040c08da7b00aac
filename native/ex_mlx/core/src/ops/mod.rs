//! MLX operations: [`table`] declares every op; the families below hold
//! what is more than one MLX call, checking arguments before MLX sees them
//! so that errors name the argument.

pub mod admitted;
pub mod bitwise;
pub mod computed;
pub mod conv;
pub mod convert;
pub mod creation;
pub mod cumulative;
pub mod elementwise;
pub mod fast;
pub mod fft;
pub mod gemv;
mod householder;
pub mod indexing;
pub mod linalg;
pub mod nx_linalg;
pub mod params;
pub mod precise;
pub mod quantization;
pub mod raw;
pub mod reduce;
pub mod shape;
pub mod sort;
pub mod table;
pub mod window;

use crate::error::{Error, Result};
use table::Op;

/// Whether MLX's cost for `op` grows with the elements it reads and writes
/// and no faster: element-wise ops, creations, rearrangements and
/// reductions that are not over windows (a window reduction reads each
/// element once per window; products, sorts, convolutions and the like
/// grow faster).
pub fn linear_cost(op: Op) -> bool {
    match op.family() {
        "unary" | "binary" | "creation" | "shape" => true,
        "reduce" => !op.name().starts_with("window_"),
        _ => false,
    }
}

/// Checks that each named list has `expected` entries (`what` says what
/// they are for, in the error).
pub fn check_lengths(lists: &[(&'static str, usize)], expected: usize, what: &str) -> Result<()> {
    match lists.iter().find(|(_, len)| *len != expected) {
        Some(&(name, len)) => Err(Error::arg(
            name,
            format!("needs {expected} entries, {what}, got {len}"),
        )),
        None => Ok(()),
    }
}

/// Normalises `axis` (negative counts from the end) for an array of rank `rank`.
pub fn check_axis(name: &'static str, axis: i64, rank: usize) -> Result<i32> {
    let r = rank as i64;
    let normal = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&normal) {
        Ok(normal as i32)
    } else {
        Err(Error::arg(
            name,
            format!("axis {axis} is out of range for a tensor of rank {rank}"),
        ))
    }
}

/// An array of `a`'s shape (which has no elements) and of the type `f` gives
/// for one element of `a`'s type, without `f` running on `a`: MLX 0.32's
/// scans and sorts along an axis of size 0 divide by that size (SIGFPE,
/// which ended the VM).
pub fn empty_result(
    a: &mlx_rs::Array,
    f: impl FnOnce(&mlx_rs::Array) -> mlx_rs::error::Result<mlx_rs::Array>,
) -> Result<mlx_rs::Array> {
    let one = mlx_rs::ops::zeros_dtype(&[1], a.dtype())?;
    let dtype = f(&one)?.dtype();
    Ok(mlx_rs::ops::zeros_dtype(a.shape(), dtype)?)
}

/// Normalises a list of distinct axes.
pub fn check_axes(name: &'static str, axes: &[i64], rank: usize) -> Result<Vec<i32>> {
    let mut seen = vec![false; rank];
    axes.iter()
        .map(|&a| {
            let n = check_axis(name, a, rank)?;
            if std::mem::replace(&mut seen[n as usize], true) {
                return Err(Error::arg(name, format!("axis {a} appears twice")));
            }
            Ok(n)
        })
        .collect()
}

/// The six comparisons: two inputs, a boolean result.
pub const COMPARISONS: [table::Op; 6] = [
    table::Op::equal,
    table::Op::not_equal,
    table::Op::less,
    table::Op::less_equal,
    table::Op::greater,
    table::Op::greater_equal,
];

impl table::Op {
    /// Whether the op is one of [`COMPARISONS`].
    pub fn is_comparison(self) -> bool {
        COMPARISONS.contains(&self)
    }
}

/// `a · b` for row-major `a` (m × k) and `b` (k × n), in float64: the
/// reference the kernels' tests compare with.
#[cfg(test)]
pub(crate) fn matmul_f64<T: Copy + Into<f64>>(
    a: &[T],
    b: &[T],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f64> {
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|p| a[i * k + p].into() * b[p * n + j].into())
                .sum();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_are_normalised_and_checked() {
        assert_eq!(check_axis("axis", -1, 3).unwrap(), 2);
        assert_eq!(check_axis("axis", 0, 1).unwrap(), 0);
        assert!(check_axis("axis", 3, 3).is_err());
        assert!(check_axis("axis", -4, 3).is_err());
        assert!(check_axis("axis", 0, 0).is_err());
        assert_eq!(check_axes("axes", &[0, -1], 3).unwrap(), vec![0, 2]);
        let e = check_axes("axes", &[1, -2], 3).unwrap_err();
        assert_eq!(e.to_string(), "axes: axis -2 appears twice");
    }
}
