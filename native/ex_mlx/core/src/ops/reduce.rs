//! Reductions over axes.

use mlx_rs::{ops, Array};

use super::{check_axes, check_axis};
use crate::error::{Error, Result};

pub const REDUCE: &[&str] = &["sum", "product", "min", "max", "all", "any", "mean"];

/// Reduces `a` over `axes` (all axes when `None`), keeping them as size-1
/// dimensions when `keep_dims`.
pub fn reduce(op: &str, a: &Array, axes: Option<&[i64]>, keep_dims: bool) -> Result<Array> {
    let axes: Vec<i32> = match axes {
        Some(axes) => check_axes("axes", axes, a.ndim())?,
        None => (0..a.ndim() as i32).collect(),
    };
    let out = match op {
        "sum" => a.sum_axes(&axes, keep_dims),
        "product" => a.prod_axes(&axes, keep_dims),
        "min" => a.min_axes(&axes, keep_dims),
        "max" => a.max_axes(&axes, keep_dims),
        "all" => a.all_axes(&axes, keep_dims),
        "any" => a.any_axes(&axes, keep_dims),
        "mean" => a.mean_axes(&axes, keep_dims),
        _ => return Err(super::unknown_op("reduction", op, REDUCE)),
    };
    if (op == "min" || op == "max") && a.size() == 0 && !axes.is_empty() {
        return Err(Error::arg(
            "tensor",
            format!("cannot take the {op} of an empty tensor"),
        ));
    }
    Ok(out?)
}

/// Index of the minimum or maximum along `axis` (of the flattened tensor when
/// `None`); ties go to the lowest index.
pub fn arg_reduce(op: &str, a: &Array, axis: Option<i64>, keep_dims: bool) -> Result<Array> {
    if a.size() == 0 {
        return Err(Error::arg(
            "tensor",
            format!("cannot take the {op} of an empty tensor"),
        ));
    }
    let flattened = axis.is_none();
    let (input, axis) = match axis {
        Some(axis) => (a.clone(), check_axis("axis", axis, a.ndim())?),
        None => (ops::reshape(a, &[-1])?, 0),
    };
    let keep_axis = keep_dims && !flattened;
    let out = match op {
        "argmax" => ops::indexing::argmax_axis(&input, axis, keep_axis),
        "argmin" => ops::indexing::argmin_axis(&input, axis, keep_axis),
        _ => {
            return Err(super::unknown_op(
                "arg reduction",
                op,
                &["argmax", "argmin"],
            ))
        }
    }?;
    if flattened && keep_dims {
        // One element, with every axis of the input kept at size 1.
        return Ok(ops::reshape(&out, &vec![1; a.ndim()])?);
    }
    Ok(out)
}
