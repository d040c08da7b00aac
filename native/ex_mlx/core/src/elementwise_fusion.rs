//! Element-wise fusion on the CPU (`ExMLX.Compiler`'s `fuse: true` there):
//! a tree of float32 element-wise ops whose intermediate results nothing
//! else reads runs as one pass over its inputs, in chunks that stay in the
//! core's cache, instead of one MLX kernel (and one pass over memory) per op.
//!
//! crate::program finds such groups in a checked program's blocks (loops'
//! and branches' too) and puts each in place of its last op, with its
//! [`Kernel`]. A group runs fused when its inputs are float32 arrays whose
//! shapes broadcast together and its result has at least [`MIN_ELEMENTS`]
//! elements;
//! otherwise its ops run one by one, as without fusion. Only exactly rounded
//! ops fuse (`add`, `subtract`, `multiply`, `divide`, `max`, `min`,
//! `negate`, `abs`, `sqrt`, `square`): each rounds to float32 once, as
//! MLX's kernel does, so fused or not, the bits are MLX's. Transcendental
//! ops run as MLX's kernels (docs/numerics.md).
//!
//! The loops are written so the compiler vectorizes them (no branches, no
//! calls); on x86-64 they run in a copy compiled for AVX-512F or AVX2 where
//! the CPU has it (the same operations, so the same bits: no fused
//! multiply-add, which would round otherwise).
//!
//! The same pass also serves single ops whose inputs are ready
//! ([`computed_on_host`], which crate::cpu_kernels calls): an exactly rounded op (arithmetic, `max`, `min`, `sqrt`,
//! ...) of float32 arrays that are already computed runs at once on the
//! calling worker's thread, without a round trip through MLX's CPU stream
//! thread; the bits are MLX's.
//!
//! MLX's compile (crate::fusion), which the GPU uses for `fuse: true`,
//! builds C++ with `g++` at run time on the CPU; its kernels were slower than
//! MLX's unfused ones there (the defn rows of bench/results/latest.md).

use mlx_rs::{Array, Dtype};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::memory;
use crate::simd::multiversion;

/// Fewer elements than this run op by one (an evaluation of the group's
/// inputs in the middle of a program costs more than the pass saves).
pub const MIN_ELEMENTS: usize = 4096;

/// Elements per chunk: a chunk's registers stay in the core's first caches.
const CHUNK: usize = 512;

/// An element-wise float32 op the fused pass computes (crate::program maps
/// the op table's ops to these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Add,
    Subtract,
    Multiply,
    Divide,
    /// MLX's `maximum`: NaN if either value is NaN, else the larger (the
    /// second value when they compare equal, so `max(-0.0, 0.0)` is `0.0`).
    Maximum,
    /// MLX's `minimum`, as `Maximum` with the smaller value.
    Minimum,
    Negate,
    Abs,
    Sqrt,
    Square,
}

/// At most this many values are computed by [`computed_on_host`] on a worker's
/// thread (64 KiB of float32: the pass and the copy into MLX's buffer take a
/// few µs). Beyond them, MLX's kernel on its stream thread overlaps with the
/// worker's next ops, and the copy would cost as much as the op.
pub const READY_MAX_ELEMENTS: usize = 1 << 14;

/// Whether every one of `inputs` is a float32 array that is already
/// computed (MLX's `is_available`) and this thread's stream is a CPU's: the
/// condition under which a worker computes ready ops at once
/// (crate::cpu_kernels).
pub fn inputs_ready(inputs: &[&Array]) -> bool {
    inputs.iter().all(|a| a.dtype() == Dtype::Float32)
        && inputs.iter().all(|a| crate::ahead::is_available(a))
        && Device::current_is_cpu()
}

