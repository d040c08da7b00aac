//! Programs: blocks of op-table instructions over numbered slots, with
//! loops and branches, run by a device's worker in one go (for
//! `ExMLX.Compiler`, which records them from a `defn` graph).
//!
//! Slots `0..inputs` hold the call's inputs and the next `constants.len()`
//! the program's constant arrays. Every other slot is written by exactly one
//! place of the program, numbered in the order the program is written
//! (depth first):
//!
//! * an op writes its results to the next slots;
//! * a loop ([`Loop`]) first takes as many slots as it has state values (the
//!   state its condition and body read), then come the slots of its
//!   condition and of its body, then its results (the final state);
//! * a branch ([`Branch`]) takes, clause by clause, the slots of the
//!   clause's predicate and body, then those of its last body, then its
//!   results.
//!
//! A block reads the slots visible where it starts and those it wrote
//! itself; what a nested block writes is not visible after it. Nesting is at
//! most [`MAX_DEPTH`] deep.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::{Array, Dtype};

use crate::device::{Device, Kind};
use crate::elementwise_fusion::{Kernel, Kind as FusedKind};
use crate::error::{Error, Result};
use crate::fusion::FusedProgram;
use crate::host_tensor::{self, HostTensor};
use crate::item::{self, Number};
use crate::memory;
use crate::ops::params::Param;
use crate::ops::table::Op;
use std::sync::Arc;

/// How deeply loops and branches nest (programs from outside are checked
/// against it; running and checking recurse this deep).
pub const MAX_DEPTH: usize = 64;

mod here;

/// One op: its input slots, parameters, the type each result is cast to (if
/// any) and how many results it has.
#[derive(Clone, Debug)]
pub struct OpCall {
    pub op: Op,
    pub inputs: Vec<usize>,
    pub params: Vec<Param>,
    pub cast: Option<Dtype>,
    pub results: usize,
    /// The first slot it writes (set when the program is checked).
    first: usize,
}

impl OpCall {
    pub fn new(
        op: Op,
        inputs: Vec<usize>,
        params: Vec<Param>,
        cast: Option<Dtype>,
        results: usize,
    ) -> OpCall {
        OpCall {
            op,
            inputs,
            params,
            cast,
            results,
            first: 0,
        }
    }

    /// The first slot it writes (once the program is checked).
    pub fn first(&self) -> usize {
        self.first
    }
}

/// Instructions and the slots a block gives back.
#[derive(Clone, Debug, Default)]
pub struct Block {
    pub instructions: Vec<Instruction>,
    pub outputs: Vec<usize>,
}

/// A `while` loop: the state starts as `initial`; while `condition` (one
/// output, any type, zero is false) holds, `body` (as many outputs as there
/// are state values) gives the next state. The results are the final state.
#[derive(Clone, Debug)]
pub struct Loop {
    pub initial: Vec<usize>,
    pub condition: Block,
    pub body: Block,
    /// The first state slot, and the first result slot (set when the
    /// program is checked): the condition and body write between them.
    state: usize,
    results: usize,
}

impl Loop {
    pub fn new(initial: Vec<usize>, condition: Block, body: Block) -> Loop {
        Loop {
            initial,
            condition,
            body,
            state: 0,
            results: 0,
        }
    }
}

/// A `cond`: the body of the first clause whose predicate block (one
/// output) is non-zero runs, else `otherwise`; every body gives as many
/// outputs, the branch's results.
#[derive(Clone, Debug)]
pub struct Branch {
    pub clauses: Vec<(Block, Block)>,
    pub otherwise: Block,
    /// The slots the clauses write (set when the program is checked).
    inner: Range<usize>,
}

impl Branch {
    pub fn new(clauses: Vec<(Block, Block)>, otherwise: Block) -> Branch {
        Branch {
            clauses,
            otherwise,
            inner: 0..0,
        }
    }
}

/// A group of element-wise ops on the CPU, made by [`Program::fuse`] or
/// [`Program::group_ready_ops`]: its ops in program order (run one by one
/// where the kernel does not run) and its kernel
/// (crate::elementwise_fusion).
#[derive(Clone, Debug)]
pub struct FusedOps {
    pub ops: Vec<OpCall>,
    pub kernel: Kernel,
    /// A group of [`Program::group_ready_ops`]: it runs as one pass only
    /// when its inputs are already computed (`Kernel::run_ready`), never
    /// waiting for them; one of `fuse: true` runs as one pass whenever it is
    /// large enough (`Kernel::run`).
    pub when_ready: bool,
}

