//! Shape operations: reshape, transpose, broadcast, squeeze, expand, flip,
//! concatenate, stack, select (where), clip, pad.

use half::{bf16, f16};
use mlx_rs::{ops, Array, Dtype};

use super::creation::{scalar_bytes, Scalar};
use super::{check_axes, check_axis};
use crate::ahead::is_available;
use crate::dtype::display_shape;
use crate::error::{Error, Result};
use crate::host::{array_from_bytes, element_count};
use crate::item::Number;

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
    // A cast to bool is `x != 0` (NaN true, -0.0 false) in one pass over the
    // condition's own bytes; comparing with an integer zero promoted a u8
    // condition to i32 first. Complex conditions are compared with zero.
    let condition = match condition.dtype() {
        mlx_rs::Dtype::Bool => condition.clone(),
        mlx_rs::Dtype::Complex64 => ops::ne(condition, Array::from_int(0))?,
        _ => condition.as_dtype(mlx_rs::Dtype::Bool)?,
    };
    if let Some(out) = select_between_scalars(&condition, on_true, on_false)? {
        return Ok(out);
    }
    Ok(ops::select(&condition, on_true, on_false)?)
}

/// `condition ? a : b` for evaluated float scalars `a` and `b`, on the CPU,
/// as `cast(condition) * (a - b) + b` where that is exact: `a - b` is
/// representable in the type and the arithmetic gives back `a` and `b` bit
/// for bit (signs of zero included); `None` otherwise. MLX's CPU select is a
/// branching loop over the elements (several times the time of a multiply,
/// more when the condition is irregular, as a ReLU's mask is); Nx's
/// gradients of `max` and `min` select between 1.0 and 0.0 and between 2.0
/// and 1.0, which become a cast, and a cast and an add.
fn select_between_scalars(condition: &Array, a: &Array, b: &Array) -> Result<Option<Array>> {
    let dtype = a.dtype();
    let small = |x: &Array| x.size() == 1 && x.ndim() <= condition.ndim();
    if b.dtype() != dtype || !small(a) || !small(b) || !crate::device::Device::current_is_cpu() {
        return Ok(None);
    }
    let (Some(x), Some(y)) = (evaluated_float(a), evaluated_float(b)) else {
        return Ok(None);
    };
    // (`x`, `y` and `step` are values of the type, so these sums and
    // products are exact in it as in f64, signs of zero following the same
    // IEEE rules)
    let step = x - y;
    let exact = x.is_finite()
        && y.is_finite()
        && subtraction_is_exact(x, y, step)
        && representable(step, dtype)
        && (1.0 * step + y).to_bits() == x.to_bits()
        && (0.0 * step + y).to_bits() == y.to_bits();
    if !exact {
        return Ok(None);
    }
    let mut out = condition.as_dtype(dtype)?;
    if step != 1.0 {
        let factor = array_from_bytes(&scalar_bytes(Scalar::Float(step), dtype)?, &[], dtype)?;
        out = ops::multiply(&out, &factor)?;
    }
    // (adding +0.0 changes nothing when the step is positive: 0 * step is +0.0)
    if !(y.to_bits() == 0 && step > 0.0) {
        out = ops::add(&out, b)?;
    }
    Ok(Some(out))
}

/// The value of a one-element float array whose data is ready (`None` for
/// one still to be computed: reading it would wait for MLX mid-graph).
fn evaluated_float(a: &Array) -> Option<f64> {
    if !is_available(a) {
        return None;
    }
    match a.dtype() {
        Dtype::Float32 => a.try_as_slice::<f32>().ok()?.first().map(|&v| v as f64),
        Dtype::Float64 => a.try_as_slice::<f64>().ok()?.first().copied(),
        Dtype::Float16 => a.try_as_slice::<f16>().ok()?.first().map(|v| v.to_f64()),
        Dtype::Bfloat16 => a.try_as_slice::<bf16>().ok()?.first().map(|v| v.to_f64()),
        _ => None,
    }
}

