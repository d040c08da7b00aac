//! Small integer, boolean and float32 tensors a running program knows on
//! the host.
//!
//! A `while` loop reads its condition at every step. Read from MLX, that is
//! an evaluation, which on the CPU hands the work to MLX's stream thread and
//! waits for it: 10 to 60 µs a step on a 2-core machine. And every MLX op
//! is a graph node that costs microseconds to build and to evaluate, which
//! made Nx's threefry (about 60 loop steps of a dozen ops on two-element
//! `u32` vectors) slower than Nx.BinaryBackend. Loop counters, their
//! comparisons and such small integer vectors are computed here instead,
//! from constants and inputs known here: the op's result shape and type are
//! MLX's (its lazy result, which is never evaluated), its values are
//! computed here, and an MLX array is made from them only where an op that
//! is not computed here reads it. Only exact integer and boolean arithmetic
//! and index rearrangements are done here, wrapping as MLX's integers wrap,
//! each checked against MLX in the tests; anything else stays with MLX.

use mlx_rs::{Array, Dtype};

use crate::error::Result;
use crate::host;
use crate::item;
use crate::ops::params::Param;
use crate::ops::table::Op;

mod floats;

/// The most elements of an integer or boolean tensor kept here: a
/// generation's attention mask of up to this many positions per batch
/// entry (docs/decisions/0021-attention-over-admitted-keys.md).
pub const MAX_ELEMENTS: usize = 4096;

/// The most elements of a float32 tensor kept here (their ops: the
/// `floats` module).
pub const MAX_FLOAT_ELEMENTS: usize = floats::MAX_ELEMENTS;

/// An integer or boolean tensor of `dtype` and `shape`, its elements in
/// row-major order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTensor {
    pub dtype: Dtype,
    pub shape: Vec<i32>,
    pub values: Vec<i128>,
}

/// Bits and signedness of an integer or boolean type.
fn width(dtype: Dtype) -> Option<(u32, bool)> {
    Some(match dtype {
        Dtype::Bool => (1, false),
        Dtype::Uint8 => (8, false),
        Dtype::Uint16 => (16, false),
        Dtype::Uint32 => (32, false),
        Dtype::Uint64 => (64, false),
        Dtype::Int8 => (8, true),
        Dtype::Int16 => (16, true),
        Dtype::Int32 => (32, true),
        Dtype::Int64 => (64, true),
        _ => return None,
    })
}

/// The smallest and largest value of an integer or boolean type.
fn range(dtype: Dtype) -> Option<(i128, i128)> {
    let (bits, signed) = width(dtype)?;
    Some(if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    })
}

/// `value` converted to `dtype` as MLX converts integers: booleans are
/// non-zero, other widths wrap (two's complement); a float32's bits, as
/// they are.
fn wrap(dtype: Dtype, value: i128) -> Option<i128> {
    if dtype == Dtype::Float32 {
        return Some(value);
    }
    let (bits, signed) = width(dtype)?;
    if dtype == Dtype::Bool {
        return Some((value != 0) as i128);
    }
    let modulus = 1i128 << bits;
    let v = value.rem_euclid(modulus);
    Some(if signed && v >= modulus / 2 {
        v - modulus
    } else {
        v
    })
}

