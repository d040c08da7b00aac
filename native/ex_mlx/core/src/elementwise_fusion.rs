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
//! otherwise its ops run one by one, as without fusion, so the results never
//! depend on that choice beyond the last bit of the transcendental
//! functions:
//!
//! * `add`, `subtract`, `multiply`, `divide`, `negate`, `abs`, `sqrt` and
//!   `square` round to float32 after every op, as MLX does: the same bits;
//! * `tanh`, `exp`, `sigmoid` and `erf` are computed in float64 (a
//!   polynomial after a range reduction, [`exp_f64`]; `erf` a series of
//!   positive terms, [`erf`]) and rounded once to float32: within one unit in
//!   the last place of the exact value, where MLX's CPU kernels are up to 2
//!   (`tanh`), 8 (`exp`) and 9 (`sigmoid`) units away (measured over 2.4
//!   million values, bench/README.md, session 14) and its `erf` (a
//!   five-term approximation) up to 4.5e-7 off, 14,792 units at −0.0002
//!   (bench/README.md, session 16).
//!
//! The loops are written so the compiler vectorizes them (no branches, no
//! calls); on x86-64 they run in a copy compiled for AVX-512F or AVX2 where
//! the CPU has it (the same operations, so the same bits: no fused
//! multiply-add, which would round otherwise).
//!
//! The same pass also serves single ops whose inputs are ready
//! ([`ready_or`]): an exactly rounded op (arithmetic, `max`, `min`, `sqrt`,
//! ...) of float32 arrays that are already computed runs at once on the
//! calling worker's thread, without a round trip through MLX's CPU stream
//! thread; the bits are MLX's.
//!
//! MLX's compile (crate::fusion), which the GPU uses for `fuse: true`,
//! builds C++ with `g++` at run time on the CPU; its kernels were slower than
//! MLX's unfused ones there (bench/README.md).

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
    Tanh,
    Exp,
    Sigmoid,
    Erf,
    /// x³ (`pow(x, 3)`, as GPT-2's GELU takes it), from the exact square in
    /// float64 times x, rounded once to float32.
    Cube,
    /// MLX's CPU `exp` of float32, bit for bit ([`mlx_exp`]): the op
    /// table's `exp` of fewer than [`MIN_ELEMENTS`] values.
    MlxExp,
    /// MLX's CPU `sigmoid` of float32, bit for bit ([`mlx_sigmoid`]), as
    /// [`Kind::MlxExp`].
    MlxSigmoid,
    /// MLX's CPU `tanh` of float32: the C library's `tanhf`, as [`Kind::MlxExp`].
    MlxTanh,
}

impl Kind {
    /// Whether a lone op of this kind is worth a pass of its own: MLX's CPU
    /// kernels for `tanh`, `exp`, `sigmoid`, `erf` and `pow` (by 3: `Cube`)
    /// compute value by value with calls to the C library (about 10 ns a
    /// value; `erf` more), the pass computes them in vectors (about 1).
    pub fn worth_alone(self) -> bool {
        matches!(
            self,
            Kind::Tanh | Kind::Exp | Kind::Sigmoid | Kind::Erf | Kind::Cube
        )
    }

    /// Whether the pass gives exactly MLX's bits for this kind (IEEE 754
    /// operations rounded once, compared or copied): every kind but those
    /// [`Kind::worth_alone`] names, whose values are closer to the exact ones.
    pub fn exactly_mlx(self) -> bool {
        !self.worth_alone()
    }

    /// The most values a result of this kind may have where a pass gives
    /// the op table's bits: the op table computes `exp`, `sigmoid` and
    /// `tanh` of [`MIN_ELEMENTS`] values or more with their own kinds
    /// ([`vectorized_or`]), so the MLX kinds stop below it.
    fn most_values(self) -> usize {
        match self {
            Kind::MlxExp | Kind::MlxSigmoid | Kind::MlxTanh => MIN_ELEMENTS - 1,
            _ => READY_MAX_ELEMENTS,
        }
    }
}

/// At most this many values are computed by [`ready_or`] on the worker's
/// thread (64 KiB of float32: the pass and the copy into MLX's buffer take a
/// few µs). Beyond them, MLX's kernel on its stream thread overlaps with the
/// worker's next ops, and the copy would cost as much as the op.
pub const READY_MAX_ELEMENTS: usize = 1 << 14;

