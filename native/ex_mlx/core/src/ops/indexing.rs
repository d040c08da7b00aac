//! Indexing: take, take_along_axis, gather, scatter (put and add).

use mlx_rs::{ops, Array, Dtype};

use super::{check_axes, check_axis};
use crate::dtype::{display, is_integer};
use crate::error::{Error, Result};

fn check_indices(name: &'static str, indices: &Array) -> Result<()> {
    if is_integer(indices.dtype()) {
        Ok(())
    } else {
        Err(Error::Type(format!(
            "{name}: indices must be integers, got {}",
            display(indices.dtype())
        )))
    }
}

/// Elements of `a` at `indices` along `axis` (the axis is replaced by the
/// indices' shape).
pub fn take(a: &Array, indices: &Array, axis: i64) -> Result<Array> {
    check_indices("indices", indices)?;
    let axis = check_axis("axis", axis, a.ndim())?;
    Ok(a.take_axis(indices, axis)?)
}

/// `a[..., indices[..., i, ...], ...]` along `axis`; `indices` has `a`'s rank.
pub fn take_along_axis(a: &Array, indices: &Array, axis: i64) -> Result<Array> {
    check_indices("indices", indices)?;
    if indices.ndim() != a.ndim() {
        return Err(Error::arg(
            "indices",
            format!(
                "must have the tensor's rank ({}), got {}",
                a.ndim(),
                indices.ndim()
            ),
        ));
    }
    let axis = check_axis("axis", axis, a.ndim())?;
    Ok(ops::indexing::take_along_axis(a, indices, axis)?)
}

/// Moves `axes` to the front and merges them into one axis of size
/// prod(dims), returning that view, the merged size and the strides of the
/// merged axes (for linear indices).
fn merge_axes(a: &Array, axes: &[i32]) -> Result<(Array, Vec<i32>, Vec<i32>)> {
    let rank = a.ndim() as i32;
    let mut perm: Vec<i32> = axes.to_vec();
    perm.extend((0..rank).filter(|i| !axes.contains(i)));
    let moved = ops::transpose_axes(a, &perm)?;
    let dims: Vec<i32> = axes.iter().map(|&i| a.shape()[i as usize]).collect();
    let rest: Vec<i32> = moved.shape()[axes.len()..].to_vec();
    let total: i32 = dims.iter().product();
    let mut shape = vec![total];
    shape.extend(&rest);
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    Ok((ops::reshape(&moved, &shape)?, perm, strides))
}

/// Linear index of each row `indices[..., :]` over axes with `strides`.
fn linear_index(indices: &Array, strides: &[i32]) -> Result<Array> {
    let k = *indices.shape().last().unwrap_or(&0) as usize;
    if k != strides.len() {
        return Err(Error::arg(
            "indices",
            format!(
                "the last axis must have one entry per indexed axis ({}), got {k}",
                strides.len()
            ),
        ));
    }
    let strides = Array::from_slice(strides, &[strides.len() as i32]);
    let idx = indices.as_dtype(Dtype::Int64)?;
    Ok(ops::multiply(&idx, strides.as_dtype(Dtype::Int64)?)?.sum_axes(&[-1], false)?)
}

/// Nx's gather: for each row of `indices` (shape `{..., k}`), the slice of `a`
/// at those positions of `axes` (k of them), full along the other axes.
pub fn gather(a: &Array, indices: &Array, axes: &[i64]) -> Result<Array> {
    check_indices("indices", indices)?;
    let axes = check_axes("axes", axes, a.ndim())?;
    if indices.ndim() == 0 {
        return Err(Error::arg("indices", "must have rank 1 or more"));
    }
    let (merged, _, strides) = merge_axes(a, &axes)?;
    let linear = linear_index(indices, &strides)?;
    Ok(merged.take_axis(&linear, 0)?)
}

/// Nx's indexed_put / indexed_add: writes (or adds) `updates` at the
/// positions given by the rows of `indices` over `axes`.
pub fn scatter(
    a: &Array,
    indices: &Array,
    updates: &Array,
    axes: &[i64],
    add: bool,
) -> Result<Array> {
    let pairs = super::convert::overwrite_as_u32_pairs(a.dtype());
    if add && pairs {
        // a sum of 8-byte elements, which MLX's CUDA scatter cannot do and
        // u32 pairs cannot carry: on a CPU stream of this thread (as the
        // ops MLX runs on the CPU only, `Op::apply`)
        return crate::worker::on_cpu_stream(|| scatter_in(a, indices, updates, axes, true, false));
    }
    scatter_in(a, indices, updates, axes, add, pairs)
}