/// `values` (row-major, in `shape`) reduced over one axis or all of them
/// (`axes` `None`, or every axis): each result `fold` of the values along
/// the axis in index order (MLX's order for the sizes kept here); the
/// results and their shape. `None` for other axes, an empty reduction (MLX's
/// op gives its error) or where `fold` gives none.
fn reduce_values<T: Copy>(
    values: &[T],
    shape: &[i32],
    axes: Option<&[i64]>,
    keep: bool,
    fold: impl Fn(&[T]) -> Option<T>,
) -> Option<(Vec<T>, Vec<i32>)> {
    let rank = shape.len();
    let axis = match axes {
        None => None,
        Some(&[axis]) => Some(crate::ops::check_axis("axes", axis, rank).ok()? as usize),
        // (as many distinct axes in range as the rank: every axis)
        Some(axes) if rank > 0 && axes.len() == rank => {
            crate::ops::check_axes("axes", axes, rank).ok()?;
            None
        }
        _ => return None,
    };
    match axis {
        None => {
            if values.is_empty() {
                return None;
            }
            let shape = if keep { vec![1; rank] } else { vec![] };
            Some((vec![fold(values)?], shape))
        }
        Some(axis) => {
            let len = shape[axis].max(0) as usize;
            if len == 0 {
                return None;
            }
            let inner = size(&shape[axis + 1..]);
            let outer = size(&shape[..axis]);
            let mut results = Vec::with_capacity(outer * inner);
            let mut along = Vec::with_capacity(len);
            for o in 0..outer {
                for i in 0..inner {
                    let base = o * len * inner + i;
                    along.clear();
                    along.extend((0..len).map(|k| values[base + k * inner]));
                    results.push(fold(&along)?);
                }
            }
            let mut shape = shape.to_vec();
            if keep {
                shape[axis] = 1;
            } else {
                shape.remove(axis);
            }
            Some((results, shape))
        }
    }
}

/// The result type of MLX's sum of an integer or boolean tensor of
/// `dtype`: booleans and signed integers of fewer than 32 bits sum to
/// int32, unsigned ones to uint32, others to their own type (the tests
/// compare with MLX).
fn sum_type(dtype: Dtype) -> Dtype {
    match dtype {
        Dtype::Bool | Dtype::Int8 | Dtype::Int16 => Dtype::Int32,
        Dtype::Uint8 | Dtype::Uint16 => Dtype::Uint32,
        other => other,
    }
}

/// One result of an integer reduction from the values along its axis.
type Fold = fn(&[i128]) -> Option<i128>;

/// A reduction of an integer or boolean tensor over one axis or all
/// (`reduce_values`), exact: each result `fold` of its values, wrapped to
/// `dtype` (the result's type) as MLX wraps.
fn integer_reduce(
    a: &HostTensor,
    dtype: Dtype,
    axes: Option<&[i64]>,
    keep: bool,
    fold: Fold,
) -> Option<HostTensor> {
    width(a.dtype)?;
    width(dtype)?;
    if a.values.len() > MAX_ELEMENTS {
        return None;
    }
    let (values, shape) = reduce_values(&a.values, &a.shape, axes, keep, |along| {
        wrap(dtype, fold(along)?)
    })?;
    Some(HostTensor {
        dtype,
        shape,
        values,
    })
}

fn size(shape: &[i32]) -> usize {
    shape.iter().map(|&d| d.max(0) as usize).product()
}

/// Row-major strides of `shape`.
fn strides(shape: &[i32]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1].max(0) as usize;
    }
    s
}

/// Calls `f` with Σ index[k] · steps[k] for every multi-index of `shape`,
/// in row-major order (an odometer: no index is built per element).
fn for_each_offset(shape: &[i32], steps: &[usize], mut f: impl FnMut(usize)) {
    let n = size(shape);
    if n == 0 {
        return;
    }
    let rank = shape.len();
    let mut index = vec![0usize; rank];
    let mut offset = 0usize;
    for _ in 0..n {
        f(offset);
        // (the last axis moves fastest; an axis that wraps carries over)
        for k in (0..rank).rev() {
            index[k] += 1;
            offset += steps[k];
            if index[k] < shape[k] as usize {
                break;
            }
            offset -= steps[k] * index[k];
            index[k] = 0;
        }
    }
}

/// The multi-index of flat position `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[i32]) -> Vec<usize> {
    let mut index = vec![0usize; shape.len()];
    for i in (0..shape.len()).rev() {
        let d = shape[i].max(1) as usize;
        index[i] = flat % d;
        flat /= d;
    }
    index
}

