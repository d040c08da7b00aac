//! How an asynchronous NIF queues work and how its result reaches the caller
//! (the thread model itself is described in `ex_mlx_core::worker`).
//!
//! Two modes, chosen by the caller through the `tag` argument:
//!
//! * a reference: the worker sends `{tag, {:ok, value} | {:error, reason}}`
//!   when done and the caller waits for it (`ExMLX.Call.run/1`);
//! * `{:deferred, type}`, for operations producing one tensor: the NIF
//!   returns `{:deferred, tensor, device}` at once, the tensor being filled
//!   by the worker (cast to `type` if MLX produced another). Nothing is sent
//!   back; an error is stored in the tensor and raised where it is used. The
//!   Nx backend uses this: Nx knows every result's shape and type, so only
//!   reading data has to wait, and an op costs no thread round trip.

use std::any::Any;

use ex_mlx_core::device::Device;
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::worker;
use mlx_rs::Dtype;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{Atom, Encoder, Env, LocalPid, NifResult, Term};

use crate::tensor::{NewTensor, Tensor, TensorRef};
use crate::term::{DeviceTerm, ErrorTerm};

rustler::atoms! { ok, error, deferred }

/// Where a reply goes: the calling process and the tag it waits for. Built on
/// the scheduler (it copies the tag), used on a worker thread.
pub struct Replier {
    env: OwnedEnv,
    caller: LocalPid,
    tag: SavedTerm,
}

impl Replier {
    pub fn new(env: Env, tag: Term) -> Replier {
        let owned = OwnedEnv::new();
        let tag = owned.save(tag);
        Replier {
            env: owned,
            caller: env.pid(),
            tag,
        }
    }

    /// Sends `{tag, {:ok, value}}` or `{tag, {:error, {kind, message}}}`.
    /// Must run on a non-BEAM thread (a worker).
    pub fn send<T: Encoder>(mut self, result: Result<T>) {
        let tag = self.tag;
        // A send fails only when the caller has exited; nobody wants the reply then.
        let _ = self.env.send_and_clear(&self.caller, |env| {
            let outcome = match &result {
                Ok(value) => (ok(), value).encode(env),
                Err(e) => (error(), ErrorTerm(e.clone())).encode(env),
            };
            (tag.load(env), outcome).encode(env)
        });
    }
}

/// What a NIF returns once its work is queued.
pub enum Submitted {
    /// `:ok`: the reply will come as a message.
    Queued,
    /// `{:deferred, tensor, device}`: the tensor fills in the background.
    Deferred(TensorRef),
}

impl Encoder for Submitted {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self {
            Submitted::Queued => ok().encode(env),
            Submitted::Deferred(t) => (deferred(), t, DeviceTerm(t.device)).encode(env),
        }
    }
}

/// `Some(cast type)` when `tag` asks for deferred mode.
fn deferred_type(tag: Term) -> Result<Option<Dtype>> {
    match tag.decode::<(Atom, Term)>() {
        Ok((atom, type_)) if atom == deferred() => crate::term::decode_type("tag", type_).map(Some),
        _ => Ok(None),
    }
}

/// The array inside a tensor-producing result (deferred mode only).
fn into_array<T: 'static>(value: T) -> Result<mlx_rs::Array> {
    let any: Box<dyn Any> = Box::new(value);
    match any.downcast::<NewTensor>() {
        Ok(tensor) => tensor.0.array(),
        Err(_) => Err(Error::Internal(
            "this operation does not produce one tensor; it has no deferred form".into(),
        )),
    }
}

/// Queues `work` on `device`'s worker, replying or filling a deferred tensor
/// as `tag` asks (see the module documentation).
pub fn submit<T, F>(env: Env, tag: Term, device: Device, work: F) -> Result<Submitted>
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    if let Some(cast) = deferred_type(tag)? {
        ex_mlx_core::device::check_dtype(cast, device)?;
        let out = Tensor::pending(device);
        let target = out.clone();
        worker::submit(
            device,
            Box::new(move || {
                let result = worker::run_caught(work)
                    .and_then(into_array)
                    .and_then(|array| {
                        if array.dtype() == cast {
                            Ok(array)
                        } else {
                            Ok(array.as_dtype(cast)?)
                        }
                    });
                target.fill(result);
            }),
        )?;
        return Ok(Submitted::Deferred(out));
    }
    let replier = Replier::new(env, tag);
    worker::submit(
        device,
        Box::new(move || replier.send(worker::run_caught(work))),
    )?;
    Ok(Submitted::Queued)
}

/// The NIF's own return: `:ok` or `{:deferred, tensor, device}` when the work
/// was queued, `{:error, {kind, message}}` when not.
pub fn queued(result: Result<Submitted>) -> NifResult<Submitted> {
    result.map_err(|e| rustler::Error::Term(Box::new(ErrorTerm(e))))
}
