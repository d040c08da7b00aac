//! NIFs for programs (`ex_mlx_core::program`): `program_new` checks and keeps
//! one; `program_load` reads one from its bytes (docs/program-format.md);
//! `program_run` runs one on its device's worker in one call.

use ex_mlx_core::device::{Device, Kind};
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::program::{Block, Branch, Instruction, Loop, OpCall, Program, MAX_DEPTH};
use mlx_rs::{Array, Dtype};
use rustler::{Atom, Env, LocalPid, Monitor, NifResult, Resource, ResourceArc, Term};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::args::{op_of, DeviceArg, Tag};
use crate::reply::{self, submit, AsyncResult};
use ex_mlx_core::memory;

use crate::tensor::{self, NewTensor, Results, TensorRef};
use crate::term::{decode_param, decode_type, error_tuple, show};

/// A checked program, the constant tensors it reads, and its device.
pub struct ProgramResource {
    program: Program,
    constants: Vec<TensorRef>,
    device: Device,
    /// Whether a call has written the program's graph
    /// (`ex_mlx_core::step_graph::write_program`, a program without loops).
    graph_written: AtomicBool,
}

#[rustler::resource_impl]
impl Resource for ProgramResource {}

impl ProgramResource {
    /// Runs the program on `inputs` (on its device's worker): its output
    /// arrays, lazy. A run `watch`ing its caller stops its loops once the
    /// caller has exited.
    fn run(&self, inputs: &[TensorRef], watch: Option<&CallerWatch>) -> Result<Vec<Array>> {
        let arrays = |ts: &[TensorRef]| ts.iter().map(|t| t.array()).collect::<Result<Vec<_>>>();
        let stop = || watch.is_some_and(|w| w.gone.load(Ordering::Relaxed));
        self.program
            .run_until(arrays(inputs)?, arrays(&self.constants)?, &stop)
    }
}

/// The process that started a program with loops, monitored: `gone` is set
/// when it exits, and the program's loops stop at their next step (a loop
/// that never ends would otherwise hold the device's worker for good).
pub struct CallerWatch {
    gone: AtomicBool,
}

#[rustler::resource_impl]
impl Resource for CallerWatch {
    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, _monitor: Monitor) {
        self.gone.store(true, Ordering::Relaxed);
    }
}

/// A watch on the calling process, for a program with loops.
fn watch_caller(env: Env, program: &ProgramResource) -> Option<ResourceArc<CallerWatch>> {
    if !program.program.loops() {
        return None;
    }
    let watch = ResourceArc::new(CallerWatch {
        gone: AtomicBool::new(false),
    });
    // (a caller already gone cannot be monitored: the run stops at once)
    if watch.monitor(Some(env), &env.pid()).is_none() {
        watch.gone.store(true, Ordering::Relaxed);
    }
    Some(watch)
}

rustler::atoms! { any, while_ = "while", cond }

/// A program argument (named `program` in errors).
pub struct ProgramArg(ResourceArc<ProgramResource>);

impl<'a> rustler::Decoder<'a> for ProgramArg {
    fn decode(term: Term<'a>) -> NifResult<Self> {
        term.decode().map(ProgramArg).map_err(|_| {
            error_tuple(Error::arg(
                "program",
                format!("expected a program reference, got: {}", show(term)),
            ))
        })
    }
}

/// `program_new(device, inputs, constants, instructions, outputs, fuse)`: a
/// program reference, or `{:error, {:argument, message}}` naming what is
/// malformed. `inputs` is how many tensors a call takes; `constants` a list
/// of tensors; each instruction an op `{op, [slot], [param], cast, results}`
/// (`cast` a type or `:any`), a loop or a branch (see `instruction`);
/// `outputs` a list of slots; `fuse` (a boolean) asks for MLX's compile
/// (`ex_mlx_core::fusion`), which applies to straight-line programs only.
#[rustler::nif]
fn program_new<'a>(
    device: DeviceArg,
    inputs: Term<'a>,
    constants: Term<'a>,
    instructions: Term<'a>,
    outputs: Term<'a>,
    fuse_term: Term<'a>,
) -> NifResult<ResourceArc<ProgramResource>> {
    let fuse: bool = fuse_term.decode().map_err(|_| {
        error_tuple(Error::arg(
            "fuse",
            format!("expected a boolean, got: {}", show(fuse_term)),
        ))
    })?;
    let mut built =
        build(device.0, inputs, constants, instructions, outputs).map_err(error_tuple)?;
    built.program.prepare(built.device, fuse);
    let cpu = built.device.kind() == Kind::Cpu;
    if built.program.runs_on_caller() || (cpu && built.program.measures_work()) {
        compute_constants(&built);
    }
    Ok(ResourceArc::new(built))
}