impl HostTensor {
    /// The values of `a` if it is a small integer or boolean tensor (`a` is
    /// evaluated for it: call this for arrays that are, or once).
    pub fn read(a: &Array) -> Option<HostTensor> {
        if a.dtype() == Dtype::Float32 {
            if a.size() > MAX_FLOAT_ELEMENTS {
                return None;
            }
            let buffer = host::HostBuffer::new(a).ok()?;
            let values = crate::elementwise_fusion::f32_values(buffer.bytes()).ok()?;
            return (values.len() == a.size())
                .then(|| HostTensor::from_floats(a.shape().to_vec(), values));
        }
        width(a.dtype())?;
        if a.size() > MAX_ELEMENTS {
            return None;
        }
        let values = item::integers(a)?;
        (values.len() == a.size()).then(|| HostTensor {
            dtype: a.dtype(),
            shape: a.shape().to_vec(),
            values,
        })
    }

    /// [`HostTensor::read`] for integer and boolean tensors only (`None`
    /// for float32: a run on a GPU, whose float ops have the GPU's bits).
    pub fn read_integers(a: &Array) -> Option<HostTensor> {
        width(a.dtype())?;
        HostTensor::read(a)
    }

    /// An evaluated MLX array holding these values.
    pub fn to_array(&self) -> Result<Array> {
        let (bits, _) = match self.dtype {
            Dtype::Float32 => (32, false),
            dtype => width(dtype).unwrap_or((64, true)),
        };
        let n = bits.div_ceil(8) as usize;
        let mut bytes = Vec::with_capacity(n * self.values.len());
        for &v in &self.values {
            // (two's complement: the low bytes of the value)
            bytes.extend_from_slice(&(v as u64).to_le_bytes()[..n]);
        }
        host::array_from_bytes(&bytes, &self.shape, self.dtype)
    }

    /// Whether a one-element tensor is non-zero (`None` for other sizes).
    pub fn truthy(&self) -> Option<bool> {
        (self.values.len() == 1).then(|| self.is_set(0))
    }

    /// The values broadcast to `shape` (`None` if they do not broadcast).
    fn broadcast(&self, shape: &[i32]) -> Option<Vec<i128>> {
        if self.shape == shape {
            return Some(self.values.clone());
        }
        if self.shape.len() > shape.len() {
            return None;
        }
        let lead = shape.len() - self.shape.len();
        let own = strides(&self.shape);
        let mut src = vec![0usize; shape.len()];
        for (i, &d) in self.shape.iter().enumerate() {
            if d != 1 && d != shape[lead + i] {
                return None;
            }
            src[lead + i] = if d == 1 { 0 } else { own[i] };
        }
        if let [v] = self.values.as_slice() {
            return Some(vec![*v; size(shape)]);
        }
        let mut out = Vec::with_capacity(size(shape));
        for_each_offset(shape, &src, |at| out.push(self.values[at]));
        Some(out)
    }
}

/// Whether [`apply`] computes `op` for some integer or boolean arguments
/// (whatever their sizes): a program keeps the ops that compute values it
/// reads while it builds them out of MLX's compile only where the host
/// could know their results (crate::program's `read_while_built`).
pub fn may_compute(op: Op) -> bool {
    op.is_comparison()
        || rearranges(op)
        || matches!(
            op,
            Op::as_type
                | Op::logical_not
                | Op::bitwise_not
                | Op::negate
                | Op::put_slice
                | Op::logical_and
                | Op::logical_or
                | Op::sum
                | Op::reduce_max
                | Op::reduce_min
        )
        || integer_arithmetic(op)
}

/// Whether `op` moves its input's values without computing any, which
/// [`apply`] does for float32 values too.
fn rearranges(op: Op) -> bool {
    matches!(
        op,
        Op::reshape
            | Op::squeeze
            | Op::broadcast_to
            | Op::slice
            | Op::dynamic_slice
            | Op::concatenate
            | Op::stack
    )
}

