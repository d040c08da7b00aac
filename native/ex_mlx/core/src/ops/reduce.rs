//! Reductions over axes.

use mlx_rs::{ops, Array};

use super::{check_axes, check_axis};
use crate::error::{Error, Result};

type MlxResult = mlx_rs::error::Result<Array>;

/// `f(a)`, computed in float32 when `a` is a 16-bit float (f16, bf16) and
/// the result cast back to `a`'s type: MLX 0.32's CPU sums, products, means
/// and scans accumulate in the input's own type, so a sum of 10,000 f16
/// values of 0.1 was 256.0 (bf16: 32.0) where Nx.BinaryBackend, which
/// accumulates in f64 and rounds once, gives 1000.0. For the reductions of
/// the op table that add or multiply (`sum`, `product`, `mean`, the
/// cumulative and window sums and products).
pub fn in_f32_for_halves(a: &Array, f: impl FnOnce(&Array) -> Result<Array>) -> Result<Array> {
    match a.dtype() {
        mlx_rs::Dtype::Float16 | mlx_rs::Dtype::Bfloat16 => {
            let wide = a.as_dtype(mlx_rs::Dtype::Float32)?;
            Ok(f(&wide)?.as_dtype(a.dtype())?)
        }
        _ => f(a),
    }
}

/// The sum over `axes` (all when `None`; f16 and bf16 in float32, as
/// [`in_f32_for_halves`] says): MLX's sum.
pub fn sum(a: &Array, axes: Option<Vec<i64>>, keep_dims: bool) -> Result<Array> {
    in_f32_for_halves(a, |t| {
        let axes = axes_or_all(axes, t.ndim())?;
        Ok(t.sum_axes(&axes, keep_dims)?)
    })
}

/// The mean over `axes`, as [`sum`]: MLX's mean.
pub fn mean(a: &Array, axes: Option<Vec<i64>>, keep_dims: bool) -> Result<Array> {
    in_f32_for_halves(a, |t| {
        let axes = axes_or_all(axes, t.ndim())?;
        Ok(t.mean_axes(&axes, keep_dims)?)
    })
}

/// `f(a, axes, keep_dims)` over `axes` (all axes when `None`), keeping them
/// as size-1 dimensions when `keep_dims`.
pub fn over(
    a: &Array,
    axes: Option<Vec<i64>>,
    keep_dims: bool,
    f: impl FnOnce(&Array, &[i32], bool) -> MlxResult,
) -> Result<Array> {
    let axes = axes_or_all(axes, a.ndim())?;
    Ok(f(a, &axes, keep_dims)?)
}

/// A reduction's `axes` checked against `rank`, or every axis for `None`.
pub fn axes_or_all(axes: Option<Vec<i64>>, rank: usize) -> Result<Vec<i32>> {
    match axes {
        Some(axes) => check_axes("axes", &axes, rank),
        None => Ok((0..rank as i32).collect()),
    }
}

/// A minimum or maximum (`name`) over axes, like [`over`]: of no elements
/// there is none, so an empty tensor is an error.
pub fn extreme(
    name: &str,
    a: &Array,
    axes: Option<Vec<i64>>,
    keep_dims: bool,
    f: impl FnOnce(&Array, &[i32], bool) -> MlxResult,
) -> Result<Array> {
    let reduces = axes.as_ref().map_or(a.ndim() > 0, |axes| !axes.is_empty());
    if a.size() == 0 && reduces {
        return Err(Error::arg(
            "tensor",
            format!("cannot take the {name} of an empty tensor"),
        ));
    }
    over(a, axes, keep_dims, f)
}

/// The index `f` (argmax or argmin, `name`) finds along `axis` (of the
/// flattened tensor when `None`); ties go to the lowest index.
pub fn arg(
    name: &str,
    a: &Array,
    axis: Option<i64>,
    keep_dims: bool,
    f: impl FnOnce(&Array, i32, bool) -> MlxResult,
) -> Result<Array> {
    if a.size() == 0 {
        return Err(Error::arg(
            "tensor",
            format!("cannot take the {name} of an empty tensor"),
        ));
    }
    let flattened = axis.is_none();
    let (input, axis) = match axis {
        Some(axis) => (a.clone(), check_axis("axis", axis, a.ndim())?),
        None => (ops::reshape(a, &[-1])?, 0),
    };
    let out = f(&input, axis, keep_dims && !flattened)?;
    if flattened && keep_dims {
        // One element, with every axis of the input kept at size 1.
        return Ok(ops::reshape(&out, &vec![1; a.ndim()])?);
    }
    Ok(out)
}
