//! The NIF that runs any op of ex_mlx_core's op table
//! (`ex_mlx_core::ops::table`), and the NIF that lists the table for Elixir.
//!
//! `op(tag, op, inputs, params)`: `op` an atom naming the op, `inputs` the
//! list of its tensor inputs, `params` the list of its parameters, in the
//! table's order. Each is checked here, on the calling scheduler, against the
//! op's signature (errors name the input or parameter); the MLX work is
//! queued on the device's worker (`crate::reply`: a reply, or a deferred
//! tensor for one-result ops). An op that `ex_mlx_core::cpu_kernels`
//! computes on the host, given CPU tensors known to be computed, is computed
//! here instead, on the calling thread: no worker, no MLX stream
//! ([`computed_at_once`]). When other processes leave too few cores, a
//! small op of a linear cost is built by MLX on the calling thread instead
//! of the worker ([`work_on_caller`], `crate::reply::submit_op`).

use ex_mlx_core::cpu_kernels;
use ex_mlx_core::device::{check_dtype, Device};
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::ops::params::Param;
use ex_mlx_core::ops::table::{Inputs, Op, Outputs};
use mlx_rs::Array;
use rustler::{Atom, Encoder, Env, ListIterator, NifResult, Term};

use smallvec::SmallVec;

use crate::args::{OpArg, Tag};
use crate::reply::{submit, submit_op, AsyncResult};
use crate::tensor::{self, common_device, NewTensor, Results, TensorRef};
use crate::term::{decode_param, error_tuple, show};

#[rustler::nif]
fn op<'a>(
    env: Env<'a>,
    tag: Tag<'a>,
    name: OpArg,
    inputs: Term<'a>,
    params: Term<'a>,
) -> AsyncResult {
    let op = name.0;
    let (inputs, params, device) = check_call(op, inputs, params).map_err(error_tuple)?;
    if inputs.is_empty() {
        // a creation op whose result Elixir predicted (ExMLX.Prediction):
        // a tensor past the memory limit is refused at the call, as when
        // the call waits for the worker, which checks it again
        if let Some(bytes) = crate::reply::predicted_bytes(tag.0) {
            ex_mlx_core::memory::check_allocation(bytes).map_err(error_tuple)?;
        }
    }
    if let Some(done) = computed_at_once(tag, op, &inputs, &params, device) {
        return Ok(done);
    }
    let input_work = work_on_caller(op, &inputs);
    let work = move || {
        let result = run(op, &inputs, params, device);
        tensor::release_later(inputs);
        result
    };
    match input_work {
        Some(input_work) => submit_op(env, tag, device, input_work, work),
        None => submit(env, tag, device, work),
    }
}

/// For an op whose cost grows with the elements it reads and writes (an
/// element-wise op, a reduction that is not over windows, a creation, a
/// rearrangement), the elements evaluating its inputs and reading them
/// computes (`crate::reply::submit_op` adds its result's); `None` for any
/// other op, or an input whose work is not known.
fn work_on_caller(op: Op, inputs: &[TensorRef]) -> Option<u64> {
    if !ex_mlx_core::ops::linear_cost(op) {
        return None;
    }
    inputs.iter().try_fold(0u64, |total, t| {
        total
            .checked_add(t.work_to_evaluate()?)?
            .checked_add(t.elements()?)
    })
}

/// The op's inputs and parameters, decoded by its signature, and the device
/// it runs on: its `device` parameter, or its inputs' device.
fn check_call(op: Op, inputs: Term, params: Term) -> Result<(InputRefs, Vec<Param>, Device)> {
    let inputs = decode_inputs(op, inputs)?;
    let params = decode_params(op, params)?;
    let given = params.iter().find_map(|p| match p {
        Param::Device(d) => Some(*d),
        _ => None,
    });
    let device = match (given, inputs.first()) {
        (Some(device), _) => device,
        (None, Some(first)) => match inputs.iter().find(|t| t.device != first.device) {
            None => first.device,
            Some(other) => return Err(common_device(&[first, other]).unwrap_err()),
        },
        (None, None) => return Err(Error::Internal(format!("{}: no device", op.name()))),
    };
    for p in &params {
        if let Param::Type(dtype) = p {
            check_dtype(*dtype, device)?;
        }
    }
    Ok((inputs, params, device))
}

/// `op` computed on the calling thread, when it is one
/// `ex_mlx_core::ops::computed` computes on the host, on a CPU device, and
/// every input tensor is known to be computed (its array is made from host
/// bytes or was computed by the worker: `Tensor::evaluated_array`, read in
/// place, never evaluated here): the reply the worker would give, with a
/// computed tensor. `None` otherwise, and on any error (the worker then runs
/// the op and reports it as usual). The worker's queue is not involved: the
/// inputs are computed, so no job queued before this call can change them.
fn computed_at_once(
    tag: Tag,
    op: Op,
    inputs: &[TensorRef],
    params: &[Param],
    device: Device,
) -> Option<crate::reply::Submitted> {
    if !cpu_kernels::may_compute_on_calling_thread(op, device) {
        return None;
    }
    let arrays = inputs
        .iter()
        .map(|t| t.evaluated_array())
        .collect::<Option<SmallVec<[Array; 3]>>>()?;
    let refs: SmallVec<[&Array; 3]> = arrays.iter().collect();
    let array = cpu_kernels::on_calling_thread(op, &refs, params).ok()??;
    crate::reply::computed_at_once(tag, array, device)
}

