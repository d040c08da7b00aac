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
use crate::host_tensor::HostTensor;
use crate::ops::params::Param;
use crate::ops::table::Op;
use std::sync::{Arc, OnceLock};

/// How deeply loops and branches nest (programs from outside are checked
/// against it; running and checking recurse this deep).
pub const MAX_DEPTH: usize = 64;

#[cfg(test)]
mod admitted_tests;
#[cfg(test)]
mod bound_tests;
mod check;
#[cfg(test)]
mod fusion_tests;
#[cfg(test)]
mod loop_tests;
mod on_caller;
mod passes;
mod run;
#[cfg(test)]
mod test_programs;
#[cfg(test)]
mod tests;
mod work;

use check::{check_block, Scope};
use passes::{
    compile_runs, drop_unread_ops, fold_rearrangements, fuse_block, keep_boolean_conditions,
    merge_equal_ops, read_counts, read_while_built,
};
pub use run::loop_times;
use run::Run;

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

/// The fewest consecutive ops that [`Program::fuse`] compiles as one
/// function on a GPU when the program is not straight-line: fewer save
/// too little to be worth a function of their own.
pub const COMPILED_RUN: usize = 4;

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
    /// A run of ops compiled as one function by MLX's compile: made by
    /// [`Program::fuse`] on a GPU, never given from outside (crate::fusion).
    Compiled(CompiledRun),
}

