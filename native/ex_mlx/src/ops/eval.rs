//! Evaluation of lazy graphs.

use ex_mlx_core::error::Result;
use rustler::{Env, NifResult, Term};

use crate::reply::{done_here, ok, queued, submit};
use crate::term::decode_tensor;

/// `eval(tag, tensor)`: computes the tensor's graph now; replies `:ok`.
#[rustler::nif]
fn eval<'a>(env: Env<'a>, tag: Term<'a>, tensor: Term<'a>) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let tensor = decode_tensor("tensor", tensor)?;
        // Already computed: nothing to do, and no need to ask the worker.
        if tensor.is_evaluated() {
            if let Ok(done) = done_here(tag, ok()) {
                return Ok(done);
            }
        }
        submit(env, tag, tensor.device, move || {
            let array = tensor.array()?;
            array.eval()?;
            tensor.mark_evaluated();
            Ok(ok())
        })
    })())
}