/// The element-wise binary ops of two integer tensors computed here
/// ([`binary`]) whose result has their type.
fn integer_arithmetic(op: Op) -> bool {
    matches!(
        op,
        Op::add
            | Op::subtract
            | Op::multiply
            | Op::min
            | Op::max
            | Op::bitwise_and
            | Op::bitwise_or
            | Op::bitwise_xor
            | Op::left_shift
            | Op::right_shift
            | Op::remainder
    )
}

/// [`apply`] for integer and boolean tensors only: `None` for an op with a
/// float32 argument or result (a run on a GPU).
pub fn apply_integers(op: Op, args: &[&HostTensor], params: &[Param]) -> Option<HostTensor> {
    if floats::has_floats(op, args, params) {
        return None;
    }
    apply(op, args, params)
}

/// `op` on `args` with `params`, computed here (result type, shape and
/// values, without MLX) when it is exact integer or boolean arithmetic, an
/// index rearrangement of small tensors, or a float32 op the `floats`
/// module computes with MLX's CPU bits; `None` when the op is left to MLX.
pub fn apply(op: Op, args: &[&HostTensor], params: &[Param]) -> Option<HostTensor> {
    if op == Op::put_slice {
        return match args {
            [a, starts, update] => put_slice(a, starts, update),
            _ => None,
        };
    }
    if let (Op::logical_and | Op::logical_or, [a, b]) = (op, args) {
        if a.dtype != b.dtype {
            return logical_of_mixed(op, a, b);
        }
    }
    // (rearrangements move values whatever they are: float32 ones too)
    if !rearranges(op) && floats::involved(op, args, params) {
        return floats::apply(op, args, params);
    }
    if let ([a], [Param::OptInts(axes), Param::Bool(keep)]) = (args, params) {
        let (axes, keep) = (axes.as_deref(), *keep);
        let reduction: Option<(Dtype, Fold)> = match op {
            Op::sum => Some((sum_type(a.dtype), |v| Some(v.iter().sum()))),
            Op::reduce_max => Some((a.dtype, |v| v.iter().max().copied())),
            Op::reduce_min => Some((a.dtype, |v| v.iter().min().copied())),
            _ => None,
        };
        if let Some((dtype, fold)) = reduction {
            return integer_reduce(a, dtype, axes, keep, fold);
        }
    }
    let (dtype, shape) = result_of(op, args, params)?;
    let n = size(&shape);
    let most = if dtype == Dtype::Float32 {
        MAX_FLOAT_ELEMENTS
    } else {
        MAX_ELEMENTS
    };
    if n > most || args.iter().any(|a| a.values.len() > most) {
        return None;
    }
    let values: Vec<i128> = match (op, args) {
        (Op::as_type | Op::reshape | Op::squeeze | Op::broadcast_to, [a]) => {
            if op == Op::as_type || op == Op::broadcast_to {
                a.broadcast(&shape)?
            } else if size(&a.shape) == n {
                a.values.clone()
            } else {
                return None;
            }
        }
        (Op::logical_not, [a]) => a
            .broadcast(&shape)?
            .iter()
            .map(|&v| (v == 0) as i128)
            .collect(),
        (Op::bitwise_not, [a]) if a.dtype == dtype && dtype != Dtype::Bool => {
            a.broadcast(&shape)?.iter().map(|&v| !v).collect()
        }
        (Op::negate, [a]) if a.dtype == dtype => a.broadcast(&shape)?.iter().map(|&v| -v).collect(),
        (Op::concatenate | Op::stack, parts) if !parts.is_empty() => {
            let axis = match params {
                [Param::Int(axis)] => *axis,
                _ => return None,
            };
            join(op, parts, axis, &shape)?
        }
        (Op::slice, [a]) => {
            let (starts, strides) = match params {
                [Param::Ints(starts), Param::Ints(_), Param::OptInts(strides)] => (
                    starts.clone(),
                    strides.clone().unwrap_or_else(|| vec![1; starts.len()]),
                ),
                _ => return None,
            };
            gather(a, &shape, &starts, &strides)?
        }
        (Op::dynamic_slice, [a, starts]) => {
            if starts.values.len() != a.shape.len() {
                return None;
            }
            // starts clamped so that the slice fits (Nx's dynamic_slice)
            let starts: Vec<i64> = starts
                .values
                .iter()
                .zip(a.shape.iter().zip(&shape))
                .map(|(&s, (&d, &len))| s.clamp(0, (d - len).max(0) as i128) as i64)
                .collect();
            gather(a, &shape, &starts, &vec![1; shape.len()])?
        }
        (_, [a, b]) if a.dtype == b.dtype => {
            let (x, y) = (a.broadcast(&shape)?, b.broadcast(&shape)?);
            let bits = width(a.dtype)?.0 as i128;
            x.iter()
                .zip(&y)
                .map(|(&x, &y)| binary(op, x, y, bits))
                .collect::<Option<Vec<_>>>()?
        }
        _ => return None,
    };
    let values = values
        .into_iter()
        .map(|v| wrap(dtype, v))
        .collect::<Option<Vec<_>>>()?;
    (values.len() == n).then_some(HostTensor {
        dtype,
        shape,
        values,
    })
}

