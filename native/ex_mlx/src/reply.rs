//! How an asynchronous NIF queues work and how its result reaches the caller
//! (the thread model itself is described in `ex_mlx_core::worker`).

use ex_mlx_core::device::Device;
use ex_mlx_core::error::Result;
use ex_mlx_core::worker;
use rustler::env::OwnedEnv;
use rustler::{Atom, Encoder, Env, NifResult, Term};

use crate::term::ErrorTerm;

rustler::atoms! { ok, error }

/// Queues `work` on `device`'s worker; when it finishes, the calling process
/// receives `{tag, {:ok, value}}` or `{tag, {:error, {kind, message}}}`.
pub fn submit<T, F>(env: Env, tag: Term, device: Device, work: F) -> Result<()>
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let caller = env.pid();
    let mut message_env = OwnedEnv::new();
    let tag = message_env.save(tag);
    worker::submit(
        device,
        Box::new(move || {
            let result = worker::run_caught(work);
            // A send fails only when the caller has exited; nobody wants the reply then.
            let _ = message_env.send_and_clear(&caller, |env| {
                let outcome = match &result {
                    Ok(value) => (ok(), value).encode(env),
                    Err(e) => (error(), ErrorTerm(e.clone())).encode(env),
                };
                (tag.load(env), outcome).encode(env)
            });
        }),
    )
}

/// The NIF's own return: `:ok` when the work was queued, `{:error, {kind, message}}` when not.
pub fn queued(result: Result<()>) -> NifResult<Atom> {
    match result {
        Ok(()) => Ok(ok()),
        Err(e) => Err(rustler::Error::Term(Box::new(ErrorTerm(e)))),
    }
}
