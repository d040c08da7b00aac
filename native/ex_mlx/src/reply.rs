//! How an asynchronous NIF queues work and how its result reaches the caller
//! (the thread model itself is described in `ex_mlx_core::worker`).

use ex_mlx_core::device::Device;
use ex_mlx_core::error::Result;
use ex_mlx_core::worker;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{Atom, Encoder, Env, LocalPid, NifResult, Term};

use crate::term::ErrorTerm;

rustler::atoms! { ok, error }

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

/// Queues `work` on `device`'s worker; when it finishes, the calling process
/// receives `{tag, {:ok, value}}` or `{tag, {:error, {kind, message}}}`.
pub fn submit<T, F>(env: Env, tag: Term, device: Device, work: F) -> Result<()>
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let replier = Replier::new(env, tag);
    worker::submit(
        device,
        Box::new(move || replier.send(worker::run_caught(work))),
    )
}

/// The NIF's own return: `:ok` when the work was queued, `{:error, {kind, message}}` when not.
pub fn queued(result: Result<()>) -> NifResult<Atom> {
    match result {
        Ok(()) => Ok(ok()),
        Err(e) => Err(rustler::Error::Term(Box::new(ErrorTerm(e)))),
    }
}
