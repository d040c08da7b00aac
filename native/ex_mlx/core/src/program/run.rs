//! The interpreter: a program's instructions run over its slots on the
//! calling worker (crate::program's `Program::run_until`).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mlx_rs::Array;

use super::{Branch, CompiledRun, FusedOps, Instruction, LastReads, Loop, OpCall};
use crate::error::{Error, Result};
use crate::host_tensor::{self, HostTensor};
use crate::item::{self, Number};
use crate::memory;
use crate::ops::params::Param;
use crate::ops::table::Op;
use crate::step_graph;

/// A program's slots while it runs, and the small integer tensors among them
/// whose values are known here (crate::host_tensor): such a slot's MLX
/// array is made when an op computed by MLX reads it.
pub(super) struct Run<'a> {
    pub(super) slots: Vec<Option<Array>>,
    pub(super) host: Vec<Option<HostTensor>>,
    pub(super) stop: &'a dyn Fn() -> bool,
    /// Whether float32 tensors may be computed here (a CPU run).
    pub(super) floats: bool,
    /// Whether a loop whose condition the device computes builds each
    /// step while the device still computes the one before (a GPU run:
    /// [`Run::pipelined_steps`]).
    pub(super) pipelined: bool,
    /// How many loops the run is inside, and the nanoseconds it waited for
    /// the device in them and how many values it read from the device
    /// there ([`Run::wait_for_device`]).
    pub(super) loops: usize,
    pub(super) waited: u64,
    pub(super) reads: u64,
    /// The last mask an `attention_admitted` read from MLX: its slot, its
    /// values and its shape. Every layer of a decoder reads one mask slot
    /// (crate::program's `merge_equal_ops`), so it is read once per value;
    /// writing or clearing the slot forgets it.
    mask_read: Option<(usize, std::sync::Arc<[bool]>, Vec<i32>)>,
}

/// Where loops' time went, over every program run in this process: steps
/// run, time building them (the interpreter, MLX's graph, queueing the
/// device's work), time waiting for the device to compute a value the
/// loop's control flow reads (its condition, a branch's predicate, a state
/// it evaluates), and how many such reads. Outermost loops only. A profile
/// for benchmarks; [`loop_times`] reads it.
static LOOP_STEPS: AtomicU64 = AtomicU64::new(0);
static LOOP_BUILDING_NS: AtomicU64 = AtomicU64::new(0);
static LOOP_WAITING_NS: AtomicU64 = AtomicU64::new(0);
static LOOP_READS: AtomicU64 = AtomicU64::new(0);
/// Of the building time, that spent in MLX's `async_eval` of pipelined
/// steps (MLX walking the step's graph and queueing its kernels).
static LOOP_QUEUEING_NS: AtomicU64 = AtomicU64::new(0);

/// Of the building time, that spent in calls of MLX-compiled runs of ops
/// (MLX replaying the traced graph).
static LOOP_COMPILED_NS: AtomicU64 = AtomicU64::new(0);

/// Loops' steps, nanoseconds building and waiting, reads of the device,
/// and nanoseconds queueing and in compiled runs (see [`LOOP_STEPS`],
/// [`LOOP_QUEUEING_NS`], [`LOOP_COMPILED_NS`]), since the process started.
pub fn loop_times() -> [u64; 6] {
    [
        LOOP_STEPS.load(Ordering::Relaxed),
        LOOP_BUILDING_NS.load(Ordering::Relaxed),
        LOOP_WAITING_NS.load(Ordering::Relaxed),
        LOOP_READS.load(Ordering::Relaxed),
        LOOP_QUEUEING_NS.load(Ordering::Relaxed),
        LOOP_COMPILED_NS.load(Ordering::Relaxed),
    ]
}

/// A loop whose condition the device computes is pipelined
/// ([`Run::pipelined_steps`]) once it has run this many steps: a loop that
/// ends sooner computes no step it does not need.
pub(super) const PIPELINE_AFTER: usize = 4;

/// A slot's value: its MLX array and the values known here, either or both.
type Value = (Option<Array>, Option<HostTensor>);

/// A loop evaluates its state every this many steps when its condition
/// is known without evaluating anything, so that the state's graph stays
/// shallow.
pub(super) const EVAL_STATE_EVERY: usize = 64;