/// `kind` (an exactly rounded one: [`Kind::exactly_mlx`]) of `inputs` (one
/// or two) computed at once on this thread when this thread's stream is a
/// CPU's and every input is a float32 array that is already computed
/// (MLX's `is_available`), laid out in row-major order, and a single value,
/// of the result's shape, or a row the result repeats (a bias); at most
/// [`READY_MAX_ELEMENTS`] values. Otherwise `otherwise()` (MLX's op, queued
/// on the stream as usual). The result is an array that is already computed:
/// the ops after it that are ready too run here as well, and reading it
/// needs no evaluation. Same bits as MLX's op either way, so which path ran
/// never shows in the values (an input whose computation is under way on the
/// stream thread just takes MLX's path).
///
/// Products of one row (crate::ops::gemv) give computed results, so a batch
/// of one through an MLP (product, bias, ReLU, product...) runs without
/// waiting for the stream thread between its layers.
pub fn ready_or(
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

/// Whether every one of `inputs` is a float32 array that is already
/// computed (MLX's `is_available`) and this thread's stream is a CPU's: the
/// condition under which a worker computes ready ops at once
/// ([`ready_or`], crate::ops::reduce's sums).
pub fn inputs_ready(inputs: &[&Array]) -> bool {
    inputs.iter().all(|a| a.dtype() == Dtype::Float32)
        && inputs.iter().all(|a| crate::ahead::is_available(a))
        && Device::current_is_cpu()
}

/// `kind` of `inputs` computed here, on any thread, or `None` where it is
/// not: a transcendental kind, an input that is not float32 or not laid out
/// in row-major order, inputs that are not a single value, of the result's
/// shape, or a row the result repeats (a bias), a result of more than
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
    if !kind.exactly_mlx() || !(1..=2).contains(&operands.len()) {
        return None;
    }
    let shape = broadcast_shape(operands.iter().map(|o| o.shape))?;
    if shape.iter().map(|&d| d as usize).product::<usize>() > kind.most_values() {
        return None;
    }
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

/// `kind` (one that is [`Kind::worth_alone`]) of `a` as a pass of its own when `a`
/// is a float32 array of [`MIN_ELEMENTS`] values or more and this thread's
/// stream is a CPU's; else `otherwise(a)` (MLX's op). The op table's
/// `tanh`, `exp`, `sigmoid` and `erf`, and `pow` by 3
/// (crate::ops::elementwise::power), go through here, so eager ops and
/// programs, fused or not, give the same values.
pub fn vectorized_or(
    kind: Kind,
    a: &Array,
    otherwise: impl FnOnce(&Array) -> Result<Array>,
) -> Result<Array> {
    if kind.worth_alone()
        && a.dtype() == Dtype::Float32
        && a.size() >= MIN_ELEMENTS
        && Device::current_is_cpu()
    {
        let kernel = Kernel {
            leaves: vec![0],
            steps: vec![Step { kind, args: [0, 0] }],
            output: 1,
        };
        if let Some(out) = kernel.run(std::slice::from_ref(a))? {
            return Ok(out);
        }
    }
    otherwise(a)
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
    /// The group's result computed at once on this thread, as [`ready_or`]
    /// computes one op, when every one of `leaves` (the arrays of
    /// [`Kernel::leaves`]) is a float32 array that is already computed and
    /// this thread's stream is a CPU's ([`inputs_ready`]), each read in
    /// place as a single value, the result's values or a row it repeats, the
    /// result of at most [`READY_MAX_ELEMENTS`] values, and every step
    /// exactly rounded ([`Kind::exactly_mlx`]): the bits of its ops one by
    /// one, without an array for each. `None` otherwise (the ops then run
    /// one by one).
    pub fn run_ready(&self, leaves: &[Array]) -> Result<Option<Array>> {
        let refs: Vec<&Array> = leaves.iter().collect();
        if !inputs_ready(&refs) {
            return Ok(None);
        }
        on_arrays(&refs, |operands| self.run_over(operands))
    }

    /// The group's result from `leaves` (the operands of [`Kernel::leaves`]):
    /// its values and shape, the bits of its ops one by one; `None` where a
    /// step is not exactly rounded, the shapes do not broadcast, or
    /// [`pass_over`] does not compute it ([`Kernel::run_ready`] from arrays;
    /// crate::program's runs on the calling thread).
    pub fn run_over(&self, leaves: &[Operand]) -> Option<(Vec<f32>, Vec<i32>)> {
        if !self.steps.iter().all(|s| s.kind.exactly_mlx()) {
            return None;
        }
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
        Kind::Tanh => unary(a, out, tanh),
        Kind::Exp => unary(a, out, exp),
        Kind::Sigmoid => unary(a, out, sigmoid),
        Kind::Erf => unary(a, out, erf),
        Kind::Cube => unary(a, out, cube),
        Kind::MlxExp => unary(a, out, mlx_exp),
        Kind::MlxSigmoid => unary(a, out, mlx_sigmoid),
        Kind::MlxTanh => unary(a, out, f32::tanh),
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

/// `x` if it is at most `hi` (NaN stays NaN), else `hi`.
#[inline(always)]
fn at_most(x: f64, hi: f64) -> f64 {
    if x > hi {
        hi
    } else {
        x
    }
}

/// `x` if it is at least `lo` (NaN stays NaN), else `lo`.
#[inline(always)]
fn at_least(x: f64, lo: f64) -> f64 {
    if x < lo {
        lo
    } else {
        x
    }
}

/// 1.5 × 2^52: adding and subtracting it rounds a double of magnitude below
/// 2^51 to an integer (to nearest, ties to even), without a call.
const ROUNDER: f64 = 6_755_399_441_055_744.0;
/// ln 2 in two parts: the high part has 21 trailing zero bits, so `k × LN2_HI`
/// is exact for the |k| < 2^11 used here; LN2_LO is ln 2 − LN2_HI.
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// 1/9!, 1/8!, ..., 1/1!, 1/0!: e^r's Taylor coefficients, highest first.
const EXP_TAYLOR: [f64; 10] = [
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    1.0 / 2.0,
    1.0,
    1.0,
];

/// e^y for y in [-700, 700] (and NaN), to about 1e-11 relative: y is
/// k ln 2 + r with |r| ≤ ln 2 / 2, e^r comes from its Taylor polynomial of
/// degree 9 (the first term left out is below 7.2e-12 of it, and far below
/// where r is small, which is where `tanh` cancels), times 2^k built from
/// bits. (Degree 11 took a tenth longer.)
#[inline(always)]
fn exp_f64(y: f64) -> f64 {
    let k = (y * std::f64::consts::LOG2_E + ROUNDER) - ROUNDER;
    let r = (y - k * LN2_HI) - k * LN2_LO;
    let mut p = EXP_TAYLOR[0];
    for c in &EXP_TAYLOR[1..] {
        p = p * r + c;
    }
    // k + 1023 is an integer in [1, 2046]: added to ROUNDER it sits in the
    // low bits of the sum, and shifted into the exponent field it is 2^k.
    let two_to_k = f64::from_bits((k + (ROUNDER + 1023.0)).to_bits() << 52);
    p * two_to_k
}

/// tanh of a float32, rounded once from a float64 value within about 1e-11
/// of it: (1 − e^−2|x|) / (1 + e^−2|x|), or |x|(1 − x²/3) below 1e-4
/// (where the first form cancels), with the sign of `x`.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    let x = x as f64;
    let a = x.abs();
    // tanh(20) is 1 in float32; the bound keeps e^−2|x| normal
    let e = exp_f64(-2.0 * at_most(a, 20.0));
    let far = (1.0 - e) / (1.0 + e);
    let near = a * (1.0 - a * a * (1.0 / 3.0));
    let t = if a < 1e-4 { near } else { far };
    let sign = x.to_bits() & (1u64 << 63);
    f64::from_bits(t.to_bits() | sign) as f32
}

/// e^x of a float32, rounded once: e^89 is above float32's largest value and
/// e^−104 below half its smallest, so clamping there keeps the rounded
/// result (infinity, zero) and the float64 scale in range.
#[inline(always)]
fn exp(x: f32) -> f32 {
    exp_f64(at_least(at_most(x as f64, 89.0), -104.0)) as f32
}

/// 1 / (1 + e^−x) of a float32, rounded once (e^±120 leaves the rounded
/// result at 0 or 1).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    let z = at_least(at_most(-(x as f64), 120.0), -120.0);
    (1.0 / (1.0 + exp_f64(z))) as f32
}

/// The coefficients, highest degree first, of the polynomial in f for
/// 2^f (|f| ≤ 1/2) that MLX's CPU `exp` evaluates, as float32 bits (about
/// 1.5353362e-4, 1.3398874e-3, 9.618437e-3, 5.5503324e-2, 0.24022648,
/// 0.6931472, 1).
const MLX_EXP2: [u32; 7] = [
    0x3920_fdde,
    0x3aaf_9f29,
    0x3c1d_96a6,
    0x3d63_5774,
    0x3e75_fdee,
    0x3f31_7218,
    0x3f80_0000,
];

/// log2(e) as MLX's CPU `exp` takes it, as float32 bits (about 1.442695).
const MLX_LOG2_E: u32 = 0x3fb8_aa3b;

/// e^x of a float32 with MLX's CPU bits (MLX 0.32): x·log2(e) in float32
/// is split at its nearest integer i (⌊y + 1/2⌋) into i + f; 2^f is the
/// polynomial [`MLX_EXP2`] by fused multiply-adds, 2^i the exponent bits
/// i + 127; their product, NaN for NaN, infinity above 88 and 0 below
/// -88. Checked bit for bit against MLX's `exp` in the tests.
#[inline(always)]
pub fn mlx_exp(x: f32) -> f32 {
    let y = x * f32::from_bits(MLX_LOG2_E);
    let i = (y + 0.5).floor();
    let f = y - i;
    let mut p = f32::from_bits(MLX_EXP2[0]);
    for &c in &MLX_EXP2[1..] {
        p = p.mul_add(f, f32::from_bits(c));
    }
    // (i out of range only where the result is replaced below)
    let two_to_i = f32::from_bits(((i as i32).wrapping_add(127) as u32).wrapping_shl(23));
    if x.is_nan() {
        x
    } else if x > 88.0 {
        f32::INFINITY
    } else if x < -88.0 {
        0.0
    } else {
        two_to_i * p
    }
}

/// 1 / (1 + e^x) of a float32 with MLX's CPU bits: y = 1 / (1 + e^|x|)
/// ([`mlx_exp`]), y for negative x and 1 - y otherwise.
#[inline(always)]
pub fn mlx_sigmoid(x: f32) -> f32 {
    let y = 1.0 / (1.0 + mlx_exp(x.abs()));
    if x < 0.0 {
        y
    } else {
        1.0 - y
    }
}

/// How many terms of erf's series [`erf`] sums.
const ERF_TERMS: usize = 58;

/// 4^n n! / (2n + 1)! for n = 0, 1, ...: the coefficients of erf's series of
/// positive terms, erf(a) = 2/√π · a · e^−a² · Σ c_n a^2n (each c_n is
/// c_n−1 · 2 / (2n + 1)).
const ERF_SERIES: [f64; ERF_TERMS] = erf_series();

const fn erf_series() -> [f64; ERF_TERMS] {
    let mut c = [0.0; ERF_TERMS];
    c[0] = 1.0;
    let mut n = 1;
    while n < ERF_TERMS {
        c[n] = c[n - 1] * 2.0 / (2 * n + 1) as f64;
        n += 1;
    }
    c
}

/// Terms of each of [`erf`]'s eight interleaved sums: ⌈58 / 8⌉.
const ERF_CHAIN: usize = ERF_TERMS.div_ceil(8);

/// [`ERF_SERIES`] dealt into eight sums of powers of w = y⁸: row j holds
/// c_j, c_j+8, c_j+16, ... (zero past the series' end), so that
/// Σ c_n y^n = Σ_j y^j · P_j(w).
const ERF_CHAINS: [[f64; ERF_CHAIN]; 8] = erf_chains();

const fn erf_chains() -> [[f64; ERF_CHAIN]; 8] {
    let mut chains = [[0.0; ERF_CHAIN]; 8];
    let mut n = 0;
    while n < ERF_TERMS {
        chains[n % 8][n / 8] = ERF_SERIES[n];
        n += 1;
    }
    chains
}

/// erf of a float32, rounded once from a float64 value within about 1e-11
/// of it: for |x| ≤ 4, 2/√π · |x| · e^−x² · Σ c_n x^2n ([`ERF_SERIES`]: its
/// terms are positive, so nothing cancels, and the 58 summed leave out less
/// than 1e-15 of the sum at 4), with the sign of `x`. Beyond 4 the result
/// is ±1 in float32 (1 − erf(4) is 1.5e-8, less than half the spacing of
/// float32 below 1), which the value at 4 rounds to. The sum is evaluated
/// as eight independent Horner chains in x¹⁶ ([`ERF_CHAINS`]), which the
/// core runs side by side: one chain of 58 steps took 8.0 ns a value (ExMLX's
/// erf of 1M values, AVX-512), four chains 5.4, eight 4.6–4.9 (exp: 2.4–3.1).
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x as f64;
    let a = at_most(x.abs(), 4.0);
    let y = a * a;
    let y2 = y * y;
    let y4 = y2 * y2;
    let w = y4 * y4;
    let chain = |c: &[f64; ERF_CHAIN]| {
        let mut p = c[ERF_CHAIN - 1];
        for k in (0..ERF_CHAIN - 1).rev() {
            p = p * w + c[k];
        }
        p
    };
    let p: [f64; 8] = std::array::from_fn(|j| chain(&ERF_CHAINS[j]));
    let p = (p[0] + y * p[1])
        + y2 * (p[2] + y * p[3])
        + y4 * ((p[4] + y * p[5]) + y2 * (p[6] + y * p[7]));
    let e = std::f64::consts::FRAC_2_SQRT_PI * a * exp_f64(-y) * p;
    let sign = x.to_bits() & (1u64 << 63);
    f64::from_bits(e.to_bits() | sign) as f32
}

