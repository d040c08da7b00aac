//! NIFs over MLX's distributed engine (`ex_mlx_core::distributed`):
//! initializing a group, splitting it, and the collectives on tensors.
//!
//! Every call that can wait for a peer (`dist_init`, `dist_split`,
//! `dist_collective`, `dist_send`, `dist_recv`, `dist_recv_like`) returns
//! `{:ok, ticket}` at once and replies `{tag, {:ok, value} | {:error,
//! reason}}` later, as the reference-tag mode of `crate::reply` does. The
//! work runs on the communication thread, after the input was evaluated on
//! its device's worker: a collective that waits for its peers holds neither
//! a scheduler nor the device's worker. The caller bounds the wait
//! (`ExMLX.Distributed`); if it gives up, `dist_abandon(ticket, reason)`
//! takes the reply away from the communication thread (so no late message
//! comes) and disables distributed calls in this OS process, since the
//! stuck work cannot be cancelled.

use std::sync::Mutex;

use ex_mlx_core::device::Device;
use ex_mlx_core::distributed::{self, Backend, Collective, Group};
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::worker;
use mlx_rs::{Array, Dtype};
use rustler::{Atom, Encoder, Env, NifResult, Resource, ResourceArc, Term};

use crate::args::{DeviceArg, ShapeArg, Tag, Tensor, TypeArg};
use crate::reply::{ok, Replier};
use crate::tensor::{NewTensor, TensorRef};
use crate::term::{error_tuple, show};

/// A group handed to Elixir.
pub struct GroupResource(Group);

#[rustler::resource_impl]
impl Resource for GroupResource {}

/// Where the reply of one distributed call goes, until it is sent or the
/// caller abandons it (whichever comes first takes the replier).
pub struct Ticket(Mutex<Option<Replier>>);

#[rustler::resource_impl]
impl Resource for Ticket {}

impl Ticket {
    fn new(env: Env, tag: Tag) -> ResourceArc<Ticket> {
        ResourceArc::new(Ticket(Mutex::new(Some(Replier::new(env, tag.0)))))
    }

    fn take(&self) -> Option<Replier> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Sends the reply unless the caller abandoned it. Off the BEAM's threads only.
    fn reply<T: Encoder>(&self, result: Result<T>) {
        if let Some(replier) = self.take() {
            replier.send(result);
        }
    }
}

/// A group argument: a group reference, or `nil` for the group of one.
struct GroupArg(ResourceArc<GroupResource>);

impl<'a> rustler::Decoder<'a> for GroupArg {
    fn decode(term: Term<'a>) -> NifResult<Self> {
        if term
            .decode::<Atom>()
            .is_ok_and(|a| a == rustler::types::atom::nil())
        {
            return Ok(GroupArg(ResourceArc::new(GroupResource(Group::single()))));
        }
        term.decode::<ResourceArc<GroupResource>>()
            .map(GroupArg)
            .map_err(|_| {
                error_tuple(Error::arg(
                    "group",
                    format!("expected a distributed group, got: {}", show(term)),
                ))
            })
    }
}

/// `{group, rank, size, backend}` as the init and split replies carry it.
struct GroupInfo(ResourceArc<GroupResource>);

impl Encoder for GroupInfo {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let g = &self.0 .0;
        let backend = Atom::from_str(env, g.backend())
            .map(|a| a.encode(env))
            .unwrap_or_else(|_| g.backend().encode(env));
        (self.0.clone(), g.rank(), g.size(), backend).encode(env)
    }
}

fn atom_name(name: &'static str, term: Term) -> Result<String> {
    term.atom_to_string()
        .map_err(|_| Error::arg(name, format!("expected an atom, got: {}", show(term))))
}

fn decode_backend(term: Term) -> Result<Backend> {
    let name = atom_name("backend", term)?;
    Backend::from_name(&name).ok_or_else(|| {
        Error::arg(
            "backend",
            format!("expected :any, :ring, :mpi or :nccl, got: :{name}"),
        )
    })
}

fn decode_rank(name: &'static str, term: Term) -> Result<i32> {
    term.decode::<i32>().map_err(|_| {
        Error::arg(
            name,
            format!("expected a rank (an integer), got: {}", show(term)),
        )
    })
}

/// The ticket, or the reason the call was refused before anything was queued.
type Ticketed = NifResult<(Atom, ResourceArc<Ticket>)>;

/// Queues `work` on the communication thread, in a stream that fits
/// `group`'s backend, replying through `ticket`.
fn on_comm<T, F>(ticket: ResourceArc<Ticket>, nccl: bool, work: F) -> Result<()>
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let failed = ticket.clone();
    distributed::comm_submit(Box::new(move || {
        let result = if nccl {
            distributed::with_gpu_stream(|| worker::run_caught(work))
        } else {
            worker::run_caught(work)
        };
        ticket.reply(result);
    }))
    .inspect_err(|e| failed.reply::<T>(Err(e.clone())))
}