/// `kind` of `inputs` computed here, on any thread, or `None` where it is
/// not: an input that is not float32 or not laid out in row-major order,
/// inputs that are not a single value, of the result's shape, or a row the
/// result repeats (a bias), a result of more than
/// [`READY_MAX_ELEMENTS`] values. The caller knows the inputs are computed
/// CPU arrays ([`inputs_ready`] on a worker; a NIF on the calling thread
/// knows it from the tensors); their data is read in place, not evaluated.
/// The result is a new, computed array; the bits are MLX's.
pub fn computed_on_host(kind: Kind, inputs: &[&Array]) -> Result<Option<Array>> {
    if inputs.iter().any(|a| a.dtype() != Dtype::Float32) {
        return Ok(None);
    }
    on_arrays(inputs, |operands| op_over(kind, operands))
}

/// The step of a lone `kind` of `inputs` (one or two) operands.
fn one_step(kind: Kind, inputs: usize) -> Step {
    Step {
        kind,
        args: [0, inputs.saturating_sub(1)],
    }
}

/// `pass` over `inputs` (computed float32 arrays, read in place as its
/// operands) on this thread, its values made a new computed array; `None`
/// where the inputs' result is too large for a pass ([`pass_len`], checked
/// before any input is read), an input is not laid out in row-major order
/// or `pass` gives none ([`computed_on_host`], [`Kernel::run_ready`]).
fn on_arrays(
    inputs: &[&Array],
    pass: impl FnOnce(&[Operand]) -> Option<(Vec<f32>, Vec<i32>)>,
) -> Result<Option<Array>> {
    if broadcast_shape(inputs.iter().map(|a| a.shape()))
        .and_then(|shape| pass_len(&shape))
        .is_none()
    {
        return Ok(None);
    }
    let Some(buffers) = in_place(inputs)? else {
        return Ok(None);
    };
    let operands = buffers
        .iter()
        .zip(inputs)
        .map(|(b, a)| {
            Ok(Operand {
                values: f32_values(b.bytes())?,
                shape: a.shape(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    match pass(&operands) {
        Some((out, shape)) => host_array(&out, &shape).map(Some),
        None => Ok(None),
    }
}

/// A float32 operand of a pass read in place: its values in row-major
/// order and its shape (an array's buffer, or values computed before).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub values: &'a [f32],
    pub shape: &'a [i32],
}

/// `steps` over `operands` (which broadcast to `shape`) in one pass on this
/// thread: the result's values, or `None` where it has none or more than
/// [`READY_MAX_ELEMENTS`], or an operand is not a single value, the
/// result's values or a row it repeats.
fn pass_over(steps: &[Step], operands: &[Operand], shape: &[i32]) -> Option<Vec<f32>> {
    let n = pass_len(shape)?;
    let sources = operands
        .iter()
        .map(|o| source(o.values, o.shape, shape))
        .collect::<Option<Vec<_>>>()?;
    let mut out = vec![0.0f32; n];
    compute(steps, &sources, &mut out);
    Some(out)
}

/// How many values a result of `shape` has, if a pass on this thread
/// computes it: at least one, at most [`READY_MAX_ELEMENTS`].
fn pass_len(shape: &[i32]) -> Option<usize> {
    let n: usize = shape.iter().map(|&d| d as usize).product();
    (1..=READY_MAX_ELEMENTS).contains(&n).then_some(n)
}

/// `kind` (an exactly rounded one) of one or two float32 `operands`,
/// computed on this thread: the result's values and shape, the bits MLX's
/// op gives; `None` for another kind or count of operands, shapes that do
/// not broadcast, or what [`pass_over`] does not compute
/// ([`computed_on_host`] from arrays; crate::program's runs on the calling
/// thread, whose intermediate values are no MLX arrays).
pub fn op_over(kind: Kind, operands: &[Operand]) -> Option<(Vec<f32>, Vec<i32>)> {
    if !(1..=2).contains(&operands.len()) {
        return None;
    }
    let shape = broadcast_shape(operands.iter().map(|o| o.shape))?;
    let out = pass_over(&[one_step(kind, operands.len())], operands, &shape)?;
    Some((out, shape))
}

/// The bytes of computed arrays, read in place; `None` if one is not laid
/// out in row-major order (a view: MLX would copy it first).
pub fn in_place(inputs: &[&Array]) -> Result<Option<Vec<HostBuffer>>> {
    let mut buffers = Vec::with_capacity(inputs.len());
    for a in inputs {
        match HostBuffer::in_place(a)? {
            Some(buffer) => buffers.push(buffer),
            None => return Ok(None),
        }
    }
    Ok(Some(buffers))
}

/// A new, computed array of `values` in `shape`, refused with an
/// `:out_of_memory` error first if its buffer would pass the memory limit:
/// the results of the host's computations ([`computed_on_host`],
/// crate::ops::reduce's sums and means).
pub fn host_array(values: &[f32], shape: &[i32]) -> Result<Array> {
    memory::check_allocation(std::mem::size_of_val(values))?;
    Ok(Array::from_slice(values, shape))
}

/// How an input of `input` shape, whose row-major `values` these are, feeds
/// a result of `result` shape: one value for all, one for each, or a row the
/// result repeats; `None` for another broadcast.
fn source<'a>(values: &'a [f32], input: &[i32], result: &[i32]) -> Option<Source<'a>> {
    let n: usize = result.iter().map(|&d| d as usize).product();
    match values.len() {
        1 => Some(Source::Value(values[0])),
        len if len == n => Some(Source::Values(values)),
        _ if repeats_as_row(input, result) => Some(Source::Row(values)),
        _ => None,
    }
}

/// Whether an input of `shape` is, in row-major order, one row that the
/// result (of `result` shape) repeats: its axes but leading ones of size 1
/// are the result's last axes (a bias `{512}` added to `{64, 512}`).
fn repeats_as_row(shape: &[i32], result: &[i32]) -> bool {
    let first = shape.iter().position(|&d| d != 1).unwrap_or(shape.len());
    let row = &shape[first..];
    !row.is_empty() && row.len() <= result.len() && result.ends_with(row)
}

/// One op of a kernel over registers: registers `0..leaves` hold the
/// group's inputs, register `leaves + k` the result of step `k`.
#[derive(Clone, Copy, Debug)]
struct Step {
    kind: Kind,
    args: [usize; 2],
}

/// A group of element-wise ops as one pass: the slots it reads from outside
/// the group (its leaves), its ops over registers, and the slot of its
/// result.
#[derive(Clone, Debug)]
pub struct Kernel {
    leaves: Vec<usize>,
    steps: Vec<Step>,
    output: usize,
}

impl Kernel {
    /// The kernel of a group given as `(kind, input slots, result slot)` in
    /// program order, the last one its result; `None` if an op takes other
    /// than one or two inputs, or the group is empty.
    pub fn new(ops: &[(Kind, &[usize], usize)]) -> Option<Kernel> {
        let inner: Vec<usize> = ops.iter().map(|&(_, _, result)| result).collect();
        let mut leaves: Vec<usize> = Vec::new();
        for (_, inputs, _) in ops {
            for s in inputs.iter() {
                if !inner.contains(s) && !leaves.contains(s) {
                    leaves.push(*s);
                }
            }
        }
        let register = |slot: usize| -> usize {
            match inner.iter().position(|&s| s == slot) {
                Some(k) => leaves.len() + k,
                None => leaves.iter().position(|&s| s == slot).unwrap_or(0),
            }
        };
        let steps = ops
            .iter()
            .map(|&(kind, inputs, _)| {
                let a = register(*inputs.first()?);
                let b = match inputs {
                    [_] => a,
                    [_, b] => register(*b),
                    _ => return None,
                };
                Some(Step { kind, args: [a, b] })
            })
            .collect::<Option<Vec<Step>>>()?;
        Some(Kernel {
            output: *inner.last()?,
            leaves,
            steps,
        })
    }

    /// The slots the group reads from outside it, in register order.
    pub fn leaves(&self) -> &[usize] {
        &self.leaves
    }

    /// The slot the group's last op writes: its result.
    pub fn output(&self) -> usize {
        self.output
    }

    /// The group's result computed in one pass over `leaves` (the arrays of
    /// [`Kernel::leaves`], on the CPU worker), or `None` where the group
    /// must run op by op: an input that is not float32, shapes that do not
    /// broadcast, a result of fewer than [`MIN_ELEMENTS`] elements. Single
    /// values are read once and a row the result repeats (a bias) row by
    /// row; other inputs of fewer elements than the result are broadcast to
    /// its shape by MLX first.
    pub fn run(&self, leaves: &[Array]) -> Result<Option<Array>> {
        if leaves.iter().any(|a| a.dtype() != Dtype::Float32) {
            return Ok(None);
        }
        let Some(shape) = broadcast_shape(leaves.iter().map(|a| a.shape())) else {
            return Ok(None);
        };
        let n: usize = shape.iter().map(|&d| d as usize).product();
        if n < MIN_ELEMENTS {
            return Ok(None);
        }
        // an input the pass cannot read as it is (a row's maximum, a column)
        // is spread to the result's shape first, by MLX
        let spread: Vec<Array> = leaves
            .iter()
            .map(|a| {
                if a.size() == 1 || a.size() == n || repeats_as_row(a.shape(), &shape) {
                    Ok(a.clone())
                } else {
                    mlx_rs::ops::broadcast_to(a, &shape)
                }
            })
            .collect::<std::result::Result<_, _>>()?;
        mlx_rs::transforms::eval(&spread)?;
        let buffers: Vec<HostBuffer> = spread.iter().map(HostBuffer::new).collect::<Result<_>>()?;
        let mut sources = Vec::with_capacity(buffers.len());
        for (b, a) in buffers.iter().zip(&spread) {
            match source(f32_values(b.bytes())?, a.shape(), &shape) {
                Some(source) => sources.push(source),
                None => return Ok(None),
            }
        }
        memory::check_allocation(n * 4)?;
        let out = mlx_rs::ops::zeros::<f32>(&shape)?;
        out.eval()?;
        let buffer = HostBuffer::new(&out)?;
        let bytes = buffer.bytes();
        if bytes.len() != n * 4 || bytes.as_ptr().align_offset(4) != 0 {
            return Err(Error::Internal(
                "a fused result's buffer is not float32".into(),
            ));
        }
        // SAFETY: `out` was made just above by MLX (its own, fresh, evaluated
        // and row-contiguous buffer of n float32 values, 4-byte aligned as
        // checked) and no other array or thread holds it yet, so writing its
        // elements here races with nothing; `buffer` keeps it alive meanwhile.
        let target = unsafe { std::slice::from_raw_parts_mut(bytes.as_ptr() as *mut f32, n) };
        compute(&self.steps, &sources, target);
        drop(buffer);
        Ok(Some(out))
    }
}

impl Kernel {
    /// The group's result computed at once on this thread, as [`computed_on_host`]
    /// computes one op, when every one of `leaves` (the arrays of
    /// [`Kernel::leaves`]) is a float32 array that is already computed and
    /// this thread's stream is a CPU's ([`inputs_ready`]), each read in
    /// place as a single value, the result's values or a row it repeats, the
    /// result of at most [`READY_MAX_ELEMENTS`] values: the bits of its ops
    /// one by one, without an array for each. `None` otherwise (the ops then run
    /// one by one).
    pub fn run_ready(&self, leaves: &[Array]) -> Result<Option<Array>> {
        let refs: Vec<&Array> = leaves.iter().collect();
        if !inputs_ready(&refs) {
            return Ok(None);
        }
        on_arrays(&refs, |operands| self.run_over(operands))
    }

    /// The group's result from `leaves` (the operands of [`Kernel::leaves`]):
    /// its values and shape, the bits of its ops one by one; `None` where the
    /// shapes do not broadcast, or
    /// [`pass_over`] does not compute it ([`Kernel::run_ready`] from arrays;
    /// crate::program's runs on the calling thread).
    pub fn run_over(&self, leaves: &[Operand]) -> Option<(Vec<f32>, Vec<i32>)> {
        let shape = broadcast_shape(leaves.iter().map(|o| o.shape))?;
        let out = pass_over(&self.steps, leaves, &shape)?;
        Some((out, shape))
    }
}

/// The shape inputs of `shapes` broadcast to (NumPy's rule, as MLX's
/// element-wise ops apply it), if they do; `None` for none at all.
fn broadcast_shape<'a>(mut shapes: impl Iterator<Item = &'a [i32]>) -> Option<Vec<i32>> {
    let first = shapes.next()?.to_vec();
    shapes.try_fold(first, |shape, next| {
        crate::dtype::broadcast_shape(&shape, next).ok()
    })
}

/// A group's input: one value for every element, its elements, or a row
/// of values repeated over the result.
enum Source<'a> {
    Value(f32),
    Values(&'a [f32]),
    Row(&'a [f32]),
}

/// `bytes` (a row-contiguous float32 array's, crate::host) as values.
pub fn f32_values(bytes: &[u8]) -> Result<&[f32]> {
    if !bytes.len().is_multiple_of(4) || bytes.as_ptr().align_offset(4) != 0 {
        return Err(Error::Internal(
            "a float32 array's bytes are not 4-byte aligned".into(),
        ));
    }
    // SAFETY: the pointer is 4-byte aligned and the length a multiple of 4
    // (checked above); every bit pattern is a valid f32; the slice borrows
    // `bytes`, so it lives no longer than the memory.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) })
}

multiversion!(
    fn compute = compute_avx512, compute_avx2, compute_chunks(
        steps: &[Step],
        sources: &[Source],
        out: &mut [f32],
    );
);

#[inline(always)]
fn compute_chunks(steps: &[Step], sources: &[Source], out: &mut [f32]) {
    let Some((last, inner)) = steps.split_last() else {
        return;
    };
    let leaves = sources.len();
    // (registers no longer than the result: a few values need no 2 KiB each)
    let width = CHUNK.min(out.len()).max(1);
    // A register for each leaf not read in place (a single value, a row)
    // and each step but the last, which writes `out`'s chunk itself.
    let mut registers: Vec<Vec<f32>> = (0..leaves + inner.len())
        .map(|r| match sources.get(r) {
            Some(Source::Values(_)) => Vec::new(),
            Some(Source::Value(v)) => vec![*v; width],
            _ => vec![0.0f32; width],
        })
        .collect();
    let mut start = 0;
    while start < out.len() {
        let len = width.min(out.len() - start);
        let chunk = start..start + len;
        for (r, source) in sources.iter().enumerate() {
            if let Source::Row(row) = source {
                fill_from_row(&mut registers[r][..len], row, start);
            }
        }
        for (k, step) in inner.iter().enumerate() {
            let mut target = std::mem::take(&mut registers[leaves + k]);
            let a = register(&registers, sources, step.args[0], &chunk);
            let b = register(&registers, sources, step.args[1], &chunk);
            apply(step.kind, a, b, &mut target[..len]);
            registers[leaves + k] = target;
        }
        let a = register(&registers, sources, last.args[0], &chunk);
        let b = register(&registers, sources, last.args[1], &chunk);
        apply(last.kind, a, b, &mut out[chunk.clone()]);
        start += len;
    }
}

/// Register `r`'s values for the elements `chunk` of the result: a leaf
/// read in place straight from its values, else its register's first
/// `chunk.len()`.
#[inline(always)]
fn register<'a>(
    registers: &'a [Vec<f32>],
    sources: &'a [Source],
    r: usize,
    chunk: &std::ops::Range<usize>,
) -> &'a [f32] {
    match sources.get(r) {
        Some(Source::Values(values)) => &values[chunk.clone()],
        _ => &registers[r][..chunk.len()],
    }
}

