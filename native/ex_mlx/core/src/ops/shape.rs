//! Shape operations: reshape, transpose, broadcast, squeeze, expand, flip,
//! concatenate, stack, select (where), clip, pad.

use mlx_rs::{ops, Array};

use super::{check_axes, check_axis};
use crate::dtype::display_shape;
use crate::error::{Error, Result};
use crate::host::element_count;

pub fn reshape(a: &Array, shape: &[i32]) -> Result<Array> {
    let from = a.size();
    let to = element_count("shape", shape)?;
    if from != to {
        return Err(Error::arg(
            "shape",
            format!(
                "cannot reshape {} ({from} elements) to {} ({to} elements)",
                display_shape(a.shape()),
                display_shape(shape)
            ),
        ));
    }
    Ok(ops::reshape(a, shape)?)
}

/// Permutes the axes; `axes` must name every axis once.
pub fn transpose(a: &Array, axes: &[i64]) -> Result<Array> {
    if axes.len() != a.ndim() {
        return Err(Error::arg(
            "axes",
            format!(
                "a permutation of a rank {} tensor needs {} axes, got {}",
                a.ndim(),
                a.ndim(),
                axes.len()
            ),
        ));
    }
    let axes = check_axes("axes", axes, a.ndim())?;
    Ok(ops::transpose_axes(a, &axes)?)
}

pub fn broadcast_to(a: &Array, shape: &[i32]) -> Result<Array> {
    Ok(ops::broadcast_to(a, shape)?)
}

/// Removes the given size-1 axes (all size-1 axes when `None`).
pub fn squeeze(a: &Array, axes: Option<&[i64]>) -> Result<Array> {
    let axes: Vec<i32> = match axes {
        Some(axes) => check_axes("axes", axes, a.ndim())?,
        None => (0..a.ndim() as i32)
            .filter(|&i| a.shape()[i as usize] == 1)
            .collect(),
    };
    if let Some(&bad) = axes.iter().find(|&&i| a.shape()[i as usize] != 1) {
        return Err(Error::arg(
            "axes",
            format!(
                "axis {bad} has size {}; only size-1 axes can be squeezed",
                a.shape()[bad as usize]
            ),
        ));
    }
    Ok(ops::squeeze_axes(a, &axes)?)
}

/// Inserts size-1 axes at `axes` (positions in the result).
pub fn expand_dims(a: &Array, axes: &[i64]) -> Result<Array> {
    let axes = check_axes("axes", axes, a.ndim() + axes.len())?;
    Ok(ops::expand_dims_axes(a, &axes)?)
}

/// Reverses the order of elements along `axes`.
pub fn flip(a: &Array, axes: &[i64]) -> Result<Array> {
    let axes = check_axes("axes", axes, a.ndim())?;
    Ok(a.flip(mlx_rs::Axes::Axes(axes))?)
}

pub fn concatenate(arrays: &[Array], axis: i64) -> Result<Array> {
    let first = arrays
        .first()
        .ok_or_else(|| Error::arg("tensors", "needs at least one tensor"))?;
    let axis = check_axis("axis", axis, first.ndim())?;
    Ok(ops::concatenate(arrays, axis)?)
}

pub fn stack(arrays: &[Array], axis: i64) -> Result<Array> {
    let first = arrays
        .first()
        .ok_or_else(|| Error::arg("tensors", "needs at least one tensor"))?;
    let axis = check_axis("axis", axis, first.ndim() + 1)?;
    Ok(ops::stack(arrays, axis)?)
}

/// `condition ? on_true : on_false`, element-wise, with broadcasting.
pub fn select(condition: &Array, on_true: &Array, on_false: &Array) -> Result<Array> {
    let condition = if condition.dtype() == mlx_rs::Dtype::Bool {
        condition.clone()
    } else {
        ops::ne(condition, Array::from_int(0))?
    };
    Ok(ops::select(&condition, on_true, on_false)?)
}

/// Clamps `a` into `[min, max]` (arrays broadcast against `a`).
pub fn clip(a: &Array, min: &Array, max: &Array) -> Result<Array> {
    Ok(ops::minimum(ops::maximum(a, min)?, max)?)
}

/// Pads each axis with `(low, high)` copies of `value` (a scalar array);
/// negative amounts remove elements.
pub fn pad(a: &Array, widths: &[(i64, i64)], value: &Array) -> Result<Array> {
    if widths.len() != a.ndim() {
        return Err(Error::arg(
            "widths",
            format!(
                "needs one (low, high) pair per axis ({}), got {}",
                a.ndim(),
                widths.len()
            ),
        ));
    }
    let mut out = a.clone();
    // Negative widths crop: slice them away first.
    let mut pads = Vec::with_capacity(widths.len());
    for (axis, &(low, high)) in widths.iter().enumerate() {
        let size = out.shape()[axis] as i64;
        let crop_low = (-low).max(0);
        let crop_high = (-high).max(0);
        if crop_low + crop_high > size {
            return Err(Error::arg(
                "widths",
                format!("axis {axis}: removing {crop_low} + {crop_high} elements from {size}"),
            ));
        }
        if crop_low > 0 || crop_high > 0 {
            let idx = ops::arange::<i32, i32>(crop_low as i32, (size - crop_high) as i32, None)?;
            out = out.take_axis(&idx, axis as i32)?;
        }
        let to_i32 = |n: i64| {
            i32::try_from(n.max(0)).map_err(|_| Error::arg("widths", format!("{n} is too large")))
        };
        pads.push((to_i32(low)?, to_i32(high)?));
    }
    let value = value.as_dtype(out.dtype())?;
    Ok(ops::pad(&out, ops::PadWidth::Widths(&pads), value, None)?)
}

/// The elements `starts[i] .. stops[i]` (every `strides[i]`-th) of each axis:
/// a view, not a copy, until something forces it.
pub fn slice(a: &Array, starts: &[i64], stops: &[i64], strides: &[i64]) -> Result<Array> {
    use mlx_rs::ops::indexing::{ArrayIndex, IntoStrideBy, TryIndexOp};
    let rank = a.ndim();
    for (name, list) in [("starts", starts), ("stops", stops), ("strides", strides)] {
        if list.len() != rank {
            return Err(Error::arg(
                name,
                format!("needs one entry per axis ({rank}), got {}", list.len()),
            ));
        }
    }
    let mut index = Vec::with_capacity(rank);
    for axis in 0..rank {
        let dim = a.shape()[axis] as i64;
        let (start, stop, stride) = (starts[axis], stops[axis], strides[axis]);
        if !(0 <= start && start <= stop && stop <= dim) {
            return Err(Error::arg(
                "starts",
                format!("axis {axis}: {start}..{stop} is not within 0..{dim}"),
            ));
        }
        if stride < 1 {
            return Err(Error::arg(
                "strides",
                format!("axis {axis}: stride {stride} must be at least 1"),
            ));
        }
        // All three fit in i32: they are bounded by a dimension (an i32).
        let range = (start as i32)..(stop as i32);
        index.push(
            range
                .stride_by(stride.min(i32::MAX as i64) as i32)
                .index_op(),
        );
    }
    if rank == 0 {
        return Ok(a.clone());
    }
    Ok(a.try_index(&index[..])?)
}