/// Runs `op` on the worker and wraps its results.
fn run(op: Op, inputs: &[TensorRef], params: Vec<Param>, device: Device) -> Result<Results> {
    let wrap = |array: Array| {
        if op.has_flag("view") {
            Ok(NewTensor::view(array, device))
        } else {
            NewTensor::new(array, device)
        }
    };
    // (one or two inputs, most ops, stay on the stack)
    let outputs = match inputs {
        [a] => cpu_kernels::apply(op, &[a.array()?], params)?,
        [a, b] => cpu_kernels::apply(op, &[a.array()?, b.array()?], params)?,
        _ => {
            let arrays = inputs
                .iter()
                .map(|t| t.array())
                .collect::<Result<Vec<Array>>>()?;
            cpu_kernels::apply(op, &arrays, params)?
        }
    };
    match outputs {
        Outputs::One(one) => Ok(Results::One(wrap(one)?)),
        Outputs::Many(many) => Ok(Results::Many(
            many.into_iter().map(wrap).collect::<Result<_>>()?,
        )),
    }
}

/// The items of list argument `name`, a list of `what` (iterated in place).
fn list<'a>(name: &'static str, what: &str, term: Term<'a>) -> Result<ListIterator<'a>> {
    term.decode::<ListIterator>().map_err(|_| {
        Error::arg(
            name,
            format!("expected a list of {what}, got: {}", show(term)),
        )
    })
}

/// An op's input tensors: up to three inline. They are made on the caller's
/// scheduler and dropped on the worker, so a heap list here would be freed
/// across threads on every call (and contend for the allocator's lock).
type InputRefs = SmallVec<[TensorRef; 3]>;

fn decode_inputs(op: Op, term: Term) -> Result<InputRefs> {
    let mut items = list("inputs", "tensors", term)?;
    match op.inputs() {
        Inputs::Fixed(names) => {
            // (one pass over the list: its length is counted only for the error)
            let mut tensors = InputRefs::new();
            for name in names {
                match items.next() {
                    Some(t) => tensors.push(tensor::decode(name, t)?),
                    None => return Err(wrong_inputs(op, names, term)),
                }
            }
            if items.next().is_some() {
                return Err(wrong_inputs(op, names, term));
            }
            Ok(tensors)
        }
        Inputs::List(name) => {
            let tensors = items
                .map(|t| tensor::decode(name, t))
                .collect::<Result<InputRefs>>()?;
            if tensors.is_empty() {
                return Err(Error::arg(name, "needs at least one tensor"));
            }
            Ok(tensors)
        }
    }
}

fn wrong_inputs(op: Op, names: &[&str], term: Term) -> Error {
    Error::arg(
        "inputs",
        format!(
            "{} takes {} tensors ({}), got {}",
            op.name(),
            names.len(),
            names.join(", "),
            term.list_length().unwrap_or(0)
        ),
    )
}

fn decode_params(op: Op, term: Term) -> Result<Vec<Param>> {
    let specs = op.params();
    // (most ops take none: no list to walk)
    if specs.is_empty() && term.is_empty_list() {
        return Ok(Vec::new());
    }
    let items = list("params", "parameters", term)?;
    let given = term.list_length().unwrap_or(0);
    if given != specs.len() {
        let names: Vec<&str> = specs.iter().map(|s| s.name()).collect();
        return Err(Error::arg(
            "params",
            format!(
                "{} takes {} parameters ({}), got {}",
                op.name(),
                specs.len(),
                names.join(", "),
                given
            ),
        ));
    }
    specs
        .iter()
        .zip(items)
        .map(|(spec, t)| decode_param(spec.name(), spec.kind, t))
        .collect()
}

/// `op_table()`: every op, as `{name, family, inputs, params, results,
/// flags}`: `inputs` a list of names, or `{:list, name}`; `params` a list
/// of `{name, kind, default}` (the default an Elixir expression as a string,
/// or `nil`); `results` one type rule per result; all names atoms.
#[rustler::nif]
fn op_table(env: Env) -> NifResult<Term> {
    let atom = |name: &str| Atom::from_str(env, name).map(|a| a.encode(env));
    let entries = Op::ALL
        .iter()
        .map(|&op| {
            let inputs = match op.inputs() {
                Inputs::Fixed(names) => names
                    .iter()
                    .map(|n| atom(n))
                    .collect::<NifResult<Vec<_>>>()?
                    .encode(env),
                Inputs::List(name) => (atom("list")?, atom(name)?).encode(env),
            };
            let params = op
                .params()
                .iter()
                .map(|p| Ok((atom(p.name())?, atom(p.kind.name())?, p.default).encode(env)))
                .collect::<NifResult<Vec<_>>>()?;
            let results = op
                .results()
                .iter()
                .map(|r| atom(r.name()))
                .collect::<NifResult<Vec<_>>>()?;
            let flags = op
                .flags()
                .iter()
                .map(|f| atom(f))
                .collect::<NifResult<Vec<_>>>()?;
            Ok(rustler::types::tuple::make_tuple(
                env,
                &[
                    atom(op.name())?,
                    atom(op.family())?,
                    inputs,
                    params.encode(env),
                    results.encode(env),
                    flags.encode(env),
                ],
            ))
        })
        .collect::<NifResult<Vec<_>>>()?;
    Ok(entries.encode(env))
}
