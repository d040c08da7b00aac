//! Small float32 tensors a running program knows on the host.
//!
//! An LSTM unrolled by a `while` loop (Axon's dynamic unroll) runs a few
//! dozen ops on tensors of a few values at every step: as MLX ops, each is
//! a graph node that costs microseconds to build and to evaluate, hundreds
//! a step. Where every input of such an op is known here, it is computed
//! here, with the bits MLX's op gives because each result is exact or
//! rounded once (checked against the op table's MLX calls in the tests):
//! IEEE 754 arithmetic, comparisons, selections, maxima and minima,
//! conversions, and writes into a slice or a padding. Anything else (sums,
//! products, transcendental functions: their bits are MLX's kernels'), or
//! a tensor of more than [`MAX_ELEMENTS`] values, stays with MLX. Values are held as their bits in the parent
//! module's `values` (so that its rearrangements serve both).

use mlx_rs::Dtype;

use super::{for_each_offset, reduce_values, size, strides, HostTensor};
use crate::elementwise_fusion::{values_of, Kind};
use crate::ops::check_axis;
use crate::ops::computed::elementwise_kind;
use crate::ops::params::Param;
use crate::ops::table::Op;

/// The most values of a float32 tensor kept here.
pub const MAX_ELEMENTS: usize = 1024;

impl HostTensor {
    /// A float32 tensor of `values` in `shape`.
    pub(super) fn from_floats(shape: Vec<i32>, values: &[f32]) -> HostTensor {
        HostTensor {
            dtype: Dtype::Float32,
            shape,
            values: values.iter().map(|v| v.to_bits() as i128).collect(),
        }
    }

    /// The values of a float32 tensor (`None` for another type).
    pub(super) fn floats(&self) -> Option<Vec<f32>> {
        (self.dtype == Dtype::Float32).then(|| floats_of(&self.values))
    }

    /// Whether element `i` is non-zero, as MLX reads a condition (for
    /// float32 by value: -0.0 is zero, NaN is not).
    pub(super) fn is_set(&self, i: usize) -> bool {
        let v = self.values[i];
        if self.dtype == Dtype::Float32 {
            f32::from_bits(v as u32) != 0.0
        } else {
            v != 0
        }
    }
}

/// Whether [`apply`] is the one to compute `op` (one with float32 in it,
/// or one that copies values of any type), rather than the parent module's
/// integer arithmetic.
pub(super) fn involved(op: Op, args: &[&HostTensor], params: &[Param]) -> bool {
    // (these copy values of any type: they are computed here for all)
    matches!(
        op,
        Op::select | Op::put_slice | Op::pad | Op::take | Op::bitcast | Op::scatter
    ) || has_floats(op, args, params)
}

/// Whether `op` reads or makes float32 values: an argument of that type,
/// or a conversion or bit cast to it.
pub(super) fn has_floats(op: Op, args: &[&HostTensor], params: &[Param]) -> bool {
    args.iter().any(|a| a.dtype == Dtype::Float32)
        || matches!(
            (op, params),
            (Op::as_type | Op::bitcast, [Param::Type(Dtype::Float32)])
        )
}

/// `op` of `args` with `params` computed here, with MLX's bits; `None`
/// when it is left to MLX.
pub(super) fn apply(op: Op, args: &[&HostTensor], params: &[Param]) -> Option<HostTensor> {
    if args.iter().any(|a| a.values.len() > MAX_ELEMENTS) {
        return None;
    }
    match (op, args, params) {
        (Op::as_type, [a], [Param::Type(to)]) => as_type(a, *to),
        (Op::select, [c, a, b], []) => select(c, a, b),
        (Op::reduce_max, [a], [Param::OptInts(axes), Param::Bool(keep)]) => {
            reduce(a, axes.as_deref(), *keep, |v| extreme(v, f32::max))
        }
        (Op::reduce_min, [a], [Param::OptInts(axes), Param::Bool(keep)]) => {
            reduce(a, axes.as_deref(), *keep, |v| extreme(v, f32::min))
        }
        (Op::put_slice, [t, starts, update], []) => put_slice(t, starts, update),
        (Op::pad, [a, value], [Param::PadConfig(config)]) => pad(a, value, config),
        (Op::take, [a, indices], [Param::Int(axis)]) => take(a, indices, *axis),
        (Op::bitcast, [a], [Param::Type(to)]) => bitcast(a, *to),
        (Op::scatter, [a, indices, updates], [Param::OptInts(axes), Param::Bool(add)]) => {
            scatter(a, indices, updates, axes.as_deref(), *add)
        }
        (_, [a, b], []) => match comparison(op) {
            Some(compare) => compare_values(a, b, compare),
            None => {
                let kind = elementwise_kind(op)?;
                binary_kind(kind, a, b)
            }
        },
        (_, [a], []) => {
            let kind = elementwise_kind(op)?;
            let x = a.floats()?;
            let mut out = vec![0.0f32; x.len()];
            values_of(kind, &x, &x, &mut out);
            Some(HostTensor::from_floats(a.shape.clone(), &out))
        }
        _ => None,
    }
}