impl FusedOps {
    /// The group of `ops` (the last one its result); the ops given back if
    /// the kernel cannot take them.
    fn new(ops: Vec<OpCall>, when_ready: bool) -> std::result::Result<FusedOps, Vec<OpCall>> {
        let described: Option<Vec<(FusedKind, &[usize], usize)>> = ops
            .iter()
            .map(|c| {
                Some((
                    crate::ops::computed::elementwise_kind(c.op)?,
                    c.inputs.as_slice(),
                    c.first,
                ))
            })
            .collect();
        match described.as_deref().and_then(Kernel::new) {
            Some(kernel) => Ok(FusedOps {
                ops,
                kernel,
                when_ready,
            }),
            None => Err(ops),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Instruction {
    Op(OpCall),
    Loop(Loop),
    Branch(Branch),
    /// Element-wise ops run as one pass on the CPU: made by
    /// [`Program::fuse`] or [`Program::group_ready_ops`] in a checked
    /// program, never given from outside (crate::elementwise_fusion).
    Fused(FusedOps),
}

/// A checked program (see the module documentation).
#[derive(Debug)]
pub struct Program {
    inputs: usize,
    constants: usize,
    main: Block,
    slots: usize,
    loops: bool,
    fused: Option<FusedProgram>,
    /// Whether calls may run on the calling thread (`run_here`, crate's
    /// `program::here`).
    here: AtomicBool,
}

/// Which slots are visible while a program is checked.
struct Scope {
    visible: Vec<bool>,
}

impl Scope {
    fn next(&self) -> usize {
        self.visible.len()
    }

    fn define(&mut self, n: usize) -> usize {
        let first = self.next();
        self.visible.resize(first + n, true);
        first
    }

    fn hide_from(&mut self, first: usize) {
        for v in &mut self.visible[first..] {
            *v = false;
        }
    }

    fn readable(&self, slot: usize) -> bool {
        self.visible.get(slot).copied().unwrap_or(false)
    }
}

fn malformed(place: &str, message: impl std::fmt::Display) -> Error {
    Error::arg("program", format!("{place}: {message}"))
}

/// `what` inside `place` ("" being the program's main block).
fn within(place: &str, what: impl std::fmt::Display) -> String {
    if place.is_empty() {
        what.to_string()
    } else {
        format!("{place}: {what}")
    }
}

impl Program {
    /// Checks that every instruction reads slots visible to it, that ops
    /// take as many inputs and parameters (of the right kinds) as given and
    /// declare their number of results, that loops and branches give the
    /// outputs they must, and that the outputs name visible slots.
    pub fn new(
        inputs: usize,
        constants: usize,
        instructions: Vec<Instruction>,
        outputs: Vec<usize>,
    ) -> Result<Program> {
        let mut main = Block {
            instructions,
            outputs,
        };
        let mut scope = Scope {
            visible: vec![true; inputs + constants],
        };
        check_block(&mut main, &mut scope, "", 0)?;
        keep_boolean_conditions(&mut main, scope.next());
        let loops = has_loops(&main);
        Ok(Program {
            inputs,
            constants,
            main,
            slots: scope.next(),
            loops,
            fused: None,
            here: AtomicBool::new(false),
        })
    }

    /// How many inputs a call takes.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// How many outputs a call gives.
    pub fn outputs(&self) -> usize {
        self.main.outputs.len()
    }

    /// Whether the program has a loop (a run that may take any time).
    pub fn loops(&self) -> bool {
        self.loops
    }

    /// Fuses the program for runs on `device`; returns whether it did. On
    /// the CPU: groups of element-wise float32 ops, anywhere in the program,
    /// run as one pass each (crate::elementwise_fusion), while ExMLX's CPU
    /// kernels are on (crate::cpu_kernels; off, nothing is fused). On a GPU: the whole
    /// program through MLX's compile (crate::fusion), if it is straight-line
    /// (no loop, no branch).
    pub fn fuse(&mut self, device: Device) -> bool {
        if device.kind() == Kind::Cpu {
            if !crate::cpu_kernels::in_programs() {
                return false;
            }
            let reads = self.reads();
            return fuse_block(&mut self.main, &reads, false) > 0;
        }
        self.fuse_with_mlx_compile(device)
    }

    /// For runs on the CPU without `fuse: true`: every chain of exactly
    /// rounded element-wise ops (arithmetic, `max`, `min`, `negate`, `abs`,
    /// `sqrt`, `square`; crate::elementwise_fusion) joined by results read
    /// once becomes one group that runs as one pass when its inputs are
    /// already computed, as each of its ops would run alone
    /// (crate::elementwise_fusion's `ready_or`), and one by one otherwise:
    /// the same bits either way, without an array for each op in between (a
    /// batch-1 MLP's bias `add` and ReLU `max` after each product). Returns
    /// how many groups it made.
    pub fn group_ready_ops(&mut self) -> usize {
        if self.fused.is_some() || !crate::cpu_kernels::in_programs() {
            return 0;
        }
        let reads = self.reads();
        fuse_block(&mut self.main, &reads, true)
    }

    /// How many times each slot is read (instructions' inputs and blocks'
    /// outputs), over the whole program.
    fn reads(&self) -> Vec<u32> {
        let mut reads = vec![0u32; self.slots];
        visit_reads(&self.main, &mut |slot, _| reads[slot] += 1);
        reads
    }

    /// Readies the program for runs on `device`: [`Program::fuse`] when
    /// `fuse` is asked for, else on the CPU [`Program::group_ready_ops`]
    /// (what `program_new` and `program_load` do with a checked program).
    /// A CPU program without `fuse` whose every instruction the host
    /// computes may also run on the thread that calls it
    /// ([`Program::run_here`]).
    pub fn prepare(&mut self, device: Device, fuse: bool) {
        if fuse {
            self.fuse(device);
        } else if device.kind() == Kind::Cpu && crate::cpu_kernels::in_programs() {
            self.group_ready_ops();
            let here = here::straight_line_on_host(&self.main);
            self.here.store(here, Ordering::Relaxed);
        }
    }

    /// The whole program through MLX's compile (crate::fusion) for runs on
    /// `device`, if it is straight-line; returns whether it is.
    fn fuse_with_mlx_compile(&mut self, device: Device) -> bool {
        if self.loops
            || self
                .main
                .instructions
                .iter()
                .any(|i| !matches!(i, Instruction::Op(_)))
        {
            return false;
        }
        let main = self.main.clone();
        let slots = self.slots;
        let body = move |args: &[Array]| -> Result<Vec<Array>> {
            let mut run = Run {
                slots: args.iter().cloned().map(Some).collect(),
                host: vec![None; slots],
                stop: &|| false,
                floats: false,
            };
            run.slots.resize(slots, None);
            run.block(&main.instructions)?;
            main.outputs.iter().map(|&s| run.read(s)).collect()
        };
        self.fused = Some(FusedProgram::new(device, Arc::new(body)));
        true
    }

    /// Whether runs go through MLX's compile or have fused groups of
    /// element-wise ops ([`Program::fuse`]; not those of
    /// [`Program::group_ready_ops`]).
    pub fn fused(&self) -> bool {
        self.fused.is_some()
            || any_instruction(
                &self.main,
                &|ins| matches!(ins, Instruction::Fused(g) if !g.when_ready),
            )
    }

    /// Runs the program on `inputs` and `constants` (on the worker of the
    /// device they are on): the output arrays, lazy.
    pub fn run(&self, inputs: Vec<Array>, constants: Vec<Array>) -> Result<Vec<Array>> {
        self.run_until(inputs, constants, &|| false)
    }

    /// [`Program::run`], checking `stop` before every loop step: once it
    /// says true, the run ends with [`Error::Cancelled`].
    pub fn run_until(
        &self,
        inputs: Vec<Array>,
        constants: Vec<Array>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Array>> {
        if inputs.len() != self.inputs || constants.len() != self.constants {
            return Err(Error::arg(
                "inputs",
                format!(
                    "the program takes {} inputs, got {}",
                    self.inputs,
                    inputs.len()
                ),
            ));
        }
        if let Some(fused) = &self.fused {
            let mut args = inputs;
            args.extend(constants);
            return fused.call(&args);
        }
        let mut slots: Vec<Option<Array>> = Vec::with_capacity(self.slots);
        let mut host = vec![None; self.slots];
        // On the CPU, small float32 tensors are computed here too
        // (crate::host_tensor's `floats`, MLX's CPU bits); elsewhere only
        // the exact integer ones, whose bits every device shares.
        let floats = crate::device::Device::current_is_cpu();
        let read = |a: &Array| {
            if floats {
                HostTensor::read(a)
            } else {
                HostTensor::read_integers(a)
            }
        };
        // (constants are evaluated: their small tensors are read once; a
        // program with loops, or any on the CPU, reads its small inputs
        // too, once: a loop then reads its condition here at every step,
        // and the ops on them need no graph)
        // (with ExMLX's CPU kernels off, no value is known on the host, so
        // every op is MLX's: crate::cpu_kernels)
        let known = crate::cpu_kernels::in_programs();
        for (k, c) in constants.iter().enumerate().filter(|_| known) {
            host[self.inputs + k] = read(c);
        }
        if known && (self.loops || floats) {
            for (k, a) in inputs.iter().enumerate() {
                host[k] = read(a);
            }
        }
        slots.extend(inputs.into_iter().map(Some));
        slots.extend(constants.into_iter().map(Some));
        slots.resize(self.slots, None);
        let mut run = Run {
            slots,
            host,
            stop,
            floats,
        };
        run.block(&self.main.instructions)?;
        self.main.outputs.iter().map(|&s| run.read(s)).collect()
    }
}

/// A comparison read only as `select` conditions keeps MLX's boolean result
/// instead of being cast to the type it declares (Nx's u8): `select` reads a
/// condition as a boolean, so the cast and the conversion back were two more
/// passes over the data (Nx's gradient of `max` and `min` has two such
/// selects per use). The values the program gives are the same.
fn keep_boolean_conditions(main: &mut Block, slots: usize) {
    let mut read_otherwise = vec![false; slots];
    mark_reads(main, &mut read_otherwise);
    relax_comparisons(main, &read_otherwise);
}

/// Marks every slot read other than as a `select` condition.
fn mark_reads(block: &Block, read_otherwise: &mut [bool]) {
    visit_reads(block, &mut |slot, condition| {
        if !condition {
            read_otherwise[slot] = true
        }
    });
}

/// Calls `f(slot, as_select_condition)` for every read of a slot in `block`
/// and the blocks nested in it (an instruction's inputs, a block's outputs).
fn visit_reads(block: &Block, f: &mut impl FnMut(usize, bool)) {
    let each = |slots: &[usize], f: &mut dyn FnMut(usize, bool)| {
        for &s in slots {
            f(s, false)
        }
    };
    each(&block.outputs, f);
    for ins in &block.instructions {
        match ins {
            Instruction::Op(call) if call.op == Op::select && !call.inputs.is_empty() => {
                f(call.inputs[0], true);
                each(&call.inputs[1..], f);
            }
            Instruction::Op(call) => each(&call.inputs, f),
            Instruction::Fused(group) => {
                for call in &group.ops {
                    each(&call.inputs, f)
                }
            }
            Instruction::Loop(l) => {
                each(&l.initial, f);
                visit_reads(&l.condition, f);
                visit_reads(&l.body, f);
            }
            Instruction::Branch(b) => {
                for (pred, body) in &b.clauses {
                    visit_reads(pred, f);
                    visit_reads(body, f);
                }
                visit_reads(&b.otherwise, f);
            }
        }
    }
}

fn relax_comparisons(block: &mut Block, read_otherwise: &[bool]) {
    for ins in &mut block.instructions {
        match ins {
            Instruction::Op(call) => {
                let comparison = matches!(
                    call.op,
                    Op::equal
                        | Op::not_equal
                        | Op::less
                        | Op::less_equal
                        | Op::greater
                        | Op::greater_equal
                );
                if comparison && call.cast == Some(Dtype::Uint8) && !read_otherwise[call.first] {
                    call.cast = None;
                }
            }
            Instruction::Loop(l) => {
                relax_comparisons(&mut l.condition, read_otherwise);
                relax_comparisons(&mut l.body, read_otherwise);
            }
            Instruction::Branch(b) => {
                for (pred, body) in &mut b.clauses {
                    relax_comparisons(pred, read_otherwise);
                    relax_comparisons(body, read_otherwise);
                }
                relax_comparisons(&mut b.otherwise, read_otherwise);
            }
            Instruction::Fused(_) => {}
        }
    }
}

fn has_loops(block: &Block) -> bool {
    any_instruction(block, &|ins| matches!(ins, Instruction::Loop(_)))
}

/// Whether `pred` holds for an instruction of `block` or of a block nested
/// in it.
fn any_instruction(block: &Block, pred: &dyn Fn(&Instruction) -> bool) -> bool {
    block.instructions.iter().any(|ins| {
        pred(ins)
            || match ins {
                Instruction::Op(_) | Instruction::Fused(_) => false,
                Instruction::Loop(l) => {
                    any_instruction(&l.condition, pred) || any_instruction(&l.body, pred)
                }
                Instruction::Branch(b) => {
                    b.clauses
                        .iter()
                        .any(|(p, c)| any_instruction(p, pred) || any_instruction(c, pred))
                        || any_instruction(&b.otherwise, pred)
                }
            }
    })
}

/// Whether `call` can join a fused group (it may still run unfused, when
/// its inputs turn out not to be float32): an exactly rounded element-wise
/// op (crate::ops::computed::elementwise_kind), so fused or not, its bits
/// are MLX's.
fn fusible(call: &OpCall) -> bool {
    crate::ops::computed::elementwise_kind(call.op).is_some()
        && call.results == 1
        && matches!(call.cast, None | Some(Dtype::Float32))
}

/// Element-wise fusion on the CPU (crate::elementwise_fusion): replaces, in
/// `block` and the blocks nested in it, every group of two or more fusible
/// ops joined by results read once (`reads[slot]`, counted over the whole
/// program) by one [`Instruction::Fused`] at its last op's place.
/// `when_ready`: groups that run fused only when their inputs are computed
/// ([`Program::group_ready_ops`]).
/// Returns how many groups it made.
fn fuse_block(block: &mut Block, reads: &[u32], when_ready: bool) -> usize {
    let mut made = 0;
    for ins in &mut block.instructions {
        match ins {
            Instruction::Loop(l) => {
                made += fuse_block(&mut l.condition, reads, when_ready);
                made += fuse_block(&mut l.body, reads, when_ready);
            }
            Instruction::Branch(b) => {
                for (pred, body) in &mut b.clauses {
                    made += fuse_block(pred, reads, when_ready);
                    made += fuse_block(body, reads, when_ready);
                }
                made += fuse_block(&mut b.otherwise, reads, when_ready);
            }
            Instruction::Op(_) | Instruction::Fused(_) => {}
        }
    }
    // member_of[i]: the group instruction i belongs to, named by the index
    // of the group's last op (its root); members[root]: the group's ops;
    // root_writing[slot]: the open group whose root writes `slot`.
    let n = block.instructions.len();
    let mut member_of: Vec<Option<usize>> = vec![None; n];
    let mut root_writing: std::collections::HashMap<usize, usize> = Default::default();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        let Instruction::Op(call) = &block.instructions[i] else {
            continue;
        };
        if !fusible(call) {
            continue;
        }
        let mut group = vec![i];
        for s in &call.inputs {
            if reads.get(*s).copied() != Some(1) {
                continue;
            }
            if let Some(g) = root_writing.remove(s) {
                group.append(&mut members[g]);
            }
        }
        group.sort_unstable();
        for &m in &group {
            member_of[m] = Some(i);
        }
        members[i] = group;
        root_writing.insert(call.first(), i);
    }
    let mut kept = Vec::with_capacity(n);
    let mut taken: Vec<Option<Instruction>> = std::mem::take(&mut block.instructions)
        .into_iter()
        .map(Some)
        .collect();
    for i in 0..n {
        match member_of[i] {
            Some(root) if members[root].len() >= 2 => {
                if root == i {
                    let ops: Vec<OpCall> = members[root]
                        .iter()
                        .filter_map(|&m| match taken[m].take() {
                            Some(Instruction::Op(call)) => Some(call),
                            _ => None,
                        })
                        .collect();
                    // (ops the kernel cannot take stay as they were, in
                    // order: their inputs are written before the root)
                    match FusedOps::new(ops, when_ready) {
                        Ok(group) => {
                            kept.push(Instruction::Fused(group));
                            made += 1;
                        }
                        Err(ops) => kept.extend(ops.into_iter().map(Instruction::Op)),
                    }
                }
            }
            _ => {
                if let Some(ins) = taken[i].take() {
                    kept.push(ins);
                }
            }
        }
    }
    block.instructions = kept;
    made
}

fn check_block(block: &mut Block, scope: &mut Scope, place: &str, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::arg(
            "program",
            within(
                place,
                format!("loops and branches nest deeper than {MAX_DEPTH}"),
            ),
        ));
    }
    for (i, ins) in block.instructions.iter_mut().enumerate() {
        match ins {
            Instruction::Op(call) => {
                // (the place is named only in an error: a program of
                // thousands of ops is checked at every compile)
                let place = || within(place, format!("instruction {i} ({})", call.op.name()));
                check_reads(&call.inputs, scope, place)?;
                if !call.op.takes_inputs(call.inputs.len()) {
                    return Err(malformed(&place(), format!("{} inputs", call.inputs.len())));
                }
                if !call.op.takes_params(&call.params) {
                    return Err(malformed(
                        &place(),
                        "parameters of the wrong number or kinds",
                    ));
                }
                if call.results != call.op.results().len() {
                    return Err(malformed(
                        &place(),
                        format!(
                            "{} results declared, the op has {}",
                            call.results,
                            call.op.results().len()
                        ),
                    ));
                }
                call.first = scope.define(call.results);
            }
            Instruction::Fused(_) => {
                return Err(malformed(
                    &within(place, format!("instruction {i}")),
                    "fused groups are made by ExMLX, not given",
                ))
            }
            Instruction::Loop(l) => {
                let place = within(place, format!("instruction {i} (while)"));
                check_reads(&l.initial, scope, || place.clone())?;
                let n = l.initial.len();
                l.state = scope.define(n);
                check_block(
                    &mut l.condition,
                    scope,
                    &format!("{place} condition"),
                    depth + 1,
                )?;
                check_outputs(&l.condition, 1, &format!("{place} condition"))?;
                check_block(&mut l.body, scope, &format!("{place} body"), depth + 1)?;
                check_outputs(&l.body, n, &format!("{place} body"))?;
                scope.hide_from(l.state);
                l.results = scope.define(n);
            }
            Instruction::Branch(b) => {
                let place = within(place, format!("instruction {i} (cond)"));
                let n = b.otherwise.outputs.len();
                let first = scope.next();
                for (k, (pred, body)) in b.clauses.iter_mut().enumerate() {
                    let start = scope.next();
                    let here = format!("{place} clause {k}");
                    check_block(pred, scope, &format!("{here} predicate"), depth + 1)?;
                    check_outputs(pred, 1, &format!("{here} predicate"))?;
                    check_block(body, scope, &here, depth + 1)?;
                    check_outputs(body, n, &here)?;
                    scope.hide_from(start);
                }
                let start = scope.next();
                check_block(
                    &mut b.otherwise,
                    scope,
                    &format!("{place} last clause"),
                    depth + 1,
                )?;
                scope.hide_from(start);
                b.inner = first..scope.next();
                scope.define(n);
            }
        }
    }
    check_reads(&block.outputs, scope, || within(place, "outputs"))
}

/// Checks that `slots` are readable; `place` names where, for the error.
fn check_reads(slots: &[usize], scope: &Scope, place: impl FnOnce() -> String) -> Result<()> {
    match slots.iter().find(|&&s| !scope.readable(s)) {
        Some(slot) => Err(malformed(
            &place(),
            format!("reads slot {slot}, which is not written before it"),
        )),
        None => Ok(()),
    }
}

fn check_outputs(block: &Block, n: usize, place: &str) -> Result<()> {
    if block.outputs.len() == n {
        Ok(())
    } else {
        Err(malformed(
            place,
            format!("gives {} outputs, {n} expected", block.outputs.len()),
        ))
    }
}

/// A program's slots while it runs, and the small integer tensors among them
/// whose values are known here (crate::host_tensor): such a slot's MLX
/// array is made when an op computed by MLX reads it.
struct Run<'a> {
    slots: Vec<Option<Array>>,
    host: Vec<Option<HostTensor>>,
    stop: &'a dyn Fn() -> bool,
    /// Whether float32 tensors may be computed here (a CPU run).
    floats: bool,
}