/// `target` filled with elements `start..` of `row` repeated without end.
#[inline(always)]
fn fill_from_row(target: &mut [f32], row: &[f32], start: usize) {
    let mut offset = start % row.len();
    let mut filled = 0;
    while filled < target.len() {
        let take = (row.len() - offset).min(target.len() - filled);
        target[filled..filled + take].copy_from_slice(&row[offset..offset + take]);
        filled += take;
        offset = 0;
    }
}

/// `kind` of `a` (and `b`, for a binary kind) value by value into `out`:
/// `a`, `b` and `out` of one length (crate::host_tensor's small float32
/// tensors; a binary kind's `b` must be `a`'s length, a unary one ignores it).
pub fn values_of(kind: Kind, a: &[f32], b: &[f32], out: &mut [f32]) {
    apply(kind, a, b, out);
}

#[inline(always)]
fn apply(kind: Kind, a: &[f32], b: &[f32], out: &mut [f32]) {
    match kind {
        Kind::Add => binary(a, b, out, |x, y| x + y),
        Kind::Subtract => binary(a, b, out, |x, y| x - y),
        Kind::Multiply => binary(a, b, out, |x, y| x * y),
        Kind::Divide => binary(a, b, out, |x, y| x / y),
        Kind::Maximum => binary(a, b, out, |x, y| if x.is_nan() || x > y { x } else { y }),
        Kind::Minimum => binary(a, b, out, |x, y| if x.is_nan() || x < y { x } else { y }),
        Kind::Negate => unary(a, out, |x| -x),
        Kind::Abs => unary(a, out, f32::abs),
        Kind::Sqrt => unary(a, out, f32::sqrt),
        Kind::Square => unary(a, out, |x| x * x),
    }
}

