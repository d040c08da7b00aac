//! Glue shared by every NIF: how a call is queued and how errors return.

use rustler::{Atom, Encoder, Env, NifResult, Term};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::worker;

rustler::atoms! { ok }

/// Queues `work` on `device`'s worker; its result goes to the caller tagged `tag`.
pub fn submit_reply<T, F>(env: Env, tag: Term, device: Device, work: F) -> Result<()>
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    worker::reply(env, tag, device, work)
}

/// `:ok` when the work was queued, `{:error, {kind, message}}` when it was not.
pub fn ok_or_error(result: Result<()>) -> NifResult<Atom> {
    match result {
        Ok(()) => Ok(ok()),
        Err(e) => Err(rustler::Error::Term(Box::new(e))),
    }
}

/// Like [`ok_or_error`] for synchronous NIFs returning a value.
pub fn value_or_error<T>(result: Result<T>) -> NifResult<T> {
    result.map_err(|e| rustler::Error::Term(Box::new(e)))
}

/// Reads a tensor argument, naming it when it is not one.
pub fn decode_tensor(name: &'static str, term: Term) -> Result<crate::tensor::TensorRef> {
    term.decode()
        .map_err(|_| Error::arg(name, format!("expected a tensor reference, got: {term:?}")))
}
