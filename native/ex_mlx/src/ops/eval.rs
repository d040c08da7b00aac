//! Evaluation of lazy graphs.

use ex_mlx_core::error::Result;
use rustler::{Env, NifResult, Term};

use crate::reply::{ok, queued, submit};
use crate::term::decode_tensor;

/// `eval(tag, tensor)`: computes the tensor's graph now; replies `:ok`.
#[rustler::nif]
fn eval<'a>(env: Env<'a>, tag: Term<'a>, tensor: Term<'a>) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let tensor = decode_tensor("tensor", tensor)?;
        submit(env, tag, tensor.device, move || {
            tensor.array()?.eval()?;
            Ok(ok())
        })
    })())
}