/// The shape two or three shapes broadcast to (NumPy's rule, MLX's).
fn broadcast_all(shapes: &[&[i32]]) -> Option<Vec<i32>> {
    let (first, rest) = shapes.split_first()?;
    rest.iter().try_fold(first.to_vec(), |shape, next| {
        crate::dtype::broadcast_shape(&shape, next).ok()
    })
}

/// The float32 values of `a` and `b` broadcast to their common shape.
fn both(a: &HostTensor, b: &HostTensor) -> Option<(Vec<i32>, Vec<f32>, Vec<f32>)> {
    if a.dtype != Dtype::Float32 || b.dtype != Dtype::Float32 {
        return None;
    }
    let shape = broadcast_all(&[&a.shape, &b.shape])?;
    if size(&shape) > MAX_ELEMENTS {
        return None;
    }
    let x = floats_of(&a.broadcast(&shape)?);
    let y = floats_of(&b.broadcast(&shape)?);
    Some((shape, x, y))
}

fn floats_of(bits: &[i128]) -> Vec<f32> {
    bits.iter().map(|&b| f32::from_bits(b as u32)).collect()
}

/// An exactly rounded binary `kind` (crate::elementwise_fusion) of two
/// float32 tensors.
fn binary_kind(kind: Kind, a: &HostTensor, b: &HostTensor) -> Option<HostTensor> {
    let (shape, x, y) = both(a, b)?;
    let mut out = vec![0.0f32; x.len()];
    values_of(kind, &x, &y, &mut out);
    Some(HostTensor::from_floats(shape, &out))
}

/// IEEE 754 comparisons (false against NaN, but `not_equal`).
fn comparison(op: Op) -> Option<fn(f32, f32) -> bool> {
    Some(match op {
        Op::equal => |x, y| x == y,
        Op::not_equal => |x, y| x != y,
        Op::less => |x, y| x < y,
        Op::less_equal => |x, y| x <= y,
        Op::greater => |x, y| x > y,
        Op::greater_equal => |x, y| x >= y,
        _ => return None,
    })
}

fn compare_values(
    a: &HostTensor,
    b: &HostTensor,
    compare: fn(f32, f32) -> bool,
) -> Option<HostTensor> {
    let (shape, x, y) = both(a, b)?;
    Some(HostTensor {
        dtype: Dtype::Bool,
        shape,
        values: x
            .iter()
            .zip(&y)
            .map(|(&x, &y)| compare(x, y) as i128)
            .collect(),
    })
}

/// MLX's `astype` to or from float32 (C++'s conversions): integers and
/// booleans to the nearest float32; float32 to a boolean (non-zero, NaN
/// included) or, truncated, to an integer type that holds the result
/// (`None` otherwise: the C++ conversion of such a value is undefined).
fn as_type(a: &HostTensor, to: Dtype) -> Option<HostTensor> {
    let values: Vec<i128> = match (a.dtype, to) {
        (Dtype::Float32, Dtype::Float32) => a.values.clone(),
        (Dtype::Float32, Dtype::Bool) => (0..a.values.len()).map(|i| a.is_set(i) as i128).collect(),
        (Dtype::Float32, to) => {
            let (lo, hi) = super::range(to)?;
            // (compared as integers: the bounds rounded to float32 would
            // let 2^31 through for int32)
            a.floats()?
                .iter()
                .map(|x| {
                    let t = x.trunc();
                    let v = t as i128;
                    (t.is_finite() && (lo..=hi).contains(&v)).then_some(v)
                })
                .collect::<Option<_>>()?
        }
        (from, Dtype::Float32) => {
            super::range(from)?;
            a.values
                .iter()
                .map(|&v| (v as f32).to_bits() as i128)
                .collect()
        }
        _ => return None,
    };
    Some(HostTensor {
        dtype: to,
        shape: a.shape.clone(),
        values,
    })
}