/// Queues the evaluation of `program`'s constants that are not known to be
/// computed (those recorded from ops are lazy), so that calls can run on
/// the calling thread (`run_on_caller`), which reads only computed tensors.
/// Until the job is done, or if it fails, calls run on the worker, which
/// reports any error.
fn compute_constants(program: &ProgramResource) {
    let lazy: Vec<TensorRef> = program
        .constants
        .iter()
        .filter(|t| !t.is_evaluated())
        .cloned()
        .collect();
    if lazy.is_empty() {
        return;
    }
    let _ = ex_mlx_core::worker::submit(
        program.device,
        Box::new(move || {
            for t in &lazy {
                if let Ok(array) = t.array() {
                    if array.eval().is_ok() {
                        t.mark_evaluated();
                    }
                }
            }
            crate::tensor::release_later(lazy);
        }),
    );
}

fn build(
    device: Device,
    inputs: Term,
    constants: Term,
    instructions: Term,
    outputs: Term,
) -> Result<ProgramResource> {
    let inputs: usize = inputs
        .decode()
        .map_err(|_| Error::arg("inputs", format!("expected a count, got: {}", show(inputs))))?;
    let constants = tensor::decode_list("constants", constants)?;
    if let Some(other) = constants.iter().find(|t| t.device != device) {
        return Err(Error::Device(format!(
            "a constant is on {}, the program on {}",
            other.device.describe(),
            device.describe()
        )));
    }
    let instructions = instruction_list(instructions, 0)?;
    let outputs = slot_list("outputs", outputs)?;
    let program = Program::new(inputs, constants.len(), instructions, outputs)?;
    Ok(ProgramResource {
        program,
        constants,
        device,
        graph_written: AtomicBool::new(false),
    })
}

fn instruction_list(term: Term, depth: usize) -> Result<Vec<Instruction>> {
    if depth > MAX_DEPTH {
        return Err(Error::arg(
            "instructions",
            format!("loops and branches nest deeper than {MAX_DEPTH}"),
        ));
    }
    let items: Vec<Term> = term.decode().map_err(|_| {
        Error::arg(
            "instructions",
            format!("expected a list, got: {}", show(term)),
        )
    })?;
    items.into_iter().map(|t| instruction(t, depth)).collect()
}

fn slot_list(name: &'static str, term: Term) -> Result<Vec<usize>> {
    term.decode().map_err(|_| {
        Error::arg(
            name,
            format!("expected a list of slots, got: {}", show(term)),
        )
    })
}

/// A block: `{instructions, output_slots}`.
fn block(term: Term, depth: usize) -> Result<Block> {
    let (instructions, outputs): (Term, Term) = term.decode().map_err(|_| {
        Error::arg(
            "instructions",
            format!(
                "expected a block {{instructions, outputs}}, got: {}",
                show(term)
            ),
        )
    })?;
    Ok(Block {
        instructions: instruction_list(instructions, depth + 1)?,
        outputs: slot_list("outputs", outputs)?,
    })
}

/// An instruction: an op `{op, [slot], [param], cast, results}`, a loop
/// `{:while, [initial_slot], condition_block, body_block}` or a branch
/// `{:cond, [{predicate_block, body_block}], last_block}`.
fn instruction(term: Term, depth: usize) -> Result<Instruction> {
    if let Ok((kind, initial, condition, body)) = term.decode::<(Atom, Term, Term, Term)>() {
        if kind == while_() {
            return Ok(Instruction::Loop(Loop::new(
                slot_list("instructions", initial)?,
                block(condition, depth)?,
                block(body, depth)?,
            )));
        }
    }
    if let Ok((kind, clauses, last)) = term.decode::<(Atom, Vec<(Term, Term)>, Term)>() {
        if kind == cond() {
            let clauses = clauses
                .into_iter()
                .map(|(pred, body)| Ok((block(pred, depth)?, block(body, depth)?)))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Instruction::Branch(Branch::new(
                clauses,
                block(last, depth)?,
            )));
        }
    }
    op_call(term).map(Instruction::Op)
}