/// Whether `step`, f64's `x - y`, is the exact difference (Knuth's TwoSum:
/// the rounding error of the subtraction is zero).
fn subtraction_is_exact(x: f64, y: f64, step: f64) -> bool {
    let back = step - x;
    let error = (x - (step - back)) + (-y - back);
    error == 0.0
}

/// Whether `v` is a value of the float type `dtype`.
fn representable(v: f64, dtype: Dtype) -> bool {
    match dtype {
        Dtype::Float32 => (v as f32) as f64 == v,
        Dtype::Float64 => true,
        Dtype::Float16 => f16::from_f64(v).to_f64() == v,
        Dtype::Bfloat16 => bf16::from_f64(v).to_f64() == v,
        _ => false,
    }
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
    // Nothing to add: the (cropped) tensor itself. MLX 0.32's CUDA backend
    // pads a rank-0 array with no widths into the pad value (Nx's
    // `pad(tensor(1), 0, [])` gave 0 on an H100).
    if pads.iter().all(|&(low, high)| low == 0 && high == 0) {
        return Ok(out);
    }
    let value = value.as_dtype(out.dtype())?;
    Ok(ops::pad(&out, ops::PadWidth::Widths(&pads), value, None)?)
}

/// `a`'s elements in a buffer of their own, row-major (MLX's `contiguous`:
/// a copy only when `a` is not row-contiguous when evaluated).
pub fn contiguous(a: &Array) -> Result<Array> {
    Ok(a.contiguous()?)
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
    // On the worker's own stream: mlx-rs's `try_index` uses the default
    // device's stream instead (the GPU in a CUDA or Metal build), which would
    // compute a CPU tensor's slice on the GPU, and refuse float64 there.
    Ok(a.try_index_device(&index[..], mlx_rs::Stream::thread_local_or_default())?)
}

/// Nx's pad: `(low, high, interior)` per axis; interior padding first, then
/// the edges (negative edges remove elements).
pub fn pad_general(a: &Array, config: &[(i64, i64, i64)], value: &Array) -> Result<Array> {
    if config.len() != a.ndim() {
        return Err(Error::arg(
            "widths",
            format!(
                "needs one entry per axis ({}), got {}",
                a.ndim(),
                config.len()
            ),
        ));
    }
    let interior: Vec<i64> = config.iter().map(|c| c.2).collect();
    let edges: Vec<(i64, i64)> = config.iter().map(|c| (c.0, c.1)).collect();
    let inner = if interior.iter().all(|&k| k == 0) {
        a.clone()
    } else {
        interior_pad(a, &interior, value)?
    };
    pad(&inner, &edges, value)
}

/// Checks that `starts` holds one integer start per axis of `shape`.
fn check_starts(starts: &Array, shape: &[i32]) -> Result<()> {
    if starts.ndim() != 1 || starts.shape()[0] as usize != shape.len() {
        return Err(Error::arg(
            "starts",
            format!(
                "needs one start per axis ({}), got shape {}",
                shape.len(),
                display_shape(starts.shape())
            ),
        ));
    }
    if starts.dtype().is_float() || starts.dtype().is_complex() {
        return Err(Error::Type("starts: start indices must be integers".into()));
    }
    Ok(())
}

/// Start, stop and strides of a block, as MLX's static slices take them.
type StaticBlock = (Vec<i32>, Vec<i32>, Vec<i32>);