/// A loop evaluates its state every this many steps when its condition
/// is known without evaluating anything, so that the state's graph stays
/// shallow.
const EVAL_STATE_EVERY: usize = 64;

impl Run<'_> {
    fn read(&mut self, slot: usize) -> Result<Array> {
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

    /// Writes `slot`: an MLX array, or values known here (whose array is
    /// made when it is read).
    fn write(&mut self, slot: usize, a: Option<Array>, host: Option<HostTensor>) {
        self.slots[slot] = a;
        self.host[slot] = host;
    }

    fn clear(&mut self, slots: Range<usize>) {
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
            None => Ok(truthy(item::item(&self.read(slot)?)?)),
        }
    }

    fn block(&mut self, instructions: &[Instruction]) -> Result<()> {
        for ins in instructions {
            match ins {
                Instruction::Op(call) => self.op(call)?,
                Instruction::Fused(group) => self.fused(group)?,
                Instruction::Loop(l) => self.run_loop(l)?,
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

    fn run_loop(&mut self, l: &Loop) -> Result<()> {
        let n = l.initial.len();
        let state = l.state..l.state + n;
        for (k, &s) in l.initial.iter().enumerate() {
            let host = self.host[s].clone();
            let v = if host.is_some() {
                self.slots[s].clone()
            } else {
                Some(self.read(s)?)
            };
            self.write(l.state + k, v, host);
        }
        let mut step = 0usize;
        loop {
            if (self.stop)() {
                return Err(Error::Cancelled(
                    "the program's caller is gone; its while loop was stopped".into(),
                ));
            }
            self.block(&l.condition.instructions)?;
            let pred = l.condition.outputs[0];
            // The state is evaluated with the predicate when that needs an
            // evaluation anyway, else every EVAL_STATE_EVERY steps: its graph
            // stays shallow, and a value a step replaced has no reference
            // left (MLX may reuse its buffer).
            step += 1;
            if self.host[pred].is_none() || step.is_multiple_of(EVAL_STATE_EVERY) {
                let p = if self.host[pred].is_none() {
                    Some(self.read(pred)?)
                } else {
                    None
                };
                let mut now: Vec<&Array> = self.slots[state.clone()].iter().flatten().collect();
                now.extend(p.as_ref());
                mlx_rs::transforms::eval(now)?;
            }
            let go = self.truthy(pred)?;
            if !go {
                self.clear(state.end..l.results);
                break;
            }
            self.block(&l.body.instructions)?;
            let next: Vec<(Option<Array>, Option<HostTensor>)> = l
                .body
                .outputs
                .iter()
                .map(|&s| (self.slots[s].clone(), self.host[s].clone()))
                .collect();
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
            self.clear(l.state..l.results);
            for (k, (v, h)) in next.into_iter().enumerate() {
                self.write(l.state + k, v, h);
            }
        }
        for k in 0..n {
            let v = self.slots[l.state + k].take();
            self.slots[l.results + k] = v;
            self.host[l.results + k] = self.host[l.state + k].take();
        }
        Ok(())
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
        let results: Vec<(Option<Array>, Option<HostTensor>)> = chosen
            .outputs
            .iter()
            .map(|&s| (self.slots[s].clone(), self.host[s].clone()))
            .collect();
        self.clear(b.inner.clone());
        for (k, (v, h)) in results.into_iter().enumerate() {
            self.write(b.inner.end + k, v, h);
        }
        Ok(())
    }
}

fn truthy(n: Number) -> bool {
    match n {
        Number::Bool(b) => b,
        Number::Int(i) => i != 0,
        Number::UInt(u) => u != 0,
        Number::Float(f) => f != 0.0,
        Number::Complex(re, im) => re != 0.0 || im != 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    fn op(op: Op, inputs: &[usize], params: Vec<Param>, cast: Option<Dtype>) -> Instruction {
        Instruction::Op(OpCall::new(
            op,
            inputs.to_vec(),
            params,
            cast,
            op.results().len(),
        ))
    }

    fn block(instructions: Vec<Instruction>, outputs: &[usize]) -> Block {
        Block {
            instructions,
            outputs: outputs.to_vec(),
        }
    }

    fn sum_all() -> Vec<Param> {
        vec![Param::OptInts(None), Param::Bool(false)]
    }

    fn run_i32(program: Program, inputs: Vec<Vec<i32>>, constants: Vec<i32>) -> Vec<Vec<i32>> {
        run_blocking(Device::Cpu, move || {
            let inputs = inputs
                .iter()
                .map(|v| Array::from_slice(v, &[v.len() as i32]))
                .collect();
            let constants = constants.iter().map(|&c| Array::from_int(c)).collect();
            let out = program.run(inputs, constants)?;
            Ok(out.iter().map(|a| a.as_slice::<i32>().to_vec()).collect())
        })
        .unwrap()
    }

    #[test]
    fn runs_instructions_over_slots() {
        // out = sum((x + c) * x) as f32, and x + c: slots 0 (x), 1 (c), 2, 3, 4
        let program = Program::new(
            1,
            1,
            vec![
                op(Op::add, &[0, 1], vec![], None),
                op(Op::multiply, &[2, 0], vec![], None),
                op(Op::sum, &[3], sum_all(), Some(Dtype::Float32)),
            ],
            vec![4, 2],
        )
        .unwrap();
        let (sum, plus) = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&[1i32, 2, 3], &[3]);
            let c = Array::from_int(10);
            let out = program.run(vec![x], vec![c])?;
            Ok((
                out[0].as_slice::<f32>().to_vec(),
                out[1].as_slice::<i32>().to_vec(),
            ))
        })
        .unwrap();
        // (1+10)*1 + (2+10)*2 + (3+10)*3 = 11 + 24 + 39
        assert_eq!(sum, vec![74.0]);
        assert_eq!(plus, vec![11, 12, 13]);
    }

    // slots 0 (x), 1 (0), 2 (10), 3 (-10); 4 = x > 0 and 5 = x < 0 (u8),
    // 6 = select(4, 10, -10), 7 = select(5, 10, -10)
    fn signs(outputs: &[usize]) -> Program {
        let u8 = Some(Dtype::Uint8);
        Program::new(
            1,
            3,
            vec![
                op(Op::greater, &[0, 1], vec![], u8),
                op(Op::less, &[0, 1], vec![], u8),
                op(Op::select, &[4, 2, 3], vec![], None),
                op(Op::select, &[5, 2, 3], vec![], None),
            ],
            outputs.to_vec(),
        )
        .unwrap()
    }

    fn casts(program: &Program) -> Vec<Option<Dtype>> {
        program
            .main
            .instructions
            .iter()
            .map(|ins| match ins {
                Instruction::Op(call) => call.cast,
                _ => unreachable!("straight-line program"),
            })
            .collect()
    }

    #[test]
    fn comparisons_read_only_by_select_stay_boolean() {
        let only_selects = signs(&[6, 7]);
        let u8 = Some(Dtype::Uint8);
        assert_eq!(casts(&only_selects), vec![None, None, None, None]);
        // x < 0 is an output too: it keeps its u8
        let also_output = signs(&[6, 7, 5]);
        assert_eq!(casts(&also_output), vec![None, u8, None, None]);
        let out = run_i32(signs(&[6, 7]), vec![vec![-2, 0, 3]], vec![0, 10, -10]);
        assert_eq!(out, vec![vec![-10, -10, 10], vec![10, -10, -10]]);
        let flags = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&[-2i32, 0, 3], &[3]);
            let constants = vec![
                Array::from_int(0),
                Array::from_int(10),
                Array::from_int(-10),
            ];
            let out = also_output.run(vec![x], constants)?;
            Ok((out[2].dtype(), out[2].as_slice::<u8>().to_vec()))
        })
        .unwrap();
        assert_eq!(flags, (Dtype::Uint8, vec![1, 0, 0]));
    }

    // while i < 10 { i += 1; acc *= 2 }: slots 0 (i), 1 (acc), 2 (10),
    // 3 (1), 4 (2); state 5, 6; condition 7; body 8, 9; results 10, 11.
    fn doubling_loop() -> Program {
        Program::new(
            2,
            3,
            vec![Instruction::Loop(Loop::new(
                vec![0, 1],
                block(vec![op(Op::less, &[5, 2], vec![], None)], &[7]),
                block(
                    vec![
                        op(Op::add, &[5, 3], vec![], None),
                        op(Op::multiply, &[6, 4], vec![], None),
                    ],
                    &[8, 9],
                ),
            ))],
            vec![10, 11],
        )
        .unwrap()
    }

    #[test]
    fn loops_run_until_their_condition_is_false() {
        let out = run_i32(doubling_loop(), vec![vec![3], vec![1, 5]], vec![10, 1, 2]);
        // 7 steps from 3 to 10; acc doubled 7 times
        assert_eq!(out, vec![vec![10], vec![128, 640]]);
        // a condition false at once: the initial state comes back
        let out = run_i32(doubling_loop(), vec![vec![12], vec![1, 5]], vec![10, 1, 2]);
        assert_eq!(out, vec![vec![12], vec![1, 5]]);
    }

    #[test]
    fn a_stopped_run_ends_with_cancelled() {
        let program = doubling_loop();
        assert!(program.loops());
        assert!(!three_way().loops());
        let e = run_blocking(Device::Cpu, move || {
            let inputs = vec![Array::from_int(0), Array::from_int(1)];
            let constants = vec![Array::from_int(10), Array::from_int(1), Array::from_int(2)];
            program.run_until(inputs, constants, &|| true)
        })
        .unwrap_err();
        assert_eq!(e.kind(), "cancelled");
    }

    // cond x > 0 -> x * 2; x < -5 -> -x; true -> x + 1 (as integers):
    // slots 0 (x), 1 (0), 2 (2), 3 (-5), 4 (1); clause 0: 5, 6; clause 1:
    // 7, 8; last: 9; result 10; then 11 = result + x.
    fn three_way() -> Program {
        Program::new(
            1,
            4,
            vec![
                Instruction::Branch(Branch::new(
                    vec![
                        (
                            block(vec![op(Op::greater, &[0, 1], vec![], None)], &[5]),
                            block(vec![op(Op::multiply, &[0, 2], vec![], None)], &[6]),
                        ),
                        (
                            block(vec![op(Op::less, &[0, 3], vec![], None)], &[7]),
                            block(vec![op(Op::negate, &[0], vec![], None)], &[8]),
                        ),
                    ],
                    block(vec![op(Op::add, &[0, 4], vec![], None)], &[9]),
                )),
                op(Op::add, &[10, 0], vec![], None),
            ],
            vec![10, 11],
        )
        .unwrap()
    }

    #[test]
    fn branches_run_the_first_true_clause() {
        for (x, expected) in [(4, 8), (-9, 9), (-2, -1), (0, 1)] {
            let out = run_i32(three_way(), vec![vec![x]], vec![0, 2, -5, 1]);
            assert_eq!(out, vec![vec![expected], vec![expected + x]], "x = {x}");
        }
    }

    #[test]
    fn malformed_programs_are_refused_with_the_reason() {
        let e = Program::new(1, 0, vec![op(Op::add, &[0, 1], vec![], None)], vec![1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "program: instruction 0 (add): reads slot 1, which is not written before it"
        );
        let e = Program::new(1, 0, vec![op(Op::add, &[0], vec![], None)], vec![1]).unwrap_err();
        assert_eq!(e.to_string(), "program: instruction 0 (add): 1 inputs");
        let e = Program::new(1, 0, vec![op(Op::sum, &[0], vec![], None)], vec![1]).unwrap_err();
        assert!(e.to_string().contains("parameters"), "{e}");
        let e = Program::new(1, 0, vec![], vec![3]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "program: outputs: reads slot 3, which is not written before it"
        );
    }

    #[test]
    fn what_a_block_writes_is_not_visible_after_it() {
        // the loop's state (slot 1) and body (slot 3) read after the loop
        let looped = |outputs: &[usize]| {
            Program::new(
                1,
                0,
                vec![Instruction::Loop(Loop::new(
                    vec![0],
                    block(vec![], &[1]),
                    block(vec![op(Op::negate, &[1], vec![], None)], &[2]),
                ))],
                outputs.to_vec(),
            )
        };
        assert!(looped(&[3]).is_ok());
        for slot in [1, 2] {
            let e = looped(&[slot]).unwrap_err().to_string();
            assert!(e.contains(&format!("reads slot {slot}")), "{e}");
        }
        // a clause's slots are not visible to the next clause
        let e = Program::new(
            1,
            0,
            vec![Instruction::Branch(Branch::new(
                vec![(
                    block(vec![op(Op::negate, &[0], vec![], None)], &[1]),
                    block(vec![], &[1]),
                )],
                block(vec![], &[1]),
            ))],
            vec![2],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("last clause: outputs: reads slot 1"), "{e}");
        // loops give the outputs they must
        let e = Program::new(
            1,
            0,
            vec![Instruction::Loop(Loop::new(
                vec![0],
                block(vec![], &[1]),
                block(vec![], &[1, 1]),
            ))],
            vec![2],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("body: gives 2 outputs, 1 expected"), "{e}");
    }

    #[test]
    fn nesting_is_bounded() {
        let mut body = block(vec![], &[1]);
        for _ in 0..=MAX_DEPTH {
            body = block(vec![Instruction::Branch(Branch::new(vec![], body))], &[]);
        }
        let e = Program::new(1, 0, body.instructions, vec![]).unwrap_err();
        assert!(e.to_string().contains("nest deeper than 64"), "{e}");
    }
}