fn op_call(term: Term) -> Result<OpCall> {
    let bad = || {
        Error::arg(
            "instructions",
            format!(
                "expected {{op, [slot], [param], cast, results}}, got: {}",
                show(term)
            ),
        )
    };
    let (op, inputs, params, cast, results): (Term, Vec<usize>, Vec<Term>, Term, usize) =
        term.decode().map_err(|_| bad())?;
    let op = op_of(op)?;
    let specs = op.params();
    if specs.len() != params.len() {
        return Err(Error::arg(
            "instructions",
            format!(
                "{} takes {} parameters, got {}",
                op.name(),
                specs.len(),
                params.len()
            ),
        ));
    }
    let params = specs
        .iter()
        .zip(params)
        .map(|(spec, t)| decode_param(spec.name(), spec.kind, t))
        .collect::<Result<Vec<_>>>()?;
    let cast = match cast.decode::<Atom>() {
        Ok(a) if a == any() => None,
        _ => Some(decode_type("cast", cast)?),
    };
    Ok(OpCall::new(op, inputs, params, cast, results))
}

/// `program_run(tag, program, inputs)`: replies with the list of the
/// program's output tensors (lazy: computed when read).
#[rustler::nif]
fn program_run<'a>(env: Env<'a>, tag: Tag<'a>, program: ProgramArg, args: Term<'a>) -> AsyncResult {
    let program = program.0;
    let inputs = checked_inputs(&program, args).map_err(error_tuple)?;
    let device = program.device;
    let watch = watch_caller(env, &program);
    submit(env, tag, device, move || {
        let tensors = program
            .run(&inputs, watch.as_deref())?
            .into_iter()
            .map(|a| NewTensor::new(a, device))
            .collect::<Result<Vec<_>>>()?;
        Ok(Results::Many(tensors))
    })
}

/// `program_start(program, inputs, types)`: the program's output tensors at
/// once, pending, each to be cast to its entry of `types` (the caller knows
/// the outputs' types: ExMLX.Compiler recorded them); the worker runs the
/// program in the background and fills them, or gives each the error. A
/// compiled call then costs no round trip to the worker; its results are
/// waited for where they are read, like deferred ops' (see `crate::reply`).
#[rustler::nif]
fn program_start<'a>(
    env: Env<'a>,
    program: ProgramArg,
    inputs: Term<'a>,
    types: Term<'a>,
) -> NifResult<Vec<TensorRef>> {
    let program = program.0;
    let inputs = checked_inputs(&program, inputs).map_err(error_tuple)?;
    let types: Vec<Term> = types.decode().map_err(|_| {
        error_tuple(Error::arg(
            "types",
            format!("expected a list of types, got: {}", show(types)),
        ))
    })?;
    if types.len() != program.program.outputs() {
        return Err(error_tuple(Error::arg(
            "types",
            format!(
                "the program has {} outputs, got {} types",
                program.program.outputs(),
                types.len()
            ),
        )));
    }
    let types = types
        .into_iter()
        .map(|t| decode_type("types", t))
        .collect::<Result<Vec<_>>>()
        .map_err(error_tuple)?;
    if let Some(outputs) = run_on_caller(&program, &inputs, &types) {
        return Ok(outputs);
    }
    let (program, inputs, types) = match mlx_on_caller(env, program, inputs, types) {
        Ok(outputs) => return Ok(outputs),
        Err(call) => call,
    };
    let device = program.device;
    let count = types.len();
    let watch = watch_caller(env, &program);
    reply::pending(device, count, move || {
        let outputs = computed_outputs(&program, &inputs, &types, watch.as_deref())?;
        crate::tensor::release_later(inputs);
        Ok(outputs)
    })
    .map_err(error_tuple)
}

/// A call's inputs and the types of its outputs.
type Call = (ResourceArc<ProgramResource>, Vec<TensorRef>, Vec<Dtype>);