/// A block of `sizes` at `starts` as MLX's static slices take it (start,
/// stop and strides, the starts clamped so that it fits in `shape`: Nx's
/// rule), when `starts` is already computed (made from host values, as a
/// program's counters are): then a slice needs no MLX ops to clamp them.
/// `None` when they are still to be computed (reading them would evaluate
/// mid-graph).
fn known_block(starts: &Array, shape: &[i32], sizes: &[i32]) -> Option<StaticBlock> {
    if !is_available(starts) {
        return None;
    }
    let buffer = crate::host::HostBuffer::in_place(starts).ok()??;
    let width = crate::dtype::size_of(starts.dtype());
    let values = buffer.bytes().chunks_exact(width).map(|b| {
        match crate::item::read(b, starts.dtype()).ok()? {
            Number::Int(i) => Some(i as i128),
            Number::UInt(u) => Some(u as i128),
            _ => None,
        }
    });
    let start: Vec<i32> = values
        .zip(shape.iter().zip(sizes))
        .map(|(v, (&d, &s))| Some(v?.clamp(0, (d - s) as i128) as i32))
        .collect::<Option<_>>()?;
    let stop = start.iter().zip(sizes).map(|(s, n)| s + n).collect();
    let strides = vec![1; start.len()];
    Some((start, stop, strides))
}

/// Clamps `starts` (checked: an integer vector, one per axis) by MLX ops so a
/// block of `sizes` fits inside `shape`, as Nx does for dynamic slices; int32.
fn clamp_starts(starts: &Array, shape: &[i32], sizes: &[i32]) -> Result<Array> {
    // Clamped in 64 bits (u64 for u64 starts, i64 otherwise: both hold every
    // start and every limit), then narrowed to i32: the clamped values fit,
    // while narrowing first would wrap a start past i32's range. The limits
    // and the zero are made in that type, so the clamp queues no casts of
    // them: a loop step clamps the starts of each of its writes.
    let limits: Vec<i64> = shape
        .iter()
        .zip(sizes)
        .map(|(&d, &s)| i64::from(d - s))
        .collect();
    let clamped = if starts.dtype() == mlx_rs::Dtype::Uint64 {
        // (unsigned starts are never below zero; every limit is)
        let limits: Vec<i64> = limits.iter().map(|&l| l.max(0)).collect();
        ops::minimum(starts, clamp_constant(&limits, true))?
    } else {
        let zero = clamp_constant(&[], false);
        let wide = starts.as_dtype(mlx_rs::Dtype::Int64)?;
        ops::minimum(ops::maximum(&wide, &zero)?, clamp_constant(&limits, false))?
    };
    Ok(clamped.as_dtype(mlx_rs::Dtype::Int32)?)
}

/// `values` as an i64 vector (u64 when `unsigned`), or the i64 scalar 0
/// for no values: one array per list of values on this thread, so the
/// clamps of writes of equal starts and shapes (a decoding step's keys and
/// values, in every layer) have equal inputs, which MLX's compile makes one
/// op of.
fn clamp_constant(values: &[i64], unsigned: bool) -> Array {
    use std::cell::RefCell;
    use std::collections::HashMap;
    // (bounded: programs' writes have few distinct shapes)
    const KEPT: usize = 256;
    thread_local! {
        static MADE: RefCell<HashMap<(bool, Vec<i64>), Array>> = RefCell::new(HashMap::new());
    }
    MADE.with(|made| {
        let mut made = made.borrow_mut();
        if let Some(a) = made.get(&(unsigned, values.to_vec())) {
            return a.clone();
        }
        let a = match (values.is_empty(), unsigned) {
            (true, _) => Array::from_slice(&[0i64], &[]),
            (false, true) => {
                let v: Vec<u64> = values.iter().map(|&l| l as u64).collect();
                Array::from_slice(&v, &[v.len() as i32])
            }
            (false, false) => Array::from_slice(values, &[values.len() as i32]),
        };
        if made.len() >= KEPT {
            made.clear();
        }
        made.insert((unsigned, values.to_vec()), a.clone());
        a
    })
}