/// `select(c, a, b)`: `a` where `c` is set, else `b`, all broadcast to one
/// shape; `a` and `b` of one type (any: the values are copied).
fn select(c: &HostTensor, a: &HostTensor, b: &HostTensor) -> Option<HostTensor> {
    if a.dtype != b.dtype {
        return None;
    }
    let shape = broadcast_all(&[&c.shape, &a.shape, &b.shape])?;
    if size(&shape) > MAX_ELEMENTS {
        return None;
    }
    let c = HostTensor {
        values: c.broadcast(&shape)?,
        shape: shape.clone(),
        dtype: c.dtype,
    };
    let (x, y) = (a.broadcast(&shape)?, b.broadcast(&shape)?);
    let values = (0..x.len())
        .map(|i| if c.is_set(i) { x[i] } else { y[i] })
        .collect();
    Some(HostTensor {
        dtype: a.dtype,
        shape,
        values,
    })
}

/// A reduction of a float32 tensor over one axis or all of them, each
/// result `fold` of its values in index order (the parent module's
/// `reduce_values`).
fn reduce(
    a: &HostTensor,
    axes: Option<&[i64]>,
    keep: bool,
    fold: impl Fn(&[f32]) -> Option<f32>,
) -> Option<HostTensor> {
    let x = a.floats()?;
    let (values, shape) = reduce_values(&x, &a.shape, axes, keep, fold)?;
    Some(HostTensor::from_floats(shape, &values))
}

/// The largest (`f32::max`) or smallest (`f32::min`) of `values` where
/// that value's bits are certain: `None` where one is NaN (MLX propagates
/// one; which, is its kernel's business) or where the result is zero and
/// both signed zeros are among the values (which one MLX keeps depends on
/// its order of comparison).
fn extreme(values: &[f32], pick: fn(f32, f32) -> f32) -> Option<f32> {
    if values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let best = values.iter().copied().reduce(pick)?;
    if best == 0.0 {
        let negative = values.iter().any(|v| *v == 0.0 && v.is_sign_negative());
        let positive = values.iter().any(|v| *v == 0.0 && v.is_sign_positive());
        if negative && positive {
            return None;
        }
    }
    Some(best)
}

/// `t` with `update` (of `t`'s type and rank) written at `starts` (one per
/// axis), each clamped so that it fits (Nx's `put_slice`).
fn put_slice(t: &HostTensor, starts: &HostTensor, update: &HostTensor) -> Option<HostTensor> {
    let rank = t.shape.len();
    if update.dtype != t.dtype
        || starts.dtype == Dtype::Float32
        || update.shape.len() != rank
        || starts.values.len() != rank
        || rank == 0
    {
        return None;
    }
    let mut at = Vec::with_capacity(rank);
    for k in 0..rank {
        let (d, u) = (t.shape[k] as i128, update.shape[k] as i128);
        if u > d {
            return None;
        }
        at.push(starts.values[k].clamp(0, d - u) as usize);
    }
    let mut values = t.values.clone();
    let own = strides(&t.shape);
    let first: usize = at.iter().zip(&own).map(|(s, st)| s * st).sum();
    write_block(&mut values, first, &own, update);
    Some(HostTensor {
        dtype: t.dtype,
        shape: t.shape.clone(),
        values,
    })
}

/// `block`'s values written into `values` (a tensor's, whose strides are
/// `steps`) from position `first`, in `block`'s shape.
fn write_block(values: &mut [i128], first: usize, steps: &[usize], block: &HostTensor) {
    let mut next = block.values.iter();
    for_each_offset(&block.shape, steps, |offset| {
        if let Some(&v) = next.next() {
            values[first + offset] = v;
        }
    });
}

/// `a` padded with the one value `value` (of `a`'s type) by non-negative
/// low and high widths, without interior padding.
fn pad(a: &HostTensor, value: &HostTensor, config: &[(i64, i64, i64)]) -> Option<HostTensor> {
    if value.dtype != a.dtype || value.values.len() != 1 || config.len() != a.shape.len() {
        return None;
    }
    if config
        .iter()
        .any(|&(lo, hi, interior)| lo < 0 || hi < 0 || interior != 0)
    {
        return None;
    }
    let shape: Vec<i32> = a
        .shape
        .iter()
        .zip(config)
        .map(|(&d, &(lo, hi, _))| d + lo as i32 + hi as i32)
        .collect();
    if size(&shape) > MAX_ELEMENTS {
        return None;
    }
    let mut values = vec![value.values[0]; size(&shape)];
    let out = strides(&shape);
    let first: usize = config
        .iter()
        .zip(&out)
        .map(|(&(lo, _, _), st)| lo as usize * st)
        .sum();
    write_block(&mut values, first, &out, a);
    Some(HostTensor {
        dtype: a.dtype,
        shape,
        values,
    })
}