/// Evaluates `tensor` on its device's worker (unless it is known to be
/// computed), then queues `work` on the communication thread with the
/// computed array.
fn after_input<T, F>(
    ticket: ResourceArc<Ticket>,
    tensor: TensorRef,
    group: ResourceArc<GroupResource>,
    work: F,
) -> Result<()>
where
    T: Encoder + Send + 'static,
    F: FnOnce(Array, &Group) -> Result<T> + Send + 'static,
{
    distributed::check_usable()?;
    // computed already: no hop through the device's worker (calls are
    // synchronous for their caller, so this cannot overtake one of its
    // earlier calls). Not for NCCL's GPU tensors: a GPU tensor recorded as
    // evaluated may still be computing on its worker's stream (MLX's
    // `async_eval`), which only the worker's thread can wait for.
    if !is_nccl(&group.0) {
        if let Some(array) = tensor.evaluated_array() {
            let g = group.clone();
            return on_comm(ticket, false, move || work(array, &g.0));
        }
    }
    crate::tensor::eval_on_worker(tensor, move |input| match input {
        Ok(array) => {
            let nccl = is_nccl(&group.0);
            // (a refusal is replied through the ticket by on_comm)
            let _ = on_comm(ticket, nccl, move || work(array, &group.0));
        }
        Err(e) => ticket.reply::<T>(Err(e)),
    })
}

/// A new ticket for `tag`, given to `queue`, which queues the call's work
/// to reply through it: the ticket, or the reason `queue` refused the call.
fn ticketed(env: Env, tag: Tag, queue: impl FnOnce(ResourceArc<Ticket>) -> Result<()>) -> Ticketed {
    let ticket = Ticket::new(env, tag);
    queue(ticket.clone()).map_err(error_tuple)?;
    Ok((ok(), ticket))
}

/// Whether `group`'s collectives run on the GPU (NCCL's do).
fn is_nccl(group: &Group) -> bool {
    group.backend() == "nccl"
}

/// A collective's result over `group` as a tensor on `device`.
fn result_tensor(array: Array, group: &Group, device: Device) -> Result<NewTensor> {
    distributed::eval(&array)?;
    if group.size() == 1 {
        // the group of one returns its input, allocating nothing
        Ok(NewTensor::view(array, device))
    } else {
        NewTensor::new(array, device)
    }
}

/// `dist_available(backend)`: whether this MLX build has the backend.
/// `dist_setenv(name, value)`: sets `MLX_HOSTFILE` or `MLX_RANK` where MLX
/// reads them (the C library's environment: Erlang's `os:putenv` changes
/// only the emulator's own copy), for `ExMLX.Distributed.init/1`'s
/// `:hostfile` and `:rank`. Other names are refused.
#[rustler::nif]
fn dist_setenv(name: Term, value: Term) -> NifResult<Atom> {
    let name = match name.decode::<String>() {
        Ok(n) if n == "MLX_HOSTFILE" || n == "MLX_RANK" => n,
        _ => {
            return Err(error_tuple(Error::arg(
                "name",
                format!(
                    "expected \"MLX_HOSTFILE\" or \"MLX_RANK\", got: {}",
                    show(name)
                ),
            )))
        }
    };
    let value = match value.decode::<String>() {
        Ok(v) if !v.is_empty() && !v.contains('\0') => v,
        _ => {
            return Err(error_tuple(Error::arg(
                "value",
                format!(
                    "expected a non-empty string without NUL, got: {}",
                    show(value)
                ),
            )))
        }
    };
    // (Rust 2021: safe to call; it races only with another thread's getenv
    // of the environment, which MLX does when a group is made, after this)
    std::env::set_var(name, value);
    Ok(rustler::types::atom::ok())
}

#[rustler::nif]
fn dist_available(backend: Term) -> NifResult<bool> {
    Ok(decode_backend(backend).map_err(error_tuple)?.is_available())
}

/// `dist_init(tag, backend, strict)`: replies `{group, rank, size, backend}`.
#[rustler::nif]
fn dist_init<'a>(env: Env<'a>, tag: Tag<'a>, backend: Term<'a>, strict: Term<'a>) -> Ticketed {
    let backend = decode_backend(backend).map_err(error_tuple)?;
    let strict = crate::term::decode_bool("strict", strict).map_err(error_tuple)?;
    ticketed(env, tag, |ticket| {
        on_comm(ticket, false, move || {
            let group = distributed::init(backend, strict)?;
            Ok(GroupInfo(ResourceArc::new(GroupResource(group))))
        })
    })
}