/// A loop whose state holds at least this many bytes of arrays has its
/// state evaluated at every step, whatever its condition: unevaluated, a
/// step's state is an input of the next step's graph and of anything the
/// step reads from it, so MLX can neither update it in place nor free it,
/// and the steps between evaluations each hold a copy.
pub(super) const EVAL_STATE_BYTES: usize = 1 << 20;

impl<'a> Run<'a> {
    /// A run over `slots` (and the values of them known here, `host`).
    pub(super) fn new(
        slots: Vec<Option<Array>>,
        host: Vec<Option<HostTensor>>,
        stop: &'a dyn Fn() -> bool,
        floats: bool,
        pipelined: bool,
    ) -> Run<'a> {
        Run {
            slots,
            host,
            stop,
            floats,
            pipelined,
            loops: 0,
            waited: 0,
            reads: 0,
            mask_read: None,
        }
    }

    pub(super) fn read(&mut self, slot: usize) -> Result<Array> {
        if let Some(Some(a)) = self.slots.get(slot) {
            return Ok(a.clone());
        }
        match self.host.get(slot).cloned().flatten() {
            Some(h) => {
                let a = h.to_array()?;
                self.slots[slot] = Some(a.clone());
                Ok(a)
            }
            None => Err(Error::Internal(format!(
                "program slot {slot} read before written"
            ))),
        }
    }

    /// The shape of the value in `slot`, if written.
    pub(super) fn shape(&self, slot: usize) -> Option<Vec<i32>> {
        match (self.slots.get(slot)?, self.host.get(slot)?) {
            (Some(a), _) => Some(a.shape().to_vec()),
            (None, Some(h)) => Some(h.shape.clone()),
            (None, None) => None,
        }
    }

    /// The number of elements of the value in `slot`, if written.
    pub(super) fn elements(&self, slot: usize) -> Option<u64> {
        self.shape(slot)?
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))
    }

    /// Writes `slot`: an MLX array, or values known here (whose array is
    /// made when it is read).
    fn write(&mut self, slot: usize, a: Option<Array>, host: Option<HostTensor>) {
        self.slots[slot] = a;
        self.host[slot] = host;
        self.forget_mask_read(slot..slot + 1);
    }

    /// Forgets the mask read from MLX when its slot is in `slots`.
    fn forget_mask_read(&mut self, slots: Range<usize>) {
        if matches!(&self.mask_read, Some((s, _, _)) if slots.contains(s)) {
            self.mask_read = None;
        }
    }

    /// The values in `slots` (arrays, and values known here).
    /// Whether the arrays in `state` hold [`EVAL_STATE_BYTES`] or more.
    fn large_state(&self, state: &Range<usize>) -> bool {
        self.slots[state.clone()]
            .iter()
            .flatten()
            .map(Array::nbytes)
            .sum::<usize>()
            >= EVAL_STATE_BYTES
    }

    fn values_of(&self, slots: impl IntoIterator<Item = usize>) -> Vec<Value> {
        slots
            .into_iter()
            .map(|s| (self.slots[s].clone(), self.host[s].clone()))
            .collect()
    }

    /// Clears `cleared`, then writes `values` to the slots from `first`.
    fn replace(&mut self, cleared: Range<usize>, first: usize, values: Vec<Value>) {
        self.clear(cleared);
        for (k, (v, h)) in values.into_iter().enumerate() {
            self.write(first + k, v, h);
        }
    }

    /// `Err(Cancelled)` once the program's caller is gone (checked before
    /// every loop step).
    fn check_stop(&self) -> Result<()> {
        if (self.stop)() {
            return Err(Error::Cancelled(
                "the program's caller is gone; its while loop was stopped".into(),
            ));
        }
        Ok(())
    }

    fn clear(&mut self, slots: Range<usize>) {
        self.forget_mask_read(slots.clone());
        for s in &mut self.slots[slots.clone()] {
            *s = None;
        }
        for h in &mut self.host[slots] {
            *h = None;
        }
    }

    /// Whether the one-element array in `slot` is non-zero: known here, or
    /// read from MLX (an evaluation).
    fn truthy(&mut self, slot: usize) -> Result<bool> {
        match self.host.get(slot).and_then(|h| h.as_ref()?.truthy()) {
            Some(b) => Ok(b),
            None => {
                let a = self.read(slot)?;
                Ok(truthy(self.wait_for_device(true, || item::item(&a))?))
            }
        }
    }

    /// `wait()`, which waits for the device to compute what control flow
    /// reads (a read of one value when `read`), counted in a loop's
    /// profile (see [`LOOP_STEPS`]).
    fn wait_for_device<T>(&mut self, read: bool, wait: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.loops == 0 {
            return wait();
        }
        let started = Instant::now();
        let result = wait();
        let waited = started.elapsed().as_nanos() as u64;
        self.waited += waited;
        LOOP_WAITING_NS.fetch_add(waited, Ordering::Relaxed);
        if read {
            self.reads += 1;
            LOOP_READS.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// [`Run::block`] for the program's top-level block or a loop's body,
    /// dropping after each instruction the slots `last_reads` names for it
    /// (nothing later reads them: MLX frees their buffers once no graph
    /// needs them).
    pub(super) fn block_with_last_reads(
        &mut self,
        instructions: &[Instruction],
        last_reads: &[LastReads],
    ) -> Result<()> {
        for (ins, reads) in instructions.iter().zip(last_reads) {
            match ins {
                // (a loop's initial values that nothing reads after it are
                // handed to its state, not copied: a state value of which
                // the loop holds the only reference can be updated in place
                // by MLX, a key/value cache written at each step)
                Instruction::Loop(l) => self.run_loop(l, reads)?,
                _ => self.block(std::slice::from_ref(ins))?,
            }
            for &s in &reads.done {
                self.slots[s] = None;
                self.host[s] = None;
            }
        }
        Ok(())
    }

    pub(super) fn block(&mut self, instructions: &[Instruction]) -> Result<()> {
        for ins in instructions {
            match ins {
                Instruction::Op(call) => self.op(call)?,
                Instruction::Fused(group) => self.fused(group)?,
                Instruction::Compiled(run) => self.compiled(run)?,
                Instruction::Loop(l) => self.run_loop(l, &LastReads::NONE)?,
                Instruction::Branch(b) => self.branch(b)?,
            }
        }
        Ok(())
    }

    fn op(&mut self, call: &OpCall) -> Result<()> {
        if let Some(h) = self.on_host(call) {
            self.write(call.first, None, Some(h));
            return Ok(());
        }
        if call.op == Op::attention_admitted {
            return self.attention_admitted(call);
        }
        let args: Vec<Array> = call
            .inputs
            .iter()
            .map(|&s| self.read(s))
            .collect::<Result<_>>()?;
        let results = crate::cpu_kernels::apply(call.op, &args, call.params.clone())?.into_vec();
        for (k, out) in results.into_iter().enumerate() {
            let out = match call.cast {
                Some(dtype) if out.dtype() != dtype => out.as_dtype(dtype)?,
                _ => out,
            };
            self.write(call.first + k, Some(out), None);
        }
        Ok(())
    }

    /// `attention_admitted` (crate::ops::fast), given its mask's values:
    /// known here, or read from MLX (an evaluation, counted as a read: a
    /// loop whose steps read while they are built is not pipelined).
    fn attention_admitted(&mut self, call: &OpCall) -> Result<()> {
        let (&[q, k, v, mask], [Param::Float(scale)]) =
            (call.inputs.as_slice(), call.params.as_slice())
        else {
            return Err(Error::Internal(
                "attention_admitted needs 4 inputs and a scale".into(),
            ));
        };
        let not_boolean = |dtype| {
            Error::Type(format!(
                "admitted: attention_admitted needs a boolean mask, got {}",
                crate::dtype::display(dtype)
            ))
        };
        let (known, shape): (std::sync::Arc<[bool]>, Vec<i32>) =
            match (&self.host[mask], &self.mask_read) {
                (Some(h), _) if h.dtype != mlx_rs::Dtype::Bool => return Err(not_boolean(h.dtype)),
                (Some(h), _) => (h.values.iter().map(|&x| x != 0).collect(), h.shape.clone()),
                (None, Some((s, known, shape))) if *s == mask => (known.clone(), shape.clone()),
                (None, _) => {
                    let a = self.read(mask)?;
                    if a.dtype() != mlx_rs::Dtype::Bool {
                        return Err(not_boolean(a.dtype()));
                    }
                    let buffer = self.wait_for_device(true, || crate::host::HostBuffer::new(&a))?;
                    let known: std::sync::Arc<[bool]> =
                        buffer.bytes().iter().map(|&b| b != 0).collect();
                    let shape = a.shape().to_vec();
                    self.mask_read = Some((mask, known.clone(), shape.clone()));
                    (known, shape)
                }
            };
        let (q, k, v) = (self.read(q)?, self.read(k)?, self.read(v)?);
        let mut out = crate::ops::fast::attention_of_admitted(&q, &k, &v, &known, &shape, *scale)?;
        if let Some(dtype) = call.cast {
            if out.dtype() != dtype {
                out = out.as_dtype(dtype)?;
            }
        }
        self.write(call.first, Some(out), None);
        Ok(())
    }

    /// A fused group's result in one pass, or its ops one by one where it
    /// cannot run fused (crate::elementwise_fusion).
    fn fused(&mut self, group: &FusedOps) -> Result<()> {
        // (a ready group whose inputs are all known here runs op by op,
        // where each op is computed here too and its result stays known)
        if group.when_ready
            && group
                .kernel
                .leaves()
                .iter()
                .all(|&s| self.host[s].is_some())
        {
            for call in &group.ops {
                self.op(call)?;
            }
            return Ok(());
        }
        let leaves: Vec<Array> = group
            .kernel
            .leaves()
            .iter()
            .map(|&s| self.read(s))
            .collect::<Result<_>>()?;
        let out = if group.when_ready {
            group.kernel.run_ready(&leaves)?
        } else {
            group.kernel.run(&leaves)?
        };
        match out {
            Some(out) => self.write(group.kernel.output(), Some(out), None),
            None => {
                for call in &group.ops {
                    self.op(call)?;
                }
            }
        }
        Ok(())
    }

    /// A compiled run's outputs, from its function (crate::fusion).
    fn compiled(&mut self, run: &CompiledRun) -> Result<()> {
        let args: Vec<Array> = run
            .externals
            .iter()
            .map(|&s| self.read(s))
            .collect::<Result<_>>()?;
        // (timed for the loop profile only inside loops)
        let started = (self.loops > 0).then(Instant::now);
        let outputs = run.function.call(&args)?;
        if let Some(started) = started {
            let took = started.elapsed().as_nanos() as u64;
            LOOP_COMPILED_NS.fetch_add(took, Ordering::Relaxed);
        }
        for (&s, out) in run.outputs.iter().zip(outputs) {
            self.write(s, Some(out), None);
        }
        Ok(())
    }

    /// The result of a one-result op computed here (crate::host_tensor),
    /// when its inputs are known here and the op is one computed here.
    fn on_host(&self, call: &OpCall) -> Option<HostTensor> {
        if call.results != 1 || call.inputs.is_empty() {
            return None;
        }
        let known: Vec<&HostTensor> = call
            .inputs
            .iter()
            .map(|&s| self.host[s].as_ref())
            .collect::<Option<_>>()?;
        let apply = if self.floats {
            host_tensor::apply
        } else {
            host_tensor::apply_integers
        };
        let h = apply(call.op, &known, &call.params)?;
        match call.cast {
            Some(dtype) if dtype != h.dtype => apply(Op::as_type, &[&h], &[Param::Type(dtype)]),
            _ => Some(h),
        }
    }

    /// Runs loop `l`: the initial values `reads.handed_over` marks (by
    /// position) leave their slots for the loop's state, and a step drops
    /// the slots `reads.body` names after each instruction of the body
    /// (none when it is empty).
    fn run_loop(&mut self, l: &Loop, reads: &LastReads) -> Result<()> {
        let n = l.initial.len();
        let state = l.state..l.state + n;
        for (k, &s) in l.initial.iter().enumerate() {
            let mut host = self.host[s].clone();
            let v = if host.is_some() {
                self.slots[s].clone()
            } else {
                let a = self.read(s)?;
                // (a small integer state, such as a position or a length,
                // is read once here, so that the loop's arithmetic on it
                // and the conditions and branches it decides need no
                // evaluation at each step: integers are exact anywhere)
                if crate::cpu_kernels::in_programs() {
                    host = HostTensor::read_integers(&a);
                }
                Some(a)
            };
            if reads.handed_over.get(k) == Some(&true) {
                self.slots[s] = None;
                self.host[s] = None;
            }
            self.write(l.state + k, v, host);
        }
        let (started, waited) = (Instant::now(), self.waited);
        self.loops += 1;
        let result = self.loop_steps(l, state.clone(), reads);
        self.loops -= 1;
        if self.loops == 0 {
            let all = started.elapsed().as_nanos() as u64;
            let building = all.saturating_sub(self.waited - waited);
            LOOP_BUILDING_NS.fetch_add(building, Ordering::Relaxed);
        }
        result?;
        for k in 0..n {
            let v = self.slots[l.state + k].take();
            self.slots[l.results + k] = v;
            self.host[l.results + k] = self.host[l.state + k].take();
            self.forget_mask_read(l.results + k..l.results + k + 1);
        }
        Ok(())
    }

    /// The steps of loop `l`, whose state is in `state`, until its
    /// condition is false.
    fn loop_steps(&mut self, l: &Loop, state: Range<usize>, reads: &LastReads) -> Result<()> {
        let mut step = 0usize;
        // (whether a step built so far read a value from MLX; whether the
        // body holds a loop, which evaluates its state while it is built)
        let mut body_read = false;
        let body_loops = super::has_loops(&l.body);
        loop {
            self.check_stop()?;
            self.block(&l.condition.instructions)?;
            let pred = l.condition.outputs[0];
            // The state is evaluated with the predicate when that needs an
            // evaluation anyway, else at every step when it is large
            // (EVAL_STATE_BYTES) and every EVAL_STATE_EVERY steps otherwise:
            // its graph stays shallow, and a value a step replaced has no
            // reference left (MLX may reuse its buffer). (Only queueing a
            // large state's evaluation would let the host build steps ahead
            // of the device without bound, each holding its own state.)
            step += 1;
            let large = self.large_state(&state);
            // (a step that read the device while it was built, as a
            // branch whose predicate the host does not know does, would do
            // so while the step before it runs, as would a loop of its own
            // evaluating its state: its writes into the state would then
            // copy it, and building it ahead gains nothing)
            let reads_while_built = body_read || body_loops;
            if self.pipelined
                && self.host[pred].is_none()
                && step > PIPELINE_AFTER
                && !reads_while_built
            {
                return self.pipelined_steps(l, state, step - 1, reads);
            }
            if self.host[pred].is_none() || large || step.is_multiple_of(EVAL_STATE_EVERY) {
                let p = if self.host[pred].is_none() {
                    Some(self.read(pred)?)
                } else {
                    None
                };
                let mut now: Vec<Array> = self.slots[state.clone()]
                    .iter()
                    .flatten()
                    .cloned()
                    .collect();
                now.extend(p);
                self.wait_for_device(false, || Ok(mlx_rs::transforms::eval(&now)?))?;
                if self.pipelined {
                    // (a GPU run: an evaluation may end before MLX has
                    // released the buffers its kernels held, as a GPU's
                    // backend does; on a drained stream they are released,
                    // and the next step's writes may take over the state's.
                    // MLX's CPU backend releases them before the evaluation
                    // returns:
                    // docs/decisions/0023-large-states-drained-after-evaluation.md,
                    // docs/decisions/0025-every-pipelined-state-written-in-place.md)
                    self.wait_for_device(false, crate::worker::synchronize_own_stream)?;
                }
            }
            if !self.truthy(pred)? {
                self.clear(state.end..l.results);
                return Ok(());
            }
            let before = self.reads;
            self.step(l, &state, step, &reads.body)?;
            body_read |= self.reads > before;
            if self.loops == 1 {
                LOOP_STEPS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Step `index` (from 1) of `l`: its body on the state in `state`, whose
    /// slots then hold the next state.
    fn step(
        &mut self,
        l: &Loop,
        state: &Range<usize>,
        index: usize,
        body: &[LastReads],
    ) -> Result<()> {
        if body.len() == l.body.instructions.len() {
            self.block_with_last_reads(&l.body.instructions, body)?;
        } else {
            self.block(&l.body.instructions)?;
        }
        let next = self.values_of(l.body.outputs.iter().copied());
        if self.loops == 1 && index == step_graph::STEP && step_graph::enabled() {
            let arrays: Vec<Array> = next.iter().filter_map(|(a, _)| a.clone()).collect();
            step_graph::write(&arrays).map_err(Error::Mlx)?;
        }
        // The step's new values are checked against the memory limit
        // as every new tensor is (crate::memory::check_allocation).
        let fresh: usize = l
            .body
            .outputs
            .iter()
            .zip(&next)
            .filter(|(&s, _)| s >= state.end)
            .map(|(_, (a, _))| a.as_ref().map_or(0, |a| a.nbytes()))
            .sum();
        memory::check_allocation(fresh)?;
        self.replace(l.state..l.results, l.state, next);
        Ok(())
    }

    /// The rest of loop `l` after its first `done` steps, whose state is in
    /// `state` and whose condition on it was just built and is not known
    /// here: while the device computes a step and its condition, the next
    /// step and its condition are built and queued (MLX's `async_eval`),
    /// then the condition of the step before is read, as mlx-lm's
    /// generation queues its steps. When it is false the state is the
    /// loop's result and the step queued ahead is dropped unread (the
    /// device computes it: one step of work, once a loop ends); an error
    /// building or queueing that step is raised only when the step is
    /// needed; the state a false condition ends with is kept only for the
    /// results read after the loop (`reads.unread`).
    ///
    /// MLX reuses an input's buffer for a result only when nothing else
    /// holds it, and a queued step's kernels hold their inputs until they
    /// have run. A state (a key/value cache) is therefore written in place
    /// when the device has run the step before by the time the next is
    /// queued, as it has whenever building a step takes longer than
    /// computing it (decoding), and copied otherwise: then three states at
    /// most, the one the running step reads, the one it writes and the
    /// one the step queued after it writes
    /// (docs/decisions/0026-pipelined-steps-queued-ahead.md). A loop's body
    /// has no effect but its values (ExMLX.Compiler runs a loop with a hook
    /// on Nx.Defn.Evaluator), so the results are those of a loop that
    /// builds a step only once its condition is read.
    fn pipelined_steps(
        &mut self,
        l: &Loop,
        state: Range<usize>,
        done: usize,
        reads: &LastReads,
    ) -> Result<()> {
        let mut step = done;
        let pred = l.condition.outputs[0];
        let mut condition = self.read(pred)?;
        let queue = |run: &Self, condition: &Array| {
            let mut now: Vec<&Array> = run.slots[state.clone()].iter().flatten().collect();
            now.push(condition);
            let started = Instant::now();
            let queued = mlx_rs::transforms::async_eval(now);
            let took = started.elapsed().as_nanos() as u64;
            LOOP_QUEUEING_NS.fetch_add(took, Ordering::Relaxed);
            queued
        };
        queue(self, &condition)?;
        loop {
            self.check_stop()?;
            // (a result nothing reads is not kept: the step built ahead
            // then holds the only reference to its state value, which MLX
            // may update in place, a key/value cache the loop writes)
            let mut kept = self.values_of(state.clone());
            for (v, _) in kept.iter_mut().zip(&reads.unread).filter(|(_, &u)| u) {
                *v = (None, None);
            }
            step += 1;
            let ahead = self.step(l, &state, step, &reads.body).and_then(|()| {
                self.block(&l.condition.instructions)?;
                self.read(pred)
            });
            let queued = match &ahead {
                Ok(next) => queue(self, next),
                Err(_) => Ok(()),
            };
            let go = truthy(self.wait_for_device(true, || item::item(&condition))?);
            if !go {
                self.replace(l.state..l.results, l.state, kept);
                return Ok(());
            }
            drop(kept);
            condition = ahead?;
            queued?;
            if self.loops == 1 {
                LOOP_STEPS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn branch(&mut self, b: &Branch) -> Result<()> {
        let mut chosen = &b.otherwise;
        for (pred, body) in &b.clauses {
            self.block(&pred.instructions)?;
            if self.truthy(pred.outputs[0])? {
                chosen = body;
                break;
            }
        }
        self.block(&chosen.instructions)?;
        let results = self.values_of(chosen.outputs.iter().copied());
        self.replace(b.inner.clone(), b.inner.end, results);
        Ok(())
    }
}

pub(super) fn truthy(n: Number) -> bool {
    match n {
        Number::Bool(b) => b,
        Number::Int(i) => i != 0,
        Number::UInt(u) => u != 0,
        Number::Float(f) => f != 0.0,
        Number::Complex(re, im) => re != 0.0 || im != 0.0,
    }
}