/// The type and shape of `op`'s result, for the ops and arguments computed
/// here (MLX's rules for them; the tests compare with MLX).
fn result_of(op: Op, args: &[&HostTensor], params: &[Param]) -> Option<(Dtype, Vec<i32>)> {
    let first = args.first()?;
    let same_type = args.iter().all(|a| a.dtype == first.dtype);
    if !same_type && op != Op::dynamic_slice {
        return None;
    }
    let dtype = first.dtype;
    let boolean = dtype == Dtype::Bool;
    let shape = first.shape.clone();
    Some(match (op, args, params) {
        (Op::as_type, [_], [Param::Type(to)]) => {
            width(*to)?;
            (*to, shape)
        }
        (Op::logical_not, [_], _) => (Dtype::Bool, shape),
        (Op::bitwise_not | Op::negate, [_], _) if !boolean => (dtype, shape),
        (Op::reshape, [a], [Param::Shape(to)]) if size(to) == a.values.len() => (dtype, to.clone()),
        (Op::broadcast_to, [_], [Param::Shape(to)]) => (dtype, to.clone()),
        (Op::squeeze, [a], [Param::OptInts(axes)]) => {
            let rank = a.shape.len() as i64;
            let drop: Vec<usize> = match axes {
                None => (0..a.shape.len()).filter(|&i| a.shape[i] == 1).collect(),
                Some(axes) => axes
                    .iter()
                    .map(|&x| {
                        let x = if x < 0 { x + rank } else { x };
                        ((0..rank).contains(&x) && a.shape[x as usize] == 1).then_some(x as usize)
                    })
                    .collect::<Option<_>>()?,
            };
            let kept = (0..a.shape.len())
                .filter(|i| !drop.contains(i))
                .map(|i| a.shape[i]);
            (dtype, kept.collect())
        }
        (Op::concatenate | Op::stack, parts, [Param::Int(axis)]) => {
            if parts.iter().any(|p| p.shape != shape && op == Op::stack) {
                return None;
            }
            let rank = shape.len() as i64 + (op == Op::stack) as i64;
            let axis = if *axis < 0 { axis + rank } else { *axis };
            if !(0..rank).contains(&axis) {
                return None;
            }
            let axis = axis as usize;
            let mut out = shape.clone();
            if op == Op::stack {
                out.insert(axis, parts.len() as i32);
            } else {
                for p in &parts[1..] {
                    let same_elsewhere = p.shape.len() == shape.len()
                        && (0..shape.len()).all(|i| i == axis || p.shape[i] == shape[i]);
                    if !same_elsewhere {
                        return None;
                    }
                    out[axis] += p.shape[axis];
                }
            }
            (dtype, out)
        }
        (Op::slice, [a], [Param::Ints(starts), Param::Ints(stops), Param::OptInts(steps)]) => {
            let steps = steps.clone().unwrap_or_else(|| vec![1; starts.len()]);
            if starts.len() != a.shape.len()
                || stops.len() != starts.len()
                || steps.len() != starts.len()
            {
                return None;
            }
            let mut out = Vec::with_capacity(starts.len());
            for k in 0..starts.len() {
                let (b, e, st, d) = (starts[k], stops[k], steps[k], a.shape[k] as i64);
                if b < 0 || e < b || e > d || st <= 0 {
                    return None;
                }
                out.push(((e - b + st - 1) / st) as i32);
            }
            (dtype, out)
        }
        (Op::dynamic_slice, [a, starts], [Param::Shape(lengths)])
            if !starts.shape.is_empty() && lengths.len() == a.shape.len() =>
        {
            if lengths.iter().zip(&a.shape).any(|(&l, &d)| l < 0 || l > d) {
                return None;
            }
            let _ = starts;
            (a.dtype, lengths.clone())
        }
        (_, [a, b], []) => {
            let out = crate::dtype::broadcast_shape(&a.shape, &b.shape).ok()?;
            match op {
                _ if op.is_comparison() => (Dtype::Bool, out),
                Op::logical_and | Op::logical_or => (Dtype::Bool, out),
                _ if integer_arithmetic(op) && !boolean => (dtype, out),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// An element-wise binary op on two values of one type of `bits` bits.
fn binary(op: Op, x: i128, y: i128, bits: i128) -> Option<i128> {
    Some(match op {
        Op::add => x + y,
        Op::subtract => x - y,
        Op::multiply => x.checked_mul(y)?,
        Op::min => x.min(y),
        Op::max => x.max(y),
        Op::equal => (x == y) as i128,
        Op::not_equal => (x != y) as i128,
        Op::less => (x < y) as i128,
        Op::less_equal => (x <= y) as i128,
        Op::greater => (x > y) as i128,
        Op::greater_equal => (x >= y) as i128,
        Op::logical_and => (x != 0 && y != 0) as i128,
        Op::logical_or => (x != 0 || y != 0) as i128,
        Op::bitwise_and => x & y,
        Op::bitwise_or => x | y,
        Op::bitwise_xor => x ^ y,
        // shifts within the width only (MLX's past it are the C++ shifts');
        // a left shift keeps its low bits (all that `wrap` keeps)
        Op::left_shift if (0..bits).contains(&y) => x.wrapping_shl(y as u32),
        // (values are held sign-extended: an arithmetic shift for signed
        // types, and unsigned values are non-negative)
        Op::right_shift if (0..bits).contains(&y) => x >> y,
        // the truncated remainder (the sign of x), as the op table's; a
        // division by zero, and the minimum by -1, left to it
        Op::remainder if y != 0 && y != -1 => x % y,
        _ => return None,
    })
}

/// `out[i] = a[starts + i * strides]` over `shape`, for in-range starts
/// and positive strides.
fn gather(a: &HostTensor, shape: &[i32], starts: &[i64], steps: &[i64]) -> Option<Vec<i128>> {
    if starts.len() != a.shape.len() || steps.len() != a.shape.len() || shape.len() != a.shape.len()
    {
        return None;
    }
    for ((&s, &st), (&d, &len)) in starts.iter().zip(steps).zip(a.shape.iter().zip(shape)) {
        let last = s + st * (len as i64 - 1);
        if s < 0 || st <= 0 || (len > 0 && (s >= d as i64 || last >= d as i64)) {
            return None;
        }
    }
    let own = strides(&a.shape);
    let first: usize = starts
        .iter()
        .zip(&own)
        .map(|(&s, st)| s as usize * st)
        .sum();
    let moves: Vec<usize> = steps
        .iter()
        .zip(&own)
        .map(|(&st, o)| st as usize * o)
        .collect();
    let mut out = Vec::with_capacity(size(shape));
    for_each_offset(shape, &moves, |at| out.push(a.values[first + at]));
    Some(out)
}

/// `logical_and` or `logical_or` of integer or boolean tensors of two
/// types (a boolean result: MLX's; values are non-zero or not whatever
/// their type).
fn logical_of_mixed(op: Op, a: &HostTensor, b: &HostTensor) -> Option<HostTensor> {
    width(a.dtype)?;
    width(b.dtype)?;
    let bool_of = |t: &HostTensor| HostTensor {
        dtype: Dtype::Bool,
        shape: t.shape.clone(),
        values: t.values.iter().map(|&v| (v != 0) as i128).collect(),
    };
    apply(op, &[&bool_of(a), &bool_of(b)], &[])
}

/// `a` with `update` written at `starts` (one per axis), each start
/// clamped so that the update fits (Nx's `put_slice`), the update's values
/// converted to `a`'s type as MLX converts integers; `None` for float32
/// values of another type than `a`'s, a rank-0 `a`, or starts that are not
/// one integer per axis.
fn put_slice(a: &HostTensor, starts: &HostTensor, update: &HostTensor) -> Option<HostTensor> {
    let rank = a.shape.len();
    let integers = |d: Dtype| d != Dtype::Float32;
    if rank == 0
        || update.shape.len() != rank
        || starts.shape.len() != 1
        || starts.values.len() != rank
        || !integers(starts.dtype)
        || starts.dtype == Dtype::Bool
        || (update.dtype != a.dtype && !(integers(a.dtype) && integers(update.dtype)))
        || a.values.len() > MAX_ELEMENTS
        || update.shape.iter().zip(&a.shape).any(|(u, d)| u > d)
    {
        return None;
    }
    let first: Vec<usize> = starts
        .values
        .iter()
        .zip(a.shape.iter().zip(&update.shape))
        .map(|(&s, (&d, &u))| s.clamp(0, (d - u).max(0) as i128) as usize)
        .collect();
    let own = strides(&a.shape);
    let base: usize = first.iter().zip(&own).map(|(s, st)| s * st).sum();
    let mut values = a.values.clone();
    let mut at = Vec::with_capacity(update.values.len());
    for_each_offset(&update.shape, &own, |offset| at.push(base + offset));
    for (&to, &v) in at.iter().zip(&update.values) {
        values[to] = if update.dtype == a.dtype {
            v
        } else {
            wrap(a.dtype, v)?
        };
    }
    Some(HostTensor {
        dtype: a.dtype,
        shape: a.shape.clone(),
        values,
    })
}

/// Concatenation (or stacking) of `parts` along `axis` into `shape`.
fn join(op: Op, parts: &[&HostTensor], axis: i64, shape: &[i32]) -> Option<Vec<i128>> {
    let rank = shape.len() as i64;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return None;
    }
    let axis = axis as usize;
    // each part as a tensor of the result's rank
    let parts: Vec<(Vec<i32>, &[i128])> = parts
        .iter()
        .map(|p| {
            let mut s = p.shape.clone();
            if op == Op::stack {
                s.insert(axis.min(s.len()), 1);
            }
            (s, p.values.as_slice())
        })
        .collect();
    let mut offsets = Vec::with_capacity(parts.len());
    let mut total = 0;
    for (s, _) in &parts {
        if s.len() != shape.len() {
            return None;
        }
        offsets.push(total);
        total += s[axis];
    }
    if total != shape[axis] {
        return None;
    }
    Some(
        (0..size(shape))
            .map(|flat| {
                let mut index = unravel(flat, shape);
                let k = offsets
                    .iter()
                    .rposition(|&o| o as usize <= index[axis])
                    .unwrap_or(0);
                index[axis] -= offsets[k] as usize;
                let (s, values) = &parts[k];
                let at: usize = index.iter().zip(strides(s)).map(|(i, st)| i * st).sum();
                values[at]
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests;
