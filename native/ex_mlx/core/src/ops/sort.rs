//! Sorting: sort, argsort (stable), top_k, partition.

use mlx_rs::{ops, Array};

use super::{check_axis, empty_result};
use crate::error::{Error, Result};

/// Indices that sort `a` along `axis`; ties keep their original order, in
/// both directions.
pub fn argsort(a: &Array, axis: i64, descending: bool) -> Result<Array> {
    let axis = check_axis("axis", axis, a.ndim())?;
    if a.size() == 0 {
        // no elements, no sort (MLX's divides by the axis's size: empty_result)
        return empty_result(a, |one| ops::argsort_axis(one, 0));
    }
    if !descending {
        return Ok(ops::argsort_axis(a, axis)?);
    }
    // Stable descending: sort the reversed array ascending (ties come out in
    // reversed-original order), flip, and map positions back.
    let n = a.shape()[axis as usize];
    let reversed = a.flip(mlx_rs::Axes::Axis(axis))?;
    let order = ops::argsort_axis(&reversed, axis)?.flip(mlx_rs::Axes::Axis(axis))?;
    let last = Array::from_int(n - 1).as_dtype(order.dtype())?;
    Ok(ops::subtract(&last, &order)?)
}

/// `a` sorted along `axis`.
pub fn sort(a: &Array, axis: i64, descending: bool) -> Result<Array> {
    let order = argsort(a, axis, descending)?;
    if a.size() == 0 {
        return Ok(ops::zeros_dtype(a.shape(), a.dtype())?);
    }
    let axis = check_axis("axis", axis, a.ndim())?;
    Ok(ops::indexing::take_along_axis(a, &order, axis)?)
}

/// The `k` largest elements along the last axis, largest first, and their
/// indices (ties: lowest index first).
pub fn top_k(a: &Array, k: i64) -> Result<(Array, Array)> {
    if a.ndim() == 0 {
        return Err(Error::arg("tensor", "top_k needs rank 1 or more"));
    }
    let last = a.ndim() - 1;
    let n = a.shape()[last] as i64;
    if !(0..=n).contains(&k) {
        return Err(Error::arg("k", format!("{k} is not within 0..={n}")));
    }
    let order = argsort(a, -1, true)?;
    let mut starts = vec![0; a.ndim()];
    let mut stops: Vec<i64> = a.shape().iter().map(|&d| d as i64).collect();
    stops[last] = k;
    let strides = vec![1; a.ndim()];
    starts[last] = 0;
    let top = super::shape::slice(&order, &starts, &stops, &strides)?;
    let values = ops::indexing::take_along_axis(a, &top, -1)?;
    Ok((values, top))
}

/// `a` partitioned around its `kth` element along `axis`.
pub fn partition(a: &Array, kth: i64, axis: i64) -> Result<Array> {
    let axis = check_axis("axis", axis, a.ndim())?;
    let n = a.shape()[axis as usize] as i64;
    if !(0..n).contains(&kth) {
        return Err(Error::arg("kth", format!("{kth} is not within 0..{n}")));
    }
    Ok(ops::partition_axis(a, kth as i32, axis)?)
}