/// A call of `program` on `inputs`, its outputs computed and of `types`.
fn computed_outputs(
    program: &ProgramResource,
    inputs: &[TensorRef],
    types: &[Dtype],
    watch: Option<&CallerWatch>,
) -> Result<Vec<Array>> {
    let started = Instant::now();
    let outputs = program
        .run(inputs, watch)?
        .into_iter()
        .zip(types)
        .map(|(a, &dtype)| {
            let a = if a.dtype() == dtype {
                a
            } else {
                a.as_dtype(dtype)?
            };
            memory::check_allocation(a.nbytes())?;
            Ok(a)
        })
        .collect::<Result<Vec<_>>>()?;
    // All outputs at once: reading them then costs no further evaluation
    // (one per output otherwise), and a loop of compiled calls (a training
    // loop feeding each step's parameters to the next) does not grow one
    // graph across its calls.
    let built = Instant::now();
    if !program.program.loops()
        && ex_mlx_core::step_graph::enabled()
        && !program.graph_written.swap(true, Ordering::Relaxed)
    {
        ex_mlx_core::step_graph::write_program(&outputs).map_err(Error::Mlx)?;
    }
    // (on a GPU, queueing the kernels and waiting for them are timed
    // apart: MLX's eval is its async_eval and then the wait)
    if program.device.kind() != Kind::Cpu {
        mlx_rs::transforms::async_eval(&outputs)?;
    }
    let queued = Instant::now();
    mlx_rs::transforms::eval(&outputs)?;
    let parts = [
        1,
        (built - started).as_nanos() as u64,
        (queued - built).as_nanos() as u64,
        queued.elapsed().as_nanos() as u64,
    ];
    for (total, part) in RUN_TIMES.iter().zip(parts) {
        total.fetch_add(part, Ordering::Relaxed);
    }
    // (an input computed on the way, such as a lazy slice, is computed
    // for the next call too, which may then run on its caller's thread)
    for t in inputs {
        t.mark_if_computed();
    }
    Ok(outputs)
}

/// The call run by MLX on the calling thread
/// (`ex_mlx_core::worker::run_on_caller`), when the program's work on
/// inputs of these shapes is known (`Program::work_for`: straight-line ops
/// of linear cost, measured by an earlier run) and, with what evaluating
/// its inputs and constants computes, at most `reply::CALLER_WORK`
/// elements: its outputs, computed, or each holding the run's error, as
/// the worker would give them. The call back otherwise, for the worker.
fn mlx_on_caller(
    env: Env,
    program: ResourceArc<ProgramResource>,
    inputs: Vec<TensorRef>,
    types: Vec<Dtype>,
) -> std::result::Result<Vec<TensorRef>, Call> {
    // (GPU programs, and programs whose work a run does not measure, are
    // never the caller's: no input is looked at)
    if program.device.kind() != Kind::Cpu || !program.program.measures_work() {
        return Err((program, inputs, types));
    }
    let small = || {
        let shapes = inputs
            .iter()
            .map(|t| Some(t.info().ok()??.0))
            .collect::<Option<Vec<_>>>()?;
        let shapes: Vec<&[i64]> = shapes.iter().map(Vec::as_slice).collect();
        let own = program.program.work_for(&shapes)?;
        inputs
            .iter()
            .chain(&program.constants)
            .try_fold(own, |total, t| total.checked_add(t.work_to_evaluate()?))
            .filter(|&work| work <= reply::CALLER_WORK)
    };
    if small().is_none() {
        return Err((program, inputs, types));
    }
    let device = program.device;
    let started = std::time::Instant::now();
    let call = || computed_outputs(&program, &inputs, &types, None);
    let result = match ex_mlx_core::worker::run_on_caller(device, call) {
        Ok(result) => result,
        Err(_) => return Err((program, inputs, types)),
    };
    reply::charge_for(env, started);
    Ok(match result {
        Ok(outputs) => outputs
            .into_iter()
            .map(|a| crate::tensor::Tensor::wrap(a, device, true))
            .collect(),
        Err(e) => (0..types.len())
            .map(|_| {
                let failed = crate::tensor::Tensor::pending(device);
                failed.fill(Err(e.clone()));
                failed
            })
            .collect(),
    })
}