#[inline(always)]
fn unary(a: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &x) in out.iter_mut().zip(a) {
        *o = f(x);
    }
}

#[inline(always)]
fn binary(a: &[f32], b: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_arrays::{bits, computed, pairs_both_orders};

    /// Values across float32's range: a dense grid near zero and around the
    /// functions' bends, powers of ten down to the subnormals, their
    /// negatives, and the special values.
    fn inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (-200_000..=200_000).map(|i| i as f32 * 1e-4).collect();
        for e in -45..=38 {
            for m in [1.0f32, 1.234_567, 3.0, 7.777_7] {
                xs.push(m * 10f32.powi(e));
            }
        }
        xs.extend((0..2000).map(|i| 80.0 + i as f32 * 0.02));
        let negatives: Vec<f32> = xs.iter().map(|x| -x).collect();
        xs.extend(negatives);
        xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        xs.extend([f32::MIN_POSITIVE, f32::MAX, f32::MIN, 1e-45, -1e-45]);
        xs
    }

    fn step(kind: Kind, a: usize, b: usize) -> Step {
        Step { kind, args: [a, b] }
    }

    #[test]
    fn every_compiled_copy_gives_the_plain_copy_s_bits() {
        let xs = inputs();
        let steps = [
            step(Kind::Multiply, 0, 1),
            step(Kind::Sqrt, 2, 2),
            step(Kind::Square, 3, 3),
            step(Kind::Subtract, 4, 0),
            step(Kind::Maximum, 5, 1),
            step(Kind::Abs, 6, 6),
            step(Kind::Divide, 7, 0),
        ];
        let sources = [Source::Values(&xs), Source::Value(0.37)];
        let mut plain = vec![0.0; xs.len()];
        compute_chunks(&steps, &sources, &mut plain);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut best = vec![0.0; xs.len()];
        compute(&steps, &sources, &mut best);
        assert_eq!(bits(&plain), bits(&best));
        #[cfg(target_arch = "x86_64")]
        {
            let mut copies = 0;
            if std::is_x86_feature_detected!("avx2") {
                let mut avx2 = vec![0.0; xs.len()];
                // SAFETY: the CPU has AVX2 (checked just above).
                unsafe { compute_avx2(&steps, &sources, &mut avx2) };
                assert_eq!(bits(&plain), bits(&avx2));
                copies += 1;
            }
            if std::is_x86_feature_detected!("avx512f") {
                let mut avx512 = vec![0.0; xs.len()];
                // SAFETY: the CPU has AVX-512F (checked just above).
                unsafe { compute_avx512(&steps, &sources, &mut avx512) };
                assert_eq!(bits(&plain), bits(&avx512));
                copies += 1;
            }
            println!("compared {copies} compiled copies with the plain one");
        }
        // and the chunks add up: each element as its own one-element pass
        let one = |x: f32| {
            let mut o = [0.0f32];
            compute_chunks(&steps, &[Source::Values(&[x]), Source::Value(0.37)], &mut o);
            o[0]
        };
        for k in (0..xs.len()).step_by(997) {
            assert_eq!(plain[k].to_bits(), one(xs[k]).to_bits(), "at {}", xs[k]);
        }
    }

    /// A pass whose steps read leaves in place (values, again in later
    /// steps), a row it repeats and a single value, over several chunks and
    /// a last, shorter one: each element is what the ops give one by one.
    #[test]
    fn leaves_read_in_place_rows_and_values_give_each_op_s_result() {
        let n = 3 * CHUNK + 37;
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let row: Vec<f32> = (0..7).map(|j| 0.5 + j as f32 * 0.25).collect();
        // leaves: 0 = a, 1 = row, 2 = 1.5; steps: 3 = a * row, 4 = 3 + 1.5,
        // 5 = 4 - a, 6 = max(5, a), 7 = 6 / row
        let steps = [
            step(Kind::Multiply, 0, 1),
            step(Kind::Add, 3, 2),
            step(Kind::Subtract, 4, 0),
            step(Kind::Maximum, 5, 0),
            step(Kind::Divide, 6, 1),
        ];
        let sources = [Source::Values(&a), Source::Row(&row), Source::Value(1.5)];
        let mut out = vec![f32::NAN; n];
        compute(&steps, &sources, &mut out);
        for (i, (&x, &got)) in a.iter().zip(&out).enumerate() {
            let r = row[i % row.len()];
            let t = x * r + 1.5 - x;
            let t = if t > x { t } else { x };
            assert_eq!(got.to_bits(), (t / r).to_bits(), "element {i}");
        }
    }

    /// Special values (NaN at one place, ±0, ±∞, subnormals, extremes) and
    /// a spread of ordinary ones, `len` of them, starting at `from`.
    fn mixed(len: usize, from: usize) -> Vec<f32> {
        let special = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-45,
            -1e-45,
            f32::MAX,
            f32::MIN,
            1.0,
            -1.0,
            3.0,
        ];
        (from..from + len)
            .map(|i| match i % 61 {
                0 if i == 61 => f32::NAN,
                k if k < special.len() => special[k],
                k => (k as f32 - 30.0) * 0.731 * 10f32.powi((i % 7) as i32 - 3),
            })
            .collect()
    }

    fn must_not_run() -> Result<Array> {
        Err(Error::Internal("MLX's op ran".into()))
    }

    type MlxBinary = fn(&Array, &Array) -> std::result::Result<Array, mlx_rs::error::Exception>;
    type MlxUnary = fn(&Array) -> std::result::Result<Array, mlx_rs::error::Exception>;

    const BINARY: [(Kind, MlxBinary); 6] = [
        (Kind::Add, |a, b| mlx_rs::ops::add(a, b)),
        (Kind::Subtract, |a, b| mlx_rs::ops::subtract(a, b)),
        (Kind::Multiply, |a, b| mlx_rs::ops::multiply(a, b)),
        (Kind::Divide, |a, b| mlx_rs::ops::divide(a, b)),
        (Kind::Maximum, |a, b| mlx_rs::ops::maximum(a, b)),
        (Kind::Minimum, |a, b| mlx_rs::ops::minimum(a, b)),
    ];

    /// `kind` of `inputs` computed here when they are ready (as
    /// crate::cpu_kernels's `apply` does), else `otherwise()`.
    fn ready_or(
        kind: Kind,
        inputs: &[&Array],
        otherwise: impl FnOnce() -> Result<Array>,
    ) -> Result<Array> {
        if inputs_ready(inputs) {
            if let Some(out) = computed_on_host(kind, inputs)? {
                return Ok(out);
            }
        }
        otherwise()
    }

    #[test]
    fn ready_inputs_give_mlx_s_bits_at_once() {
        let n = 61 * 40;
        let a = computed(&mixed(n, 0), &[40, 61]);
        // the same values shifted, so every pair of specials meets
        let b = computed(&mixed(n, 17), &[40, 61]);
        let row = computed(&mixed(61, 5), &[61]);
        let one = computed(&[-0.0], &[]);
        for (kind, mlx) in BINARY {
            let pairs = pairs_both_orders(&a, &b, &row);
            for (x, y) in pairs.into_iter().chain([(&a, &one), (&one, &b)]) {
                let ours = ready_or(kind, &[x, y], must_not_run).unwrap();
                assert!(crate::ahead::is_available(&ours), "{kind:?}: not computed");
                let theirs = mlx(x, y).unwrap();
                assert_eq!(ours.shape(), theirs.shape(), "{kind:?}");
                assert_eq!(
                    bits(&ours),
                    bits(&theirs),
                    "{kind:?} {:?} {:?}",
                    x.shape(),
                    y.shape()
                );
            }
        }
        let unary: [(Kind, MlxUnary); 4] = [
            (Kind::Negate, |a| mlx_rs::ops::negative(a)),
            (Kind::Abs, |a| mlx_rs::ops::abs(a)),
            (Kind::Sqrt, |a| mlx_rs::ops::sqrt(a)),
            (Kind::Square, |a| mlx_rs::ops::square(a)),
        ];
        for (kind, mlx) in unary {
            let ours = ready_or(kind, &[&a], must_not_run).unwrap();
            assert_eq!(bits(&ours), bits(&mlx(&a).unwrap()), "{kind:?}");
        }
    }

    #[test]
    fn other_inputs_take_mlx_s_op() {
        let a = computed(&mixed(64, 0), &[8, 8]);
        let mlx = |x: &Array, y: &Array| Ok(mlx_rs::ops::add(x, y)?);
        let taken = |inputs: &[&Array]| {
            let ran = std::cell::Cell::new(false);
            let out = ready_or(Kind::Add, inputs, || {
                ran.set(true);
                mlx(inputs[0], inputs[inputs.len() - 1])
            })
            .unwrap();
            (
                ran.get(),
                bits(&out) == bits(&mlx_rs::ops::add(inputs[0], inputs[inputs.len() - 1]).unwrap()),
            )
        };
        // not computed yet
        let pending = mlx_rs::ops::multiply(&a, &a).unwrap();
        assert_eq!(taken(&[&pending, &a]), (true, true));
        // a view (a transpose) and a column the result does not repeat as a row
        let transposed = mlx_rs::ops::transpose_axes(&a, &[1, 0]).unwrap();
        transposed.eval().unwrap();
        assert_eq!(taken(&[&transposed, &a]), (true, true));
        let column = computed(&mixed(8, 3), &[8, 1]);
        assert_eq!(taken(&[&a, &column]), (true, true));
        // another dtype (int32), and more values than are computed here
        let ints = Array::from_slice(&[1i32; 64], &[8, 8]);
        ints.eval().unwrap();
        let ran = std::cell::Cell::new(false);
        let sum = ready_or(Kind::Add, &[&ints, &ints], || {
            ran.set(true);
            Ok(mlx_rs::ops::add(&ints, &ints)?)
        })
        .unwrap();
        assert!(ran.get());
        assert_eq!(sum.as_slice::<i32>(), &[2; 64]);
        let big = computed(
            &vec![0.5; READY_MAX_ELEMENTS + 1],
            &[READY_MAX_ELEMENTS as i32 + 1],
        );
        assert_eq!(taken(&[&big, &big]), (true, true));
        // and the ready ones do not
        assert!(!taken(&[&a, &a]).0);
    }

    #[test]
    fn a_row_repeats_from_any_start() {
        let row = [1.0f32, 2.0, 3.0];
        let mut target = [0.0f32; 7];
        fill_from_row(&mut target, &row, 4);
        assert_eq!(target, [2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]);
        assert!(repeats_as_row(&[512], &[64, 512]));
        assert!(repeats_as_row(&[1, 1, 512], &[64, 512]));
        assert!(repeats_as_row(&[4, 5], &[3, 4, 5]));
        assert!(!repeats_as_row(&[64, 1], &[64, 512]));
        assert!(!repeats_as_row(&[1], &[64, 512]));
    }
}