#[cfg(test)]
mod fusion_tests {
    use super::*;
    use crate::worker::run_blocking;

    #[test]
    fn mlx_s_compile_gives_the_unfused_results() {
        // tanh(x * c + c) * c, then its sum, fused and not
        let make = || {
            Program::new(
                1,
                1,
                vec![
                    elementwise(Op::multiply, &[0, 1]),
                    elementwise(Op::add, &[2, 1]),
                    elementwise(Op::tanh, &[3]),
                    elementwise(Op::multiply, &[4, 1]),
                    sum_of(5),
                ],
                vec![5, 6],
            )
            .unwrap()
        };
        let plain = make();
        let mut fused = make();
        // (MLX's compile is what `fuse` uses on a GPU; its C++ path on the
        // CPU, where g++ is present, runs the same function)
        assert!(fused.fuse_with_mlx_compile(Device::Cpu));
        assert!(!plain.fused());
        let (a, b) = run_blocking(Device::Cpu, move || {
            let x: Vec<f32> = (0..1000).map(|i| i as f32 / 1000.0 - 0.5).collect();
            let go = |p: &Program| run_on(p, x.clone(), 0.75);
            // twice: the second call reuses the compiled function
            let f1 = go(&fused)?;
            let f2 = go(&fused)?;
            assert_eq!(f1, f2);
            Ok((go(&plain)?, f1))
        })
        .unwrap();
        assert_eq!(a[0].len(), 1000);
        for (x, y) in a[0].iter().zip(&b[0]) {
            assert!((x - y).abs() <= 1e-6, "{x} vs {y}");
        }
        assert!(
            (a[1][0] - b[1][0]).abs() <= 1e-3,
            "{:?} vs {:?}",
            a[1],
            b[1]
        );
    }