/// The program run on the calling thread (`Program::run_on_caller`): its
/// outputs as computed tensors, when it is a CPU program that runs there,
/// its inputs and constants are known to be computed (made from host bytes
/// or computed by the worker: `Tensor::evaluated_array`, read in place) and
/// its outputs have the `types` asked for. `None` otherwise, and on any
/// error (the worker then runs it and reports it as usual). As for the `op`
/// NIF's ops computed here, no job queued before this call can change
/// computed inputs.
fn run_on_caller(
    program: &ProgramResource,
    inputs: &[TensorRef],
    types: &[Dtype],
) -> Option<Vec<TensorRef>> {
    if program.device.kind() != Kind::Cpu || !program.program.runs_on_caller() {
        return None;
    }

    let computed = |ts: &[TensorRef]| {
        ts.iter()
            .map(|t| t.evaluated_array())
            .collect::<Option<Vec<Array>>>()
    };
    let outputs = program
        .program
        .run_on_caller(
            program.device,
            &computed(inputs)?,
            &computed(&program.constants)?,
        )
        .ok()??;
    if outputs.iter().zip(types).any(|(a, &t)| a.dtype() != t) {
        program.program.stop_running_on_caller();
        return None;
    }
    Some(
        outputs
            .into_iter()
            .map(|a| crate::tensor::Tensor::wrap(a, program.device, true))
            .collect(),
    )
}

/// The inputs of a call of `program`: tensors on its device, as many as it takes.
fn checked_inputs(program: &ProgramResource, args: Term) -> Result<Vec<TensorRef>> {
    let inputs = tensor::decode_list("inputs", args)?;
    if let Some(other) = inputs.iter().find(|t| t.device != program.device) {
        return Err(Error::Device(format!(
            "an input is on {}, the program on {}; transfer it first",
            other.device.describe(),
            program.device.describe()
        )));
    }
    if inputs.len() != program.program.inputs() {
        return Err(Error::arg(
            "inputs",
            format!(
                "the program takes {} inputs, got {}",
                program.program.inputs(),
                inputs.len()
            ),
        ));
    }
    Ok(inputs)
}

/// Over every program call the worker ran (`computed_outputs`): calls,
/// nanoseconds running the program (interpreting it and building MLX's
/// graph; a loop's steps, computed, among them), queueing the outputs'
/// kernels (MLX's `async_eval`; on the CPU none: MLX's eval computes
/// there) and waiting for them. A profile for benchmarks.
static RUN_TIMES: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// `program_run_times()`: `[calls, building_ns, queueing_ns, waiting_ns]`
/// of every program call the worker ran in this process so far
/// (`RUN_TIMES`).
#[rustler::nif]
fn program_run_times() -> Vec<u64> {
    RUN_TIMES
        .iter()
        .map(|t| t.load(Ordering::Relaxed))
        .collect()
}

/// `program_loop_times()`: `[steps, building_ns, waiting_ns, reads,
/// queueing_ns, compiled_ns]` of every program loop run in this process so
/// far (`ex_mlx_core::program::loop_times`).
#[rustler::nif]
fn program_loop_times() -> Vec<u64> {
    ex_mlx_core::program::loop_times().to_vec()
}

/// `program_load(tag, bytes)`: a program read from its bytes
/// (docs/program-format.md), its constants made on its device's worker;
/// replies with `{program, device}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn program_load<'a>(env: Env<'a>, tag: Tag<'a>, bytes: Term<'a>) -> AsyncResult {
    let bytes = crate::term::decode_binary("program", bytes).map_err(error_tuple)?;
    let mut decoded = ex_mlx_core::program_format::decode(bytes.as_slice()).map_err(error_tuple)?;
    let device = decoded.device;
    // (the program format does not carry `fuse`: an imported program runs unfused)
    decoded.program.prepare(device, false);
    for c in &decoded.constants {
        ex_mlx_core::device::check_dtype(c.dtype, device).map_err(error_tuple)?;
    }
    submit(env, tag, device, move || {
        let constants = decoded
            .constants
            .iter()
            .map(|c| {
                let array = ex_mlx_core::host::array_from_bytes(&c.data, &c.shape, c.dtype)?;
                Ok(crate::tensor::Tensor::wrap(array, device, true))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ProgramHandle(ResourceArc::new(ProgramResource {
            program: decoded.program,
            constants,
            device,
            graph_written: AtomicBool::new(false),
        })))
    })
}

/// A program reference and its device, as a reply: `{program, device}`.
struct ProgramHandle(ResourceArc<ProgramResource>);

impl rustler::Encoder for ProgramHandle {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        (&self.0, crate::term::DeviceTerm(self.0.device)).encode(env)
    }
}