/// A block of `sizes` starting at `starts` (a tensor, so it can come from a
/// computation), clamped to fit (Nx's slice with tensor starts).
pub fn dynamic_slice(a: &Array, starts: &Array, sizes: &[i32]) -> Result<Array> {
    if sizes.len() != a.ndim() {
        return Err(Error::arg(
            "lengths",
            format!(
                "needs one length per axis ({}), got {}",
                a.ndim(),
                sizes.len()
            ),
        ));
    }
    for (axis, (&s, &d)) in sizes.iter().zip(a.shape()).enumerate() {
        if s > d {
            return Err(Error::arg(
                "lengths",
                format!("axis {axis}: length {s} exceeds the dimension {d}"),
            ));
        }
    }
    if a.ndim() == 0 {
        return Ok(a.clone());
    }
    check_starts(starts, a.shape())?;
    match Block::locate(starts, a.shape(), sizes)? {
        // SAFETY: one mlx-c call; the array and the three slices outlive it.
        Block::Known((start, stop, strides)) => unsafe {
            super::raw::op("slice", |res, s| {
                mlx_sys::mlx_slice(
                    res,
                    a.as_ptr(),
                    start.as_ptr(),
                    start.len(),
                    stop.as_ptr(),
                    stop.len(),
                    strides.as_ptr(),
                    strides.len(),
                    s,
                )
            })
        },
        Block::Computed(starts) => {
            let axes: Vec<i32> = (0..a.ndim() as i32).collect();
            // SAFETY: one mlx-c call; arrays and the axes/sizes slices outlive it.
            unsafe {
                super::raw::op("slice", |res, s| {
                    mlx_sys::mlx_slice_dynamic(
                        res,
                        a.as_ptr(),
                        starts.as_ptr(),
                        axes.as_ptr(),
                        axes.len(),
                        sizes.as_ptr(),
                        sizes.len(),
                        s,
                    )
                })
            }
        }
    }
}

/// `a` with `update` written at `starts` (clamped to fit), Nx's put_slice.
pub fn put_slice(a: &Array, starts: &Array, update: &Array) -> Result<Array> {
    put_slice_in(
        a,
        starts,
        update,
        super::convert::overwrite_as_u32_pairs(a.dtype()),
    )
}

/// [`put_slice`], writing 8-byte elements as u32 pairs when `pairs`.
fn put_slice_in(a: &Array, starts: &Array, update: &Array, pairs: bool) -> Result<Array> {
    if update.ndim() != a.ndim() {
        return Err(Error::arg(
            "update",
            format!(
                "needs the tensor's rank ({}), got {}",
                a.ndim(),
                update.ndim()
            ),
        ));
    }
    for (axis, (&u, &d)) in update.shape().iter().zip(a.shape()).enumerate() {
        if u > d {
            return Err(Error::arg(
                "update",
                format!("axis {axis}: size {u} exceeds the dimension {d}"),
            ));
        }
    }
    if a.ndim() == 0 {
        return Ok(update.as_dtype(a.dtype())?);
    }
    check_starts(starts, a.shape())?;
    let update = update.as_dtype(a.dtype())?;
    let block = Block::locate(starts, a.shape(), update.shape())?;
    if pairs {
        // the same write, of each element's bytes as two u32
        let pairs = write_block(
            &super::convert::as_u32_pairs(a)?,
            &super::convert::as_u32_pairs(&update)?,
            block.with_pair_axis()?,
        )?;
        return super::convert::from_u32_pairs(&pairs, a.dtype(), a.shape());
    }
    write_block(a, &update, block)
}

/// Where [`dynamic_slice`] reads and [`put_slice`] writes: a block known on
/// the host, or clamped starts computed by MLX (int32, one per axis).
enum Block {
    Known(StaticBlock),
    Computed(Array),
}

impl Block {
    /// The block of `sizes` at `starts` in an array of `shape` (starts
    /// clamped so that it fits, Nx's rule): known when the starts are
    /// ([`known_block`]), else computed.
    fn locate(starts: &Array, shape: &[i32], sizes: &[i32]) -> Result<Block> {
        Ok(match known_block(starts, shape, sizes) {
            Some(block) => Block::Known(block),
            None => Block::Computed(clamp_starts(starts, shape, sizes)?),
        })
    }