    fn elementwise(op: Op, inputs: &[usize]) -> Instruction {
        Instruction::Op(OpCall::new(op, inputs.to_vec(), vec![], None, 1))
    }

    fn sum_of(slot: usize) -> Instruction {
        Instruction::Op(OpCall::new(
            Op::sum,
            vec![slot],
            vec![Param::OptInts(None), Param::Bool(false)],
            None,
            1,
        ))
    }

    /// x: slot 0, c: slot 1. A = |x * c + c|; B = A * c - x; outputs
    /// B and sum(A). A is read twice, so it ends its group.
    fn two_groups() -> Program {
        Program::new(
            1,
            1,
            vec![
                elementwise(Op::multiply, &[0, 1]),
                elementwise(Op::add, &[2, 1]),
                elementwise(Op::abs, &[3]),
                elementwise(Op::multiply, &[4, 1]),
                sum_of(4),
                elementwise(Op::subtract, &[5, 0]),
            ],
            vec![7, 6],
        )
        .unwrap()
    }

    /// The main block's instructions: an op's name, or a group's kind
    /// (`fused` for `fuse: true`, `ready` for `Program::group_ready_ops`),
    /// its op count and its leaves.
    fn instructions(p: &Program) -> Vec<String> {
        p.main
            .instructions
            .iter()
            .map(|ins| match ins {
                Instruction::Op(call) => call.op.name().to_string(),
                Instruction::Fused(g) => format!(
                    "{} {} ops of {:?}",
                    if g.when_ready { "ready" } else { "fused" },
                    g.ops.len(),
                    g.kernel.leaves()
                ),
                _ => "other".into(),
            })
            .collect()
    }