/// `a`'s slices along `axis` at `indices` (integers, each in range: `None`
/// otherwise), in their shape: `a`'s axes before `axis`, the indices'
/// axes, `a`'s axes after it.
fn take(a: &HostTensor, indices: &HostTensor, axis: i64) -> Option<HostTensor> {
    if indices.dtype == Dtype::Float32 || indices.dtype == Dtype::Bool {
        return None;
    }
    let axis = check_axis("axis", axis, a.shape.len()).ok()? as usize;
    let d = a.shape[axis] as i128;
    if indices.values.iter().any(|&i| !(0..d).contains(&i)) {
        return None;
    }
    let outer: usize = a.shape[..axis].iter().map(|&x| x as usize).product();
    let inner: usize = a.shape[axis + 1..].iter().map(|&x| x as usize).product();
    let mut shape = a.shape[..axis].to_vec();
    shape.extend(&indices.shape);
    shape.extend(&a.shape[axis + 1..]);
    if size(&shape) > MAX_ELEMENTS {
        return None;
    }
    let mut values = Vec::with_capacity(size(&shape));
    for o in 0..outer {
        for &i in &indices.values {
            let start = (o * d as usize + i as usize) * inner;
            values.extend_from_slice(&a.values[start..start + inner]);
        }
    }
    Some(HostTensor {
        dtype: a.dtype,
        shape,
        values,
    })
}

/// `a`'s 32-bit elements read as another 32-bit type (float32, int32,
/// uint32), bits unchanged.
fn bitcast(a: &HostTensor, to: Dtype) -> Option<HostTensor> {
    let is_32 = |d: Dtype| matches!(d, Dtype::Float32 | Dtype::Int32 | Dtype::Uint32);
    if !is_32(a.dtype) || !is_32(to) {
        return None;
    }
    let values = a
        .values
        .iter()
        .map(|&v| {
            let bits = v as u32;
            match to {
                Dtype::Int32 => bits as i32 as i128,
                _ => bits as i128,
            }
        })
        .collect();
    Some(HostTensor {
        dtype: to,
        shape: a.shape.clone(),
        values,
    })
}

/// `a` with `updates` written (or added, `add`) at `indices`: row i of
/// `indices` (of shape [n, axes]) is a position over `axes` (all when
/// `None`), and the updates' i-th slice runs over `a`'s other axes; rows
/// taken in order (for a repeated position the last write stays; integers
/// accumulate, exactly). Positions out of range, additions of booleans, and
/// float32 additions to a position more than once are left to MLX.
fn scatter(
    a: &HostTensor,
    indices: &HostTensor,
    updates: &HostTensor,
    axes: Option<&[i64]>,
    add: bool,
) -> Option<HostTensor> {
    let rank = a.shape.len();
    let axes: Vec<usize> = match axes {
        None => (0..rank).collect(),
        Some(axes) => axes
            .iter()
            .map(|&x| check_axis("axes", x, rank).ok().map(|x| x as usize))
            .collect::<Option<_>>()?,
    };
    let (&[n, k], true) = (indices.shape.as_slice(), indices.dtype != Dtype::Float32) else {
        return None;
    };
    if k as usize != axes.len() || updates.dtype != a.dtype || (add && a.dtype == Dtype::Bool) {
        return None;
    }
    let others: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).collect();
    let slice_shape: Vec<i32> = others.iter().map(|&d| a.shape[d]).collect();
    let slice = size(&slice_shape);
    if updates.values.len() != n as usize * slice {
        return None;
    }
    let own = strides(&a.shape);
    // (the offsets of a slice's values from its first, in order)
    let steps: Vec<usize> = others.iter().map(|&d| own[d]).collect();
    let mut within = Vec::with_capacity(slice);
    for_each_offset(&slice_shape, &steps, |offset| within.push(offset));
    let mut values = a.values.clone();
    // (a float32 position added to twice would be a sum in some order:
    // left to MLX)
    let float_add = add && a.dtype == Dtype::Float32;
    let mut added = vec![false; if float_add { values.len() } else { 0 }];
    for row in 0..n as usize {
        let mut base = 0usize;
        for (j, &axis) in axes.iter().enumerate() {
            let p = indices.values[row * k as usize + j];
            if !(0..a.shape[axis] as i128).contains(&p) {
                return None;
            }
            base += p as usize * own[axis];
        }
        for (e, offset) in within.iter().enumerate() {
            let at = base + offset;
            if float_add {
                if added[at] {
                    return None;
                }
                added[at] = true;
            }
            let u = updates.values[row * slice + e];
            values[at] = if !add {
                u
            } else if a.dtype == Dtype::Float32 {
                let sum = f32::from_bits(values[at] as u32) + f32::from_bits(u as u32);
                sum.to_bits() as i128
            } else {
                super::wrap(a.dtype, values[at] + u)?
            };
        }
    }
    Some(HostTensor {
        dtype: a.dtype,
        shape: a.shape.clone(),
        values,
    })
}