    /// The same block in an array with one more axis, of length 2, written
    /// whole ([`super::convert::as_u32_pairs`]).
    fn with_pair_axis(self) -> Result<Block> {
        Ok(match self {
            Block::Known((mut start, mut stop, mut strides)) => {
                start.push(0);
                stop.push(2);
                strides.push(1);
                Block::Known((start, stop, strides))
            }
            Block::Computed(starts) => {
                let zero = Array::from_slice(&[0i32], &[1]);
                Block::Computed(ops::concatenate(&[starts, zero], 0)?)
            }
        })
    }
}

/// `a` with `update` written at `block`.
fn write_block(a: &Array, update: &Array, block: Block) -> Result<Array> {
    match block {
        // SAFETY: one mlx-c call; the arrays and the three slices outlive it.
        Block::Known((start, stop, strides)) => unsafe {
            super::raw::op("put_slice", |res, s| {
                mlx_sys::mlx_slice_update(
                    res,
                    a.as_ptr(),
                    update.as_ptr(),
                    start.as_ptr(),
                    start.len(),
                    stop.as_ptr(),
                    stop.len(),
                    strides.as_ptr(),
                    strides.len(),
                    s,
                )
            })
        },
        Block::Computed(starts) => {
            let axes: Vec<i32> = (0..a.ndim() as i32).collect();
            // SAFETY: one mlx-c call; arrays and the axes slice outlive it.
            unsafe {
                super::raw::op("put_slice", |res, s| {
                    mlx_sys::mlx_slice_update_dynamic(
                        res,
                        a.as_ptr(),
                        update.as_ptr(),
                        starts.as_ptr(),
                        axes.as_ptr(),
                        axes.len(),
                        s,
                    )
                })
            }
        }
    }
}