    fn run_on(p: &Program, x: Vec<f32>, c: f32) -> Result<Vec<Vec<f32>>> {
        let n = x.len() as i32;
        let out = p.run(vec![Array::from_slice(&x, &[n])], vec![Array::from_f32(c)])?;
        Ok(out.iter().map(|a| a.as_slice::<f32>().to_vec()).collect())
    }

    #[test]
    fn on_the_cpu_element_wise_ops_read_once_are_grouped() {
        let mut p = two_groups();
        assert!(p.fuse(Device::Cpu));
        assert!(p.fused() && p.fused.is_none());
        assert_eq!(
            instructions(&p),
            ["fused 3 ops of [0, 1]", "sum", "fused 2 ops of [4, 1, 0]"]
        );
        // nothing to group: one element-wise op
        let mut single = Program::new(1, 1, vec![elementwise(Op::add, &[0, 1])], vec![2]).unwrap();
        assert!(!single.fuse(Device::Cpu));
        let mut lone = Program::new(1, 0, vec![elementwise(Op::exp, &[0])], vec![1]).unwrap();
        assert!(!lone.fuse(Device::Cpu));
    }

    /// x: slot 0, b: slot 1, zero: slot 2 (a constant). max(x + b, 0) * b,
    /// then x - that (x is read twice, so the subtract is a group of one).
    fn bias_relu() -> Program {
        Program::new(
            2,
            1,
            vec![
                elementwise(Op::add, &[0, 1]),
                elementwise(Op::max, &[3, 2]),
                elementwise(Op::multiply, &[4, 1]),
                elementwise(Op::subtract, &[0, 5]),
            ],
            vec![6],
        )
        .unwrap()
    }