/// [`scatter`], writing 8-byte elements as u32 pairs when `pairs`.
fn scatter_in(
    a: &Array,
    indices: &Array,
    updates: &Array,
    axes: &[i64],
    add: bool,
    pairs: bool,
) -> Result<Array> {
    check_indices("indices", indices)?;
    let checked = check_axes("axes", axes, a.ndim())?;
    if indices.ndim() == 0 {
        return Err(Error::arg("indices", "must have rank 1 or more"));
    }
    let (merged, perm, strides) = merge_axes(a, &checked)?;
    let linear = linear_index(indices, &strides)?.reshape(&[-1])?;
    let n = linear.shape()[0];
    // updates: one slice per index row, over the axes that were not indexed.
    let mut update_shape = vec![n];
    update_shape.extend(&merged.shape()[1..]);
    let updates = ops::reshape(updates.as_dtype(a.dtype())?, &update_shape).map_err(|_| {
        Error::arg(
            "updates",
            format!(
                "expected {} elements for {n} index rows, got {}",
                update_shape.iter().map(|&d| d as usize).product::<usize>(),
                updates.size()
            ),
        )
    })?;
    if pairs {
        // the same write, of each element's bytes as two u32 (a last axis
        // of length 2 that no index names)
        let written = scatter_in(
            &super::convert::as_u32_pairs(a)?,
            indices,
            &super::convert::as_u32_pairs(&updates)?,
            axes,
            false,
            false,
        )?;
        return super::convert::from_u32_pairs(&written, a.dtype(), a.shape());
    }
    let axes = checked;
    // scatter_single wants updates shaped [n, 1, rest...] for axis 0.
    let mut expanded = vec![n, 1];
    expanded.extend(&merged.shape()[1..]);
    let updates = ops::reshape(&updates, &expanded)?;
    let written = if add {
        ops::indexing::scatter_add_single(&merged, &linear, &updates, 0)?
    } else {
        ops::indexing::scatter_single(&merged, &linear, &updates, 0)?
    };
    // Undo the merge: split the front axis, then invert the permutation.
    let mut moved_shape: Vec<i32> = axes.iter().map(|&i| a.shape()[i as usize]).collect();
    moved_shape.extend(&merged.shape()[1..]);
    let moved = ops::reshape(&written, &moved_shape)?;
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as i32;
    }
    Ok(ops::transpose_axes(&moved, &inverse)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    #[test]
    fn scatter_writes_eight_byte_elements_as_u32_pairs_bit_for_bit() {
        // (the pair form is what MLX's CUDA backend runs for these types;
        // here it is forced on the CPU and checked against a write done by
        // hand on the host)
        let values: Vec<i64> = vec![i64::MIN, -1, 0, 1 << 40, i64::MAX, 7];
        let updates: Vec<i64> = vec![1 << 62, -3, i64::MIN + 5];
        // a 3×2 tensor; rows 2 and 0 of axis 0 get a whole row each, then
        // one element at [1, 1]
        let mut rows = values.clone();
        rows[4..6].copy_from_slice(&updates[0..2]);
        rows[0..2].copy_from_slice(&[updates[2], updates[2]]);
        let mut element = values.clone();
        element[3] = updates[1];
        let got = run_blocking(Device::Cpu, move || {
            let mut got = Vec::new();
            for pairs in [true, false] {
                let a = Array::from_slice(&values, &[3, 2]);
                let rows_at = Array::from_slice(&[2i32, 0], &[2, 1]);
                let row_updates =
                    Array::from_slice(&[updates[0], updates[1], updates[2], updates[2]], &[2, 2]);
                let at = Array::from_slice(&[1i32, 1], &[1, 2]);
                let one = Array::from_slice(&[updates[1]], &[1]);
                for dtype in [Dtype::Int64, Dtype::Uint64, Dtype::Complex64] {
                    let cast = |x: &Array| super::super::convert::bitcast(x, dtype);
                    let read = |x: Array| -> Result<Vec<i64>> {
                        assert_eq!(x.dtype(), dtype);
                        let back = super::super::convert::bitcast(&x, Dtype::Int64)?;
                        Ok(back.as_slice::<i64>().to_vec())
                    };
                    let by_rows = scatter_in(
                        &cast(&a)?,
                        &rows_at,
                        &cast(&row_updates)?,
                        &[0],
                        false,
                        pairs,
                    )?;
                    let by_element =
                        scatter_in(&cast(&a)?, &at, &cast(&one)?, &[0, 1], false, pairs)?;
                    got.push((pairs, dtype, read(by_rows)?, read(by_element)?));
                }
            }
            Ok(got)
        })
        .unwrap();
        for (pairs, dtype, by_rows, by_element) in got {
            assert_eq!(by_rows, rows, "rows, pairs: {pairs}, {dtype:?}");
            assert_eq!(by_element, element, "element, pairs: {pairs}, {dtype:?}");
        }
    }
}