/// `dist_split(tag, group, color, key)`: replies `{group, rank, size, backend}`.
#[rustler::nif]
fn dist_split<'a>(
    env: Env<'a>,
    tag: Tag<'a>,
    group: GroupArg,
    color: Term<'a>,
    key: Term<'a>,
) -> Ticketed {
    let color = decode_rank("color", color).map_err(error_tuple)?;
    let key = decode_rank("key", key).map_err(error_tuple)?;
    let group = group.0;
    ticketed(env, tag, |ticket| {
        on_comm(ticket, is_nccl(&group.0), move || {
            let split = group.0.split(color, key)?;
            Ok(GroupInfo(ResourceArc::new(GroupResource(split))))
        })
    })
}

/// `dist_collective(tag, op, tensor, group)`: `op` (`:all_sum`, `:all_max`,
/// `:all_min`, `:all_gather`) of `tensor` over the group; replies the tensor.
#[rustler::nif]
fn dist_collective<'a>(
    env: Env<'a>,
    tag: Tag<'a>,
    op: Term<'a>,
    tensor: Tensor,
    group: GroupArg,
) -> Ticketed {
    let name = atom_name("op", op).map_err(error_tuple)?;
    let op = Collective::from_name(&name)
        .ok_or_else(|| {
            Error::arg(
                "op",
                format!("expected :all_sum, :all_max, :all_min or :all_gather, got: :{name}"),
            )
        })
        .map_err(error_tuple)?;
    let tensor = tensor.0;
    let device = tensor.device;
    ticketed(env, tag, |ticket| {
        after_input(ticket, tensor, group.0, move |x, g| {
            let y = distributed::collective(op, &x, g)?;
            result_tensor(y, g, device)
        })
    })
}

/// `dist_send(tag, tensor, dst, group)`: replies `:ok` once sent.
#[rustler::nif]
fn dist_send<'a>(
    env: Env<'a>,
    tag: Tag<'a>,
    tensor: Tensor,
    dst: Term<'a>,
    group: GroupArg,
) -> Ticketed {
    let dst = decode_rank("dst", dst).map_err(error_tuple)?;
    ticketed(env, tag, |ticket| {
        after_input(ticket, tensor.0, group.0, move |x, g| {
            distributed::eval(&distributed::send(&x, dst, g)?)?;
            Ok(ok())
        })
    })
}

/// `dist_recv(tag, shape, type, src, group, device)`: replies the tensor
/// received from `src`, on `device`.
#[rustler::nif]
#[allow(clippy::too_many_arguments)]
fn dist_recv<'a>(
    env: Env<'a>,
    tag: Tag<'a>,
    shape: ShapeArg,
    type_: TypeArg,
    src: Term<'a>,
    group: GroupArg,
    device: DeviceArg,
) -> Ticketed {
    let src = decode_rank("src", src).map_err(error_tuple)?;
    let (shape, dtype, device) = (shape.0, type_.0, device.0);
    ex_mlx_core::device::check_dtype(dtype, device).map_err(error_tuple)?;
    distributed::check_usable().map_err(error_tuple)?;
    let group = group.0;
    ticketed(env, tag, |ticket| {
        on_comm(ticket, is_nccl(&group.0), move || {
            recv_tensor(&shape, dtype, src, &group.0, device)
        })
    })
}

fn recv_tensor(
    shape: &[i32],
    dtype: Dtype,
    src: i32,
    group: &Group,
    device: Device,
) -> Result<NewTensor> {
    let y = distributed::recv(shape, dtype, src, group)?;
    distributed::eval(&y)?;
    NewTensor::new(y, device)
}

/// `dist_recv_like(tag, tensor, src, group)`: replies a tensor of
/// `tensor`'s shape and type received from `src`, on `tensor`'s device.
#[rustler::nif]
fn dist_recv_like<'a>(
    env: Env<'a>,
    tag: Tag<'a>,
    tensor: Tensor,
    src: Term<'a>,
    group: GroupArg,
) -> Ticketed {
    let src = decode_rank("src", src).map_err(error_tuple)?;
    let tensor = tensor.0;
    let device = tensor.device;
    ticketed(env, tag, |ticket| {
        after_input(ticket, tensor, group.0, move |x, g| {
            let shape: Vec<i32> = x.shape().to_vec();
            recv_tensor(&shape, x.dtype(), src, g, device)
        })
    })
}

/// `dist_abandon(ticket, reason)`: `true` if the reply was taken away (no
/// message will come; distributed calls are disabled with `reason`),
/// `false` if it was already sent.
#[rustler::nif]
fn dist_abandon(ticket: Term, reason: Term) -> NifResult<bool> {
    let ticket = ticket.decode::<ResourceArc<Ticket>>().map_err(|_| {
        error_tuple(Error::arg(
            "ticket",
            format!(
                "expected a distributed call's ticket, got: {}",
                show(ticket)
            ),
        ))
    })?;
    let reason = reason.decode::<String>().map_err(|_| {
        error_tuple(Error::arg(
            "reason",
            format!("expected a string, got: {}", show(reason)),
        ))
    })?;
    Ok(match ticket.take() {
        Some(_) => {
            distributed::poison(reason);
            true
        }
        None => false,
    })
}