    #[test]
    fn exactly_rounded_chains_are_grouped_to_run_when_ready() {
        let mut p = bias_relu();
        assert_eq!(p.group_ready_ops(), 1);
        // (not `fuse: true`'s fusion)
        assert!(!p.fused());
        assert_eq!(instructions(&p), ["ready 4 ops of [0, 1, 2]"]);
        // a transcendental op is not exactly rounded: no group through it
        let mut with_exp = Program::new(
            1,
            0,
            vec![elementwise(Op::exp, &[0]), elementwise(Op::add, &[1, 0])],
            vec![2],
        )
        .unwrap();
        assert_eq!(with_exp.group_ready_ops(), 0);
        // `fuse: true`'s groups are left as they are
        let mut fused = bias_relu();
        assert!(fused.fuse(Device::Cpu));
        assert_eq!(fused.group_ready_ops(), 0);
    }

    #[test]
    fn ready_groups_give_the_bits_of_their_ops_one_by_one() {
        // signed zeros, infinities, NaN, ties of max, sums that round
        let mut x: Vec<f32> = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0e-45,
            -1.0e-45,
            3.4e38,
            -3.4e38,
            1.0,
            -1.0,
        ];
        x.extend((0..501).map(|i| ((i * 7919) % 1001) as f32 / 37.0 - 13.5));
        let b: Vec<f32> = (0..x.len())
            .map(|i| match i % 5 {
                0 => -0.0,
                1 => 0.1,
                2 => f32::NAN,
                3 => 3.4e38,
                _ => (i as f32).sqrt() - 10.0,
            })
            .collect();
        let n = x.len() as i32;
        let plain = bias_relu();
        let mut ready = bias_relu();
        assert_eq!(ready.group_ready_ops(), 1);
        let (one_by_one, grouped, grouped_lazy, direct) = run_blocking(Device::Cpu, move || {
            let inputs = || {
                vec![
                    crate::test_arrays::computed(&x, &[n]),
                    crate::test_arrays::computed(&b, &[n]),
                ]
            };
            let zero = || vec![crate::test_arrays::computed(&[0.0], &[])];
            let run = |p: &Program, inputs: Vec<Array>| -> Result<Vec<u32>> {
                let out = p.run(inputs, zero())?;
                mlx_rs::transforms::eval(&out)?;
                Ok(crate::test_arrays::bits(&out[0]))
            };
            // an input still being computed: the group runs op by op
            let lazy = || -> Result<Vec<Array>> {
                let [x, b]: [Array; 2] = inputs().try_into().unwrap();
                Ok(vec![mlx_rs::ops::multiply(&x, Array::from_f32(1.0))?, b])
            };
            // the kernel itself, on computed inputs and on a lazy one
            let Instruction::Fused(group) = &ready.main.instructions[0] else {
                unreachable!()
            };
            let mut leaves = inputs();
            leaves.extend(zero());
            let direct = group
                .kernel
                .run_ready(&leaves)?
                .map(|a| crate::test_arrays::bits(&a));
            let mut lazy_leaves = lazy()?;
            lazy_leaves.extend(zero());
            assert!(group.kernel.run_ready(&lazy_leaves)?.is_none());
            Ok((
                run(&plain, inputs())?,
                run(&ready, inputs())?,
                run(&ready, lazy()?)?,
                direct,
            ))
        })
        .unwrap();
        assert_eq!(one_by_one.len(), 512);
        assert_eq!(grouped, one_by_one);
        assert_eq!(grouped_lazy, one_by_one);
        assert_eq!(direct, Some(one_by_one));
    }

    #[test]
    fn cpu_fused_groups_give_the_unfused_results() {
        let plain = two_groups();
        let mut fused = two_groups();
        assert!(fused.fuse(Device::Cpu));
        let (big_plain, big_fused, small_plain, small_fused) =
            run_blocking(Device::Cpu, move || {
                let big: Vec<f32> = (0..20_000)
                    .map(|i| (i as f32 - 10_000.0) / 2_500.0)
                    .collect();
                let small: Vec<f32> = big[..100].to_vec();
                Ok((
                    run_on(&plain, big.clone(), 0.75)?,
                    run_on(&fused, big, 0.75)?,
                    run_on(&plain, small.clone(), 0.75)?,
                    run_on(&fused, small, 0.75)?,
                ))
            })
            .unwrap();
        // fused (20,000 elements): exactly rounded ops, so MLX's bits
        assert_eq!(big_fused[0].len(), 20_000);
        assert_eq!(big_plain, big_fused);
        // too small to fuse: the same ops one by one, the same bits
        assert_eq!(small_plain, small_fused);
    }

    #[test]
    fn a_group_runs_fused_on_float32_inputs_whose_shapes_broadcast() {
        let mut p = two_groups();
        p.fuse(Device::Cpu);
        let Instruction::Fused(group) = p.main.instructions[0].clone() else {
            panic!("no fused group first");
        };
        let outcomes = run_blocking(Device::Cpu, move || {
            let x = |n: usize| Array::from_slice(&vec![0.5f32; n], &[n as i32]);
            let c = Array::from_f32(2.0);
            let fused = |leaves: &[Array]| -> Result<Option<Vec<i32>>> {
                Ok(group.kernel.run(leaves)?.map(|a| a.shape().to_vec()))
            };
            let rows = Array::from_slice(&vec![0.5f32; 8192], &[2, 4096]);
            let one_by_one = Array::from_slice(&[2.0f32], &[1, 1]);
            let more_axes = Array::from_slice(&[2.0f32], &[1, 1, 1]);
            let wide = Array::from_slice(&vec![2.0f32; 4096], &[4096]);
            let column = Array::from_slice(&[2.0f32, 3.0], &[2, 1]);
            let three = Array::from_slice(&[2.0f32; 3], &[3]);
            Ok(vec![
                fused(&[x(8192), c.clone()])?,
                fused(&[x(100), c.clone()])?,
                fused(&[x(8192).as_dtype(Dtype::Float64)?, c.clone()])?,
                fused(&[x(8192), c.as_dtype(Dtype::Int32)?])?,
                fused(&[rows.clone(), one_by_one])?,
                fused(&[rows.clone(), more_axes])?,
                fused(&[rows.clone(), wide.clone()])?,
                fused(&[wide, column])?,
                fused(&[rows, three])?,
            ])
        })
        .unwrap();
        assert_eq!(
            outcomes,
            [
                Some(vec![8192]),
                None,
                None,
                None,
                Some(vec![2, 4096]),
                Some(vec![1, 2, 4096]),
                Some(vec![2, 4096]),
                Some(vec![2, 4096]),
                None
            ]
        );
    }

    #[test]
    fn broadcast_inputs_give_the_unfused_results() {
        // x {4096} against c {2, 1}, and x {2, 4096} against c {4096}
        let plain = two_groups();
        let mut fused = two_groups();
        fused.fuse(Device::Cpu);
        let (a, b) = run_blocking(Device::Cpu, move || {
            let xs: Vec<f32> = (0..8192).map(|i| (i as f32 - 4096.0) / 1024.0).collect();
            let cases = || {
                vec![
                    (
                        Array::from_slice(&xs[..4096], &[4096]),
                        Array::from_slice(&[0.5f32, -1.5], &[2, 1]),
                    ),
                    (
                        Array::from_slice(&xs, &[2, 4096]),
                        Array::from_slice(&xs[2048..6144], &[4096]),
                    ),
                ]
            };
            let go = |p: &Program| -> Result<Vec<(Vec<i32>, Vec<f32>)>> {
                let mut out = Vec::new();
                for (x, c) in cases() {
                    let r = p.run(vec![x], vec![c])?;
                    out.push((r[0].shape().to_vec(), r[0].as_slice::<f32>().to_vec()));
                }
                Ok(out)
            };
            Ok((go(&plain)?, go(&fused)?))
        })
        .unwrap();
        for ((sp, vp), (sf, vf)) in a.iter().zip(&b) {
            assert_eq!(sp, sf);
            assert_eq!(sp, &vec![2, 4096]);
            for (p, f) in vp.iter().zip(vf) {
                assert!(
                    (p - f).abs() <= 4.0 * f32::EPSILON * p.abs().max(1.0),
                    "{p} vs {f}"
                );
            }
        }
    }

    #[test]
    fn groups_inside_loops_are_fused_too() {
        // while i < 3: x = tanh(x * c + c); i = i + 1
        let make = || {
            Program::new(
                2,
                2,
                vec![Instruction::Loop(Loop::new(
                    vec![0, 1],
                    Block {
                        instructions: vec![elementwise(Op::less, &[5, 3])],
                        outputs: vec![6],
                    },
                    Block {
                        instructions: vec![
                            elementwise(Op::multiply, &[4, 2]),
                            elementwise(Op::add, &[7, 2]),
                            elementwise(Op::tanh, &[8]),
                            elementwise(Op::add, &[5, 3]),
                        ],
                        outputs: vec![9, 10],
                    },
                ))],
                vec![11],
            )
            .unwrap()
        };
        // (the loop counts with the constant 3 as its bound and its step:
        // i + 3 reaches 3 after one step; so one step, checked below)
        let plain = make();
        let mut fused = make();
        assert!(fused.fuse(Device::Cpu));
        let (a, b) = run_blocking(Device::Cpu, move || {
            let x: Vec<f32> = (0..8192).map(|i| i as f32 / 4096.0 - 1.0).collect();
            let go = |p: &Program| -> Result<Vec<f32>> {
                let out = p.run(
                    vec![Array::from_slice(&x, &[8192]), Array::from_f32(0.0)],
                    vec![Array::from_f32(0.5), Array::from_f32(3.0)],
                )?;
                Ok(out[0].as_slice::<f32>().to_vec())
            };
            Ok((go(&plain)?, go(&fused)?))
        })
        .unwrap();
        let want = |x: f32| ((x as f64 * 0.5 + 0.5).tanh()) as f32;
        for (k, (p, f)) in a.iter().zip(&b).enumerate() {
            let x = k as f32 / 4096.0 - 1.0;
            assert_eq!(p.to_bits(), f.to_bits(), "{p} vs {f}");
            assert!((want(x) - f).abs() <= 2.0 * f32::EPSILON, "{x}: {f}");
        }
    }

    #[test]
    fn a_program_mlx_s_compile_cannot_trace_runs_unfused() {
        // exp of float64 on the CPU reads its values on the host
        // (ops::precise), which MLX's compile cannot trace
        let make = || {
            Program::new(
                1,
                0,
                vec![elementwise(Op::exp, &[0]), elementwise(Op::add, &[1, 1])],
                vec![2],
            )
            .unwrap()
        };
        let plain = make();
        let mut fused = make();
        assert!(fused.fuse_with_mlx_compile(Device::Cpu));
        let (a, b) = run_blocking(Device::Cpu, move || {
            let go = |p: &Program| -> Result<Vec<f64>> {
                let x = Array::from_slice(&[0.5f32, -1.0, 2.0], &[3]).as_dtype(Dtype::Float64)?;
                let out = p.run(vec![x], vec![])?.remove(0);
                assert_eq!(out.dtype(), Dtype::Float64);
                Ok(out.as_slice::<f64>().to_vec())
            };
            // twice: the second call knows to run unfused
            let first = go(&fused)?;
            assert_eq!(first, go(&fused)?);
            Ok((go(&plain)?, first))
        })
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0], 2.0 * 0.5f64.exp());
    }

    #[test]
    fn programs_with_loops_are_not_compiled_by_mlx() {
        let mut p = Program::new(
            1,
            0,
            vec![Instruction::Loop(Loop::new(
                vec![0],
                Block {
                    instructions: vec![],
                    outputs: vec![1],
                },
                Block {
                    instructions: vec![],
                    outputs: vec![1],
                },
            ))],
            vec![2],
        )
        .unwrap();
        assert!(!p.fuse_with_mlx_compile(Device::Cpu));
    }
}
