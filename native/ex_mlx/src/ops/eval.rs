//! Evaluation of lazy graphs.

use rustler::{Atom, Env, NifResult, Term};

use crate::error::Result;
use crate::nif::{decode_tensor, ok, ok_or_error, submit_reply};

/// `eval(tag, tensor)`: computes the tensor's graph now; replies `:ok`.
#[rustler::nif]
fn eval<'a>(env: Env<'a>, tag: Term<'a>, tensor: Term<'a>) -> NifResult<Atom> {
    ok_or_error((|| -> Result<()> {
        let tensor = decode_tensor("tensor", tensor)?;
        submit_reply(env, tag, tensor.device, move || {
            tensor.array().eval()?;
            Ok(ok())
        })
    })())
}