/// Consecutive ops of a block run as one function compiled by MLX
/// (crate::fusion): it reads `externals`, the slots its ops read that they
/// do not write, and gives `outputs`, the slots its ops write that are read
/// after it.
#[derive(Clone, Debug)]
pub struct CompiledRun {
    pub ops: Vec<OpCall>,
    externals: Vec<usize>,
    outputs: Vec<usize>,
    function: Arc<FusedProgram>,
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
    /// Whether calls may run on the calling thread (`run_on_caller`, crate's
    /// `program::on_caller`).
    on_caller: AtomicBool,
    /// Whether the program is straight-line ops of linear cost, whose work
    /// a run measures (crate's `program::work`).
    linear: bool,
    /// That work, measured by the first run.
    work: OnceLock<work::Measured>,
    /// For a program with loops, the slots each top-level instruction is
    /// the last to read ([`Program::last_reads`]), made at the first run.
    last_reads: OnceLock<Vec<LastReads>>,
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
        merge_equal_ops(&mut main);
        keep_boolean_conditions(&mut main, scope.next());
        let reads = read_counts(&main, scope.next());
        fold_rearrangements(&mut main, &reads);
        drop_unread_ops(&mut main, scope.next());
        let loops = has_loops(&main);
        let linear = work::linear_straight_line(&main);
        Ok(Program {
            inputs,
            constants,
            main,
            slots: scope.next(),
            loops,
            fused: None,
            on_caller: AtomicBool::new(false),
            linear,
            work: OnceLock::new(),
            last_reads: OnceLock::new(),
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
        // (the instructions change: their last reads are found again)
        self.last_reads = OnceLock::new();
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
        self.last_reads = OnceLock::new();
        if self.fused.is_some() || !crate::cpu_kernels::in_programs() {
            return 0;
        }
        let reads = self.reads();
        fuse_block(&mut self.main, &reads, true)
    }

    /// For each top-level instruction, the slots no later top-level
    /// instruction reads (nor the program's outputs) that it, or a block
    /// nested in it, reads: a run drops them once it has run; and for a
    /// loop, which of its initial values it can take over (`handed_over`),
    /// which of its results nothing reads (`unread`), and the same for each
    /// instruction of its body (`body`).
    fn last_reads(&self) -> Vec<LastReads> {
        last_reads_of(&self.main, self.slots, &|_| true)
    }

    /// How many times each slot is read (instructions' inputs and blocks'
    /// outputs), over the whole program.
    fn reads(&self) -> Vec<u32> {
        read_counts(&self.main, self.slots)
    }

    /// Readies the program for runs on `device`: [`Program::fuse`] when
    /// `fuse` is asked for, else on the CPU [`Program::group_ready_ops`]
    /// (what `program_new` and `program_load` do with a checked program).
    /// A CPU program without `fuse` whose every instruction the host
    /// computes may also run on the thread that calls it
    /// ([`Program::run_on_caller`]).
    pub fn prepare(&mut self, device: Device, fuse: bool) {
        if fuse {
            self.fuse(device);
        } else if device.kind() == Kind::Cpu && crate::cpu_kernels::in_programs() {
            self.group_ready_ops();
            let on_caller = on_caller::straight_line_on_host(&self.main);
            self.on_caller.store(on_caller, Ordering::Relaxed);
        }
    }

    /// The whole program through MLX's compile (crate::fusion) for runs on
    /// `device`, if it is straight-line; otherwise each run of
    /// [`COMPILED_RUN`] ops or more between loops and branches, in every
    /// block (a loop's body is one such run or a few: a language model's
    /// decoding step). Returns whether it compiled anything.
    fn fuse_with_mlx_compile(&mut self, device: Device) -> bool {
        if self.loops
            || self
                .main
                .instructions
                .iter()
                .any(|i| !matches!(i, Instruction::Op(call) if !call.op.reads_values()))
        {
            let reads = self.reads();
            let read_while_built = read_while_built(&self.main, self.slots);
            return compile_runs(
                &mut self.main,
                &reads,
                &read_while_built,
                self.slots,
                device,
            ) > 0;
        }
        let main = self.main.clone();
        let slots = self.slots;
        let body = move |args: &[Array]| -> Result<Vec<Array>> {
            let mut run = Run::new(
                args.iter().cloned().map(Some).collect(),
                vec![None; slots],
                &|| false,
                false,
                false,
            );
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
            || any_instruction(&self.main, &|ins| {
                matches!(ins, Instruction::Fused(g) if !g.when_ready)
                    || matches!(ins, Instruction::Compiled(_))
            })
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
        // (a GPU computes while the worker builds: its loops are pipelined)
        let pipelined = !crate::device::Device::current_is_cpu();
        self.run_with(inputs, constants, stop, pipelined)
    }

    /// [`Program::run`] with its loops pipelined on any device, as they
    /// are on a GPU (crate's `program::run`: `Run::pipelined_steps`): for
    /// checks of that path on the CPU.
    pub fn run_pipelined(&self, inputs: Vec<Array>, constants: Vec<Array>) -> Result<Vec<Array>> {
        self.run_with(inputs, constants, &|| false, true)
    }

    /// [`Program::run_until`], its loops pipelined or not (crate's
    /// `program::run`: `Run::pipelined_steps`).
    fn run_with(
        &self,
        inputs: Vec<Array>,
        constants: Vec<Array>,
        stop: &dyn Fn() -> bool,
        pipelined: bool,
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
        let mut run = Run::new(slots, host, stop, floats, pipelined);
        if self.loops {
            // (a loop may run long: what the instructions before it made is
            // dropped once nothing after reads it, so that MLX frees it)
            let last_reads = self.last_reads.get_or_init(|| self.last_reads());
            if last_reads.len() != self.main.instructions.len() {
                return Err(Error::Internal(
                    "a program's last reads do not match its instructions".into(),
                ));
            }
            run.block_with_last_reads(&self.main.instructions, last_reads)?;
        } else {
            run.block(&self.main.instructions)?;
        }
        self.record_work(&run);
        self.main.outputs.iter().map(|&s| run.read(s)).collect()
    }
}

/// What a run does after a top-level instruction, or after an
/// instruction of a loop's body at each step ([`Program::last_reads`]).
#[derive(Debug)]
pub(super) struct LastReads {
    /// The slots it read last, dropped once it has run.
    pub(super) done: Vec<usize>,
    /// For a loop, by position of its initial values, those whose slots
    /// its state takes over.
    pub(super) handed_over: Vec<bool>,
    /// For a loop, what a step does after each instruction of its body.
    pub(super) body: Vec<LastReads>,
    /// For a loop, by position of its results, those nothing reads after
    /// it: a pipelined loop keeps no earlier state of them to end with.
    pub(super) unread: Vec<bool>,
}

impl LastReads {
    /// What a run does after an instruction of a block it does not
    /// follow (a branch's): nothing dropped, nothing handed over.
    pub(super) const NONE: LastReads = LastReads {
        done: Vec::new(),
        handed_over: Vec::new(),
        body: Vec::new(),
        unread: Vec::new(),
    };
}

/// For each instruction of `block` (of `slots` slots), the slots that
/// `droppable` admits which no later instruction of the block reads, nor
/// its outputs, and which it, or a block nested in it, reads. In a loop's
/// body the droppable slots are the step's own (its state, condition and
/// body: the next step writes them again): a state value read last by a
/// write into it then has no reference but the write's, and MLX writes
/// it in place, also when a step evaluates the write before it ends (a
/// key/value cache that a step's attention reads).
fn last_reads_of(block: &Block, slots: usize, droppable: &dyn Fn(usize) -> bool) -> Vec<LastReads> {
    let mut last: Vec<Option<usize>> = vec![None; slots];
    let mut read = vec![false; slots];
    for (k, ins) in block.instructions.iter().enumerate() {
        passes::visit_instruction_reads(ins, &mut |s, _| {
            last[s] = Some(k);
            read[s] = true;
        });
    }
    for &s in &block.outputs {
        last[s] = None;
        read[s] = true;
    }
    let mut frees = vec![Vec::new(); block.instructions.len()];
    for (s, k) in last.into_iter().enumerate() {
        if let Some(k) = k.filter(|_| droppable(s)) {
            frees[k].push(s);
        }
    }
    block
        .instructions
        .iter()
        .zip(frees)
        .map(|(ins, done)| match ins {
            Instruction::Loop(l) => LastReads {
                handed_over: handed_over(l, &done),
                body: last_reads_of(&l.body, slots, &|s| (l.state..l.results).contains(&s)),
                // (a loop's results are written by it alone: any read of
                // one is after it)
                unread: (l.results..l.results + l.initial.len())
                    .map(|s| !read[s])
                    .collect(),
                done,
            },
            _ => LastReads {
                done,
                ..LastReads::NONE
            },
        })
        .collect()
}

/// For each of loop `l`'s initial values, whether its slot can be handed
/// to the loop's state: nothing reads it after the loop (`done`, the
/// slots the loop's instruction reads last), its condition and body do
/// not read it, and no later initial value is the same slot.
fn handed_over(l: &Loop, done: &[usize]) -> Vec<bool> {
    if done.is_empty() {
        return Vec::new();
    }
    let mut inside = std::collections::HashSet::new();
    for block in [&l.condition, &l.body] {
        passes::visit_reads(block, &mut |s, _| {
            inside.insert(s);
        });
    }
    l.initial
        .iter()
        .enumerate()
        .map(|(k, s)| done.contains(s) && !inside.contains(s) && !l.initial[k + 1..].contains(s))
        .collect()
}

/// Whether `block`, or a block nested in it, holds a loop.
fn has_loops(block: &Block) -> bool {
    any_instruction(block, &|ins| matches!(ins, Instruction::Loop(_)))
}

/// Whether `pred` holds for an instruction of `block` or of a block nested
/// in it.
fn any_instruction(block: &Block, pred: &dyn Fn(&Instruction) -> bool) -> bool {
    block.instructions.iter().any(|ins| {
        pred(ins)
            || nested_blocks(ins)
                .into_iter()
                .any(|nested| any_instruction(nested, pred))
    })
}

/// The blocks nested in `ins`, in program order: a loop's condition and
/// body, a branch's predicates and bodies then its last block; none for an
/// op or a group of ops.
fn nested_blocks(ins: &Instruction) -> Vec<&Block> {
    match ins {
        Instruction::Loop(l) => vec![&l.condition, &l.body],
        Instruction::Branch(b) => {
            let clauses = b.clauses.iter().flat_map(|(pred, body)| [pred, body]);
            clauses.chain(std::iter::once(&b.otherwise)).collect()
        }
        Instruction::Op(_) | Instruction::Fused(_) | Instruction::Compiled(_) => Vec::new(),
    }
}