/// Inserts `interior[i]` copies of `value` between neighbouring elements of
/// each axis (the interior part of Nx's pad).
pub fn interior_pad(a: &Array, interior: &[i64], value: &Array) -> Result<Array> {
    if interior.len() != a.ndim() {
        return Err(Error::arg(
            "interior",
            format!(
                "needs one entry per axis ({}), got {}",
                a.ndim(),
                interior.len()
            ),
        ));
    }
    let mut out = a.clone();
    for (axis, &k) in interior.iter().enumerate() {
        if k < 0 {
            return Err(Error::arg(
                "interior",
                format!("axis {axis}: {k} is negative"),
            ));
        }
        let n = out.shape()[axis];
        if k == 0 || n <= 1 {
            continue;
        }
        let k =
            i32::try_from(k).map_err(|_| Error::arg("interior", format!("{k} is too large")))?;
        // Stack each element with k fill values after it, along a new axis
        // right after `axis`, merge the two, then drop the trailing fill.
        let mut fill_shape = out.shape().to_vec();
        fill_shape.insert(axis + 1, k);
        let fill = ops::broadcast_to(value.as_dtype(out.dtype())?, &fill_shape)?;
        let expanded = ops::expand_dims_axes(&out, &[axis as i32 + 1])?;
        let joined = ops::concatenate(&[expanded, fill], axis as i32 + 1)?;
        let mut merged_shape = out.shape().to_vec();
        merged_shape[axis] = n * (k + 1);
        let merged = ops::reshape(&joined, &merged_shape)?;
        let keep = n + (n - 1) * k;
        let mut starts = vec![0i64; out.ndim()];
        let mut stops: Vec<i64> = merged_shape.iter().map(|&d| d as i64).collect();
        stops[axis] = keep as i64;
        starts[axis] = 0;
        out = slice(&merged, &starts, &stops, &vec![1; out.ndim()])?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    #[test]
    fn select_takes_on_true_where_the_condition_is_non_zero() {
        let (from_u8, from_f32, from_i64) = run_blocking(Device::Cpu, || {
            let on_true = Array::from_slice(&[1i32, 2, 3, 4], &[4]);
            let on_false = Array::from_int(-1);
            let c8 = Array::from_slice(&[0u8, 1, 2, 255], &[4]);
            // NaN and any non-zero value count as true, -0.0 as false (Nx's rule: x != 0)
            let cf = Array::from_slice(&[-0.0f32, f32::NAN, 0.5, 0.0], &[4]);
            let ci = Array::from_slice(&[i64::MIN, 0, -1, 1 << 40], &[4]);
            Ok((
                select(&c8, &on_true, &on_false)?.as_slice::<i32>().to_vec(),
                select(&cf, &on_true, &on_false)?.as_slice::<i32>().to_vec(),
                select(&ci, &on_true, &on_false)?.as_slice::<i32>().to_vec(),
            ))
        })
        .unwrap();
        assert_eq!(from_u8, vec![-1, 2, 3, 4]);
        assert_eq!(from_f32, vec![-1, 2, 3, -1]);
        assert_eq!(from_i64, vec![1, -1, 3, 4]);
    }

    #[test]
    fn clamps_of_equal_writes_share_their_constants() {
        // (MLX's compile merges ops of equal inputs: two writes of one shape
        // at one computed start clamp with the same limit arrays)
        let (same, other, values) = run_blocking(Device::Cpu, || {
            // (one array: one buffer)
            let a = clamp_constant(&[3, 0], false);
            let b = clamp_constant(&[3, 0], false);
            let c = clamp_constant(&[3, 0], true);
            let handle = |a: &Array| a.as_slice::<i64>().as_ptr() as usize;
            let starts = Array::from_slice(&[-2i64, 9], &[2]);
            let clamped = clamp_starts(&starts, &[4, 2], &[1, 2])?;
            Ok((
                handle(&a) == handle(&b),
                handle(&a) != c.as_slice::<u64>().as_ptr() as usize,
                clamped.as_slice::<i32>().to_vec(),
            ))
        })
        .unwrap();
        assert!(same && other);
        assert_eq!(values, vec![0, 0]);
    }

    #[test]
    fn put_slice_writes_eight_byte_elements_as_u32_pairs_bit_for_bit() {
        // (the pair form is what MLX's CUDA backend runs for these types;
        // here it is forced on the CPU and checked against a write done by
        // hand on the host, for known and for computed starts)
        let values: Vec<i64> = vec![i64::MIN, -1, 0, 1 << 40, i64::MAX, 7, -(1 << 33), 12];
        let update: Vec<i64> = vec![-5, 1 << 62, i64::MIN + 1];
        // a 2×4 tensor, a 1×3 block at [1, 0] and at [1, 5] (clamped to [1, 1])
        let expected = {
            let (values, update) = (values.clone(), update.clone());
            move |start: usize| {
                let mut out = values.clone();
                out[4 + start..4 + start + 3].copy_from_slice(&update);
                out
            }
        };
        let results = run_blocking(Device::Cpu, move || {
            let mut results = Vec::new();
            for (col, pairs, computed) in [
                (0, true, false),
                (0, true, true),
                (5, true, false),
                (5, true, true),
                (0, false, false),
            ] {
                let a = Array::from_slice(&values, &[2, 4]);
                let u = Array::from_slice(&update, &[1, 3]);
                let starts = Array::from_slice(&[1i64, col], &[2]);
                let starts = if computed {
                    ops::add(&starts, Array::from_slice(&[0i64, 0], &[2]))?
                } else {
                    starts.eval()?;
                    starts
                };
                let out = put_slice_in(&a, &starts, &u, pairs)?;
                assert_eq!((out.dtype(), out.shape()), (Dtype::Int64, &[2, 4][..]));
                results.push((col, out.as_slice::<i64>().to_vec()));
                // u64 and complex64: the same bytes
                for dtype in [Dtype::Uint64, Dtype::Complex64] {
                    let cast = |x: &Array| super::super::convert::bitcast(x, dtype);
                    let out = put_slice_in(&cast(&a)?, &starts, &cast(&u)?, pairs)?;
                    assert_eq!(out.dtype(), dtype);
                    let back = super::super::convert::bitcast(&out, Dtype::Int64)?;
                    results.push((col, back.as_slice::<i64>().to_vec()));
                }
            }
            Ok(results)
        })
        .unwrap();
        for (col, got) in results {
            let start = if col == 0 { 0 } else { 1 };
            assert_eq!(got, expected(start), "block at [1, {col}]");
        }
    }

    /// The values of a float array as f64 bit patterns.
    fn bits(a: &Array) -> Vec<u64> {
        let wide = a.as_dtype(Dtype::Float64).unwrap();
        wide.as_slice::<f64>().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn selects_between_scalars_give_mlx_s_select_bit_for_bit() {
        let values = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.0,
            0.5,
            -3.5,
            1.0e30,
            1.0e-40,
            f64::INFINITY,
            f64::NAN,
        ];
        let (checked, fast) = run_blocking(Device::Cpu, move || {
            let condition = Array::from_slice(&[true, false, true, false, false], &[5]);
            let mut checked = 0;
            let mut fast = Vec::new();
            for dtype in [
                Dtype::Float32,
                Dtype::Float16,
                Dtype::Bfloat16,
                Dtype::Float64,
            ] {
                for &x in &values {
                    for &y in &values {
                        let scalar = |v: f64| {
                            array_from_bytes(&scalar_bytes(Scalar::Float(v), dtype)?, &[], dtype)
                        };
                        let (a, b) = (scalar(x)?, scalar(y)?);
                        mlx_rs::transforms::eval([&a, &b])?;
                        let ours = select(&condition, &a, &b)?;
                        let mlx = ops::select(&condition, &a, &b)?;
                        assert_eq!(ours.dtype(), dtype);
                        assert_eq!(ours.shape(), &[5]);
                        assert_eq!(bits(&ours), bits(&mlx), "{x} / {y} as {dtype:?}");
                        if select_between_scalars(&condition, &a, &b)?.is_some() {
                            fast.push((dtype, x.to_bits(), y.to_bits()));
                        }
                        checked += 1;
                    }
                }
            }
            Ok((checked, fast))
        })
        .unwrap();
        assert_eq!(checked, 4 * 11 * 11);
        // Nx's gradients of max and min: 1.0 / 0.0 and 2.0 / 1.0, in every float type
        for dtype in [
            Dtype::Float32,
            Dtype::Float16,
            Dtype::Bfloat16,
            Dtype::Float64,
        ] {
            for (x, y) in [(1.0f64, 0.0f64), (2.0, 1.0)] {
                assert!(
                    fast.contains(&(dtype, x.to_bits(), y.to_bits())),
                    "{x} / {y} as {dtype:?}"
                );
            }
        }
        // never where a - b is inexact or a branch is -0.0 against +0.0, infinite or NaN
        for (_, x, y) in &fast {
            let (x, y) = (f64::from_bits(*x), f64::from_bits(*y));
            assert!(x.is_finite() && y.is_finite(), "{x} / {y}");
            assert!(!(x == 1.0e30 && y.abs() == 1.0), "{x} / {y}");
            assert!(
                !(x.to_bits() == (-0.0f64).to_bits() && y.to_bits() == 0),
                "{x} / {y}"
            );
        }
    }

    #[test]
    fn a_branch_still_to_be_computed_takes_mlx_s_select() {
        let fast = run_blocking(Device::Cpu, || {
            let condition = Array::from_slice(&[true, false], &[2]);
            let one = Array::from_slice(&[1.0f32], &[]);
            let zero = Array::from_slice(&[0.0f32], &[]);
            mlx_rs::transforms::eval([&one, &zero])?;
            let pending = ops::add(&one, &zero)?;
            let out = select(&condition, &pending, &zero)?;
            Ok((
                select_between_scalars(&condition, &pending, &zero)?.is_some(),
                out.as_slice::<f32>().to_vec(),
            ))
        })
        .unwrap();
        assert_eq!(fast, (false, vec![1.0, 0.0]));
    }
}
