//! NIFs for programs (`ex_mlx_core::program`): `program_new` checks and keeps
//! one; `program_load` reads one from its bytes (docs/program-format.md);
//! `program_run` runs one on its device's worker in one call.

use ex_mlx_core::device::Device;
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::program::{Instruction, Program};
use mlx_rs::Array;
use rustler::{Atom, Env, NifResult, Resource, ResourceArc, Term};

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
}

#[rustler::resource_impl]
impl Resource for ProgramResource {}

impl ProgramResource {
    /// Runs the program on `inputs` (on its device's worker): its output
    /// arrays, lazy.
    fn run(&self, inputs: &[TensorRef]) -> Result<Vec<Array>> {
        let arrays = |ts: &[TensorRef]| ts.iter().map(|t| t.array()).collect::<Result<Vec<_>>>();
        self.program.run(arrays(inputs)?, arrays(&self.constants)?)
    }
}

rustler::atoms! { any }

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

/// `program_new(device, inputs, constants, instructions, outputs)`: a program
/// reference, or `{:error, {:argument, message}}` naming what is malformed.
/// `inputs` is how many tensors a call takes; `constants` a list of tensors;
/// each instruction `{op, [slot], [param], cast, results}` (`cast` a type or
/// `:any`); `outputs` a list of slots.
#[rustler::nif]
fn program_new<'a>(
    device: DeviceArg,
    inputs: Term<'a>,
    constants: Term<'a>,
    instructions: Term<'a>,
    outputs: Term<'a>,
) -> NifResult<ResourceArc<ProgramResource>> {
    build(device.0, inputs, constants, instructions, outputs)
        .map(ResourceArc::new)
        .map_err(error_tuple)
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
            other.device.name(),
            device.name()
        )));
    }
    let items: Vec<Term> = instructions.decode().map_err(|_| {
        Error::arg(
            "instructions",
            format!("expected a list, got: {}", show(instructions)),
        )
    })?;
    let instructions = items
        .into_iter()
        .map(instruction)
        .collect::<Result<Vec<_>>>()?;
    let outputs: Vec<usize> = outputs.decode().map_err(|_| {
        Error::arg(
            "outputs",
            format!("expected a list of slots, got: {}", show(outputs)),
        )
    })?;
    let program = Program::new(inputs, constants.len(), instructions, outputs)?;
    Ok(ProgramResource {
        program,
        constants,
        device,
    })
}

fn instruction(term: Term) -> Result<Instruction> {
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
    Ok(Instruction {
        op,
        inputs,
        params,
        cast,
        results,
    })
}

/// `program_run(tag, program, inputs)`: replies with the list of the
/// program's output tensors (lazy: computed when read).
#[rustler::nif]
fn program_run<'a>(env: Env<'a>, tag: Tag<'a>, program: ProgramArg, args: Term<'a>) -> AsyncResult {
    let program = program.0;
    let inputs = checked_inputs(&program, args).map_err(error_tuple)?;
    let device = program.device;
    submit(env, tag, device, move || {
        let tensors = program
            .run(&inputs)?
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
    let device = program.device;
    let count = types.len();
    reply::pending(device, count, move || {
        program
            .run(&inputs)?
            .into_iter()
            .zip(&types)
            .map(|(a, &dtype)| {
                let a = if a.dtype() == dtype {
                    a
                } else {
                    a.as_dtype(dtype)?
                };
                memory::check_allocation(a.nbytes())?;
                Ok(a)
            })
            .collect()
    })
    .map_err(error_tuple)
}

/// The inputs of a call of `program`: tensors on its device, as many as it takes.
fn checked_inputs(program: &ProgramResource, args: Term) -> Result<Vec<TensorRef>> {
    let inputs = tensor::decode_list("inputs", args)?;
    if let Some(other) = inputs.iter().find(|t| t.device != program.device) {
        return Err(Error::Device(format!(
            "an input is on {}, the program on {}; transfer it first",
            other.device.name(),
            program.device.name()
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

/// `program_load(tag, bytes)`: a program read from its bytes
/// (docs/program-format.md), its constants made on its device's worker;
/// replies with `{program, device}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn program_load<'a>(env: Env<'a>, tag: Tag<'a>, bytes: Term<'a>) -> AsyncResult {
    let bytes = crate::term::decode_binary("program", bytes).map_err(error_tuple)?;
    let decoded = ex_mlx_core::program_format::decode(bytes.as_slice()).map_err(error_tuple)?;
    let device = decoded.device;
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