/// x³ of a float32: x² is exact in float64 (48 significant bits), x²·x
/// rounded once there (a relative error below 2^-53), then to float32: the
/// correctly rounded cube but where x³ lies within 2^-53 of a float32
/// rounding boundary. MLX's CPU power calls the C library's `powf` value by
/// value, which is slower and not correctly rounded (bench/README.md,
/// session 16).
#[inline(always)]
fn cube(x: f32) -> f32 {
    let x = x as f64;
    (x * x * x) as f32
}

#[cfg(test)]
/// Units in the last place between two float32 values (for tests; NaN
/// only equals NaN).
pub(crate) fn ulps(a: f32, b: f32) -> u32 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u32::MAX
        };
    }
    let key = |v: f32| {
        let bits = v.to_bits() as i64;
        if bits < 0 {
            i64::from(i32::MIN) - bits
        } else {
            bits
        }
    };
    let (ka, kb) = (key(a), key(b));
    // (+0 and -0 are one apart here; they compare equal as floats)
    if a == b {
        0
    } else {
        (ka - kb).unsigned_abs() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_arrays::{bits, computed};

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

    /// `f` against `exact` (Rust's float64 function, rounded once to
    /// float32): at most one unit in the last place apart everywhere.
    fn within_one_ulp(name: &str, f: impl Fn(f32) -> f32, exact: impl Fn(f64) -> f64) {
        let mut worst = (0, 0.0f32);
        let mut off = 0usize;
        let xs = inputs();
        for &x in &xs {
            let want = exact(x as f64) as f32;
            let d = ulps(f(x), want);
            if d > 0 {
                off += 1;
            }
            if d > worst.0 {
                worst = (d, x);
            }
        }
        assert!(
            worst.0 <= 1,
            "{name}({}) is {} ulp from {}",
            worst.1,
            worst.0,
            exact(worst.1 as f64) as f32
        );
        // one-ulp cases are the rare double roundings near a halfway point
        assert!(
            off * 1000 < xs.len(),
            "{name}: {off} of {} values off",
            xs.len()
        );
    }

    #[test]
    fn tanh_exp_sigmoid_and_erf_are_within_one_ulp_of_the_exact_values() {
        within_one_ulp("tanh", tanh, f64::tanh);
        within_one_ulp("exp", exp, f64::exp);
        within_one_ulp("sigmoid", sigmoid, |x| 1.0 / (1.0 + (-x).exp()));
        // (the C library's erf in float64)
        within_one_ulp("erf", erf, crate::ops::precise::erf);
    }

    /// x³ correctly rounded to float32, from integers: |x| = m·2^e with m
    /// an integer below 2^24, m³ exact in a u128, rounded to 24 significant
    /// bits (ties to even). `None` where the cube is not a normal float32.
    fn exact_cube(x: f32) -> Option<f32> {
        if !x.is_normal() {
            return None;
        }
        let bits = x.to_bits();
        let m = u128::from((bits & 0x7f_ffff) | 0x80_0000);
        let e = ((bits >> 23) & 0xff) as i32 - 150;
        let c = m * m * m;
        let shift = (128 - c.leading_zeros() as i32 - 24).max(0);
        let (mut q, r) = (c >> shift, c & ((1u128 << shift) - 1));
        let half = if shift > 0 { 1u128 << (shift - 1) } else { 0 };
        if shift > 0 && (r > half || (r == half && q & 1 == 1)) {
            q += 1;
        }
        let y = (q as f64 * 2f64.powi(3 * e + shift)) as f32;
        let y = if x < 0.0 { -y } else { y };
        y.is_normal().then_some(y)
    }

    #[test]
    fn cube_is_the_correctly_rounded_cube() {
        let mut checked = 0;
        for x in inputs() {
            if let Some(want) = exact_cube(x) {
                assert_eq!(cube(x).to_bits(), want.to_bits(), "{x}³");
                checked += 1;
            }
        }
        assert!(checked > 400_000, "{checked}");
        assert!(cube(f32::NAN).is_nan());
        assert_eq!(cube(f32::NEG_INFINITY), f32::NEG_INFINITY);
        assert_eq!(cube(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(cube(1e13), f32::INFINITY);
    }

    #[test]
    fn special_values_follow_ieee() {
        assert!(tanh(f32::NAN).is_nan() && exp(f32::NAN).is_nan() && sigmoid(f32::NAN).is_nan());
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh(-0.0f32).to_bits(), (-0.0f32).to_bits());
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(0.0), 0.5);
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert_eq!(erf(4.5), 1.0);
        assert_eq!(erf(-0.0f32).to_bits(), (-0.0f32).to_bits());
        assert_eq!(erf(1e-45), 1e-45 * std::f32::consts::FRAC_2_SQRT_PI);
    }

    /// MLX's `exp`, `sigmoid` and `tanh` (its kernels, on arrays of every
    /// float32 kind of value: wide ranges, both thresholds of `exp`,
    /// subnormals, zeros, infinities, NaN) against [`mlx_exp`],
    /// [`mlx_sigmoid`] and `f32::tanh`, bit for bit.
    #[test]
    fn mlx_kinds_give_mlx_s_bits() {
        let mut xs = inputs();
        xs.extend((0..20_000).map(|i| (i as f32 - 10_000.0) / 100.0));
        xs.extend([
            88.0,
            -88.0,
            88.000_01,
            -88.000_01,
            87.999_99,
            -87.999_99,
            1e-40,
            -1e-40,
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::MIN,
        ]);
        let a = computed(&xs, &[xs.len() as i32]);
        type Scalar = fn(f32) -> f32;
        let kinds: [(&str, Scalar, MlxUnary); 3] = [
            ("exp", mlx_exp, |a| mlx_rs::ops::exp(a)),
            ("sigmoid", mlx_sigmoid, |a| mlx_rs::ops::sigmoid(a)),
            ("tanh", f32::tanh, |a| mlx_rs::ops::tanh(a)),
        ];
        for (name, ours, mlx) in kinds {
            let theirs = mlx(&a).unwrap();
            theirs.eval().unwrap();
            for (x, &t) in xs.iter().zip(theirs.as_slice::<f32>()) {
                let o = ours(*x);
                assert!(
                    o.to_bits() == t.to_bits() || (o.is_nan() && t.is_nan()),
                    "{name}({x:e}): {o:e} against MLX's {t:e}"
                );
            }
        }
        assert!(mlx_exp(f32::NAN).is_nan() && mlx_sigmoid(f32::NAN).is_nan());
        assert_eq!(mlx_exp(89.0), f32::INFINITY);
        assert_eq!(mlx_exp(-89.0), 0.0);
        assert_eq!(mlx_sigmoid(-0.0), 0.5);
    }

    #[test]
    fn mlx_kinds_stop_below_the_table_s_own_pass() {
        let small = computed(&mixed(MIN_ELEMENTS - 1, 3), &[MIN_ELEMENTS as i32 - 1]);
        let ours = ready_or(Kind::MlxExp, &[&small], must_not_run).unwrap();
        assert_eq!(bits(&ours), bits(&mlx_rs::ops::exp(&small).unwrap()));
        let large = computed(&mixed(MIN_ELEMENTS, 3), &[MIN_ELEMENTS as i32]);
        let ran = std::cell::Cell::new(false);
        ready_or(Kind::MlxExp, &[&large], || {
            ran.set(true);
            Ok(mlx_rs::ops::exp(&large)?)
        })
        .unwrap();
        assert!(ran.get(), "MIN_ELEMENTS values are the table's own pass's");
    }

    fn step(kind: Kind, a: usize, b: usize) -> Step {
        Step { kind, args: [a, b] }
    }

    #[test]
    fn every_compiled_copy_gives_the_plain_copy_s_bits() {
        let xs = inputs();
        let steps = [
            step(Kind::Multiply, 0, 1),
            step(Kind::Tanh, 2, 2),
            step(Kind::Exp, 3, 3),
            step(Kind::Sigmoid, 4, 4),
            step(Kind::Erf, 5, 5),
            step(Kind::Cube, 6, 6),
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

    #[test]
    fn ready_inputs_give_mlx_s_bits_at_once() {
        let n = 61 * 40;
        let a = computed(&mixed(n, 0), &[40, 61]);
        // the same values shifted, so every pair of specials meets
        let b = computed(&mixed(n, 17), &[40, 61]);
        let row = computed(&mixed(61, 5), &[61]);
        let one = computed(&[-0.0], &[]);
        for (kind, mlx) in BINARY {
            for (x, y) in [
                (&a, &b),
                (&b, &a),
                (&a, &row),
                (&row, &a),
                (&a, &one),
                (&one, &b),
            ] {
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
        // transcendental kinds keep their own rule (vectorized_or)
        let out = ready_or(Kind::Exp, &[&a], || Ok(mlx_rs::ops::exp(&a)?)).unwrap();
        assert_eq!(bits(&out), bits(&mlx_rs::ops::exp(&a).unwrap()));
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

    /// Prints how long the bench's 20-op chain (tanh(x * 1.1 + 0.1) * 0.9 -
    /// 0.01, five times) and its parts take on 1M values (`cargo test --
    /// --ignored --nocapture`).
    #[test]
    #[ignore]
    fn chain_time() {
        let n = 1 << 20;
        let xs: Vec<f32> = (0..n).map(|i| i as f32 / n as f32).collect();
        let time = |steps: &[Step], sources: &[Source]| {
            let mut out = vec![0.0f32; n];
            let mut best = f64::MAX;
            for _ in 0..7 {
                let start = std::time::Instant::now();
                compute(steps, sources, &mut out);
                best = best.min(start.elapsed().as_secs_f64());
            }
            best * 1e3
        };
        let c = [1.1f32, 0.1, 0.9, 0.01];
        let sources: Vec<Source> = std::iter::once(Source::Values(&xs))
            .chain(c.iter().map(|&v| Source::Value(v)))
            .collect();
        let mut chain = Vec::new();
        let mut last = 0;
        for _ in 0..5 {
            for (kind, k) in [
                (Kind::Multiply, Some(1)),
                (Kind::Add, Some(2)),
                (Kind::Tanh, None),
                (Kind::Multiply, Some(3)),
                (Kind::Subtract, Some(4)),
            ] {
                let r = 5 + chain.len();
                chain.push(step(kind, last, k.unwrap_or(last)));
                last = r;
            }
        }
        let only = |kind| [Step { kind, args: [0, 1] }];
        println!(
            "chain {:.2} ms; tanh {:.2}; exp {:.2}; sigmoid {:.2}; multiply {:.2}",
            time(&chain, &sources),
            time(&only(Kind::Tanh), &sources),
            time(&only(Kind::Exp), &sources),
            time(&only(Kind::Sigmoid), &sources),
            time(&only(Kind::Multiply), &sources)
        );
    }
}
