//! NIFs on a tensor as a whole: what it is (`tensor_info`, `tensor_await`,
//! `tensor_size`), computing it (`eval`), reading its only element (`item`)
//! and freeing it (`deallocate`). The queries are synchronous: they read the
//! resource's Rust fields only.

use ex_mlx_core::dtype;
use ex_mlx_core::error::Error;
use rustler::{Encoder, Env, NifResult, Term};

use crate::args::{AnyTensor, Tag, Tensor};
use crate::reply::{done_at_once, ok, submit, submit_read, AsyncResult};
use crate::tensor::NewTensor;
use crate::term::{error_tuple, shape_term, DeviceTerm, NumberTerm, TypeTerm};

rustler::atoms! { pending }

/// `tensor_info(t)`: `{shape, type, device}`, or `:pending` while a deferred
/// operation computes it (then `tensor_await/2` waits for it).
#[rustler::nif]
fn tensor_info(env: Env, tensor: AnyTensor) -> NifResult<Term> {
    let tensor = tensor.0;
    match tensor.info() {
        Ok(Some((shape, dtype))) => Ok((
            shape_term(env, &shape),
            TypeTerm(dtype),
            DeviceTerm(tensor.device),
        )
            .encode(env)),
        Ok(None) => Ok(pending().encode(env)),
        Err(e) => Err(error_tuple(e)),
    }
}

/// `tensor_await(tag, t)`: replies `{shape, type, device}` once `t` is computed.
#[rustler::nif]
fn tensor_await<'a>(env: Env<'a>, tag: Tag<'a>, tensor: AnyTensor) -> AsyncResult {
    let tensor = tensor.0;
    submit(env, tag, tensor.device, move || {
        tensor.array()?;
        Ok(NewTensor::Existing(tensor))
    })
}

/// `tensor_size(t)`: `{elements, bytes}`; an `:argument` error while a
/// deferred operation still computes `t` (`tensor_await/2` first).
#[rustler::nif]
fn tensor_size(tensor: AnyTensor) -> NifResult<(u64, u64)> {
    match tensor.0.info() {
        Ok(Some((shape, dtype))) => {
            let n: u64 = shape.iter().map(|&d| d as u64).product();
            Ok((n, n * dtype::size_of(dtype) as u64))
        }
        Ok(None) => Err(error_tuple(Error::arg(
            "tensor",
            "the tensor is still being computed",
        ))),
        Err(e) => Err(error_tuple(e)),
    }
}

/// `deallocate(t)`: frees the tensor's data now (synchronous: dropping an
/// array handle only decrements a reference count). `true` if it had data.
#[rustler::nif]
fn deallocate(tensor: AnyTensor) -> bool {
    tensor.0.deallocate()
}

/// `eval(tag, t)`: computes `t`; at once when it is known to be computed.
#[rustler::nif]
fn eval<'a>(env: Env<'a>, tag: Tag<'a>, tensor: Tensor) -> AsyncResult {
    let tensor = tensor.0;
    if tensor.is_evaluated() {
        if let Ok(done) = done_at_once(tag, ok()) {
            return Ok(done);
        }
    }
    submit_read(env, tag, tensor, |tensor| {
        let array = tensor.array()?;
        array.eval()?;
        tensor.mark_evaluated();
        Ok(ok())
    })
}

/// `item(tag, t)`: the only element of `t` as an Elixir number.
#[rustler::nif]
fn item<'a>(env: Env<'a>, tag: Tag<'a>, tensor: Tensor) -> AsyncResult {
    let tensor = tensor.0;
    // A computed, row-contiguous CPU tensor of one element is read here, as
    // `to_binary` reads it (crate::data::evaluated_host_buffer).
    if let Ok(Some(buffer)) = crate::data::evaluated_host_buffer(&tensor) {
        if buffer.shape().iter().product::<i32>() == 1 {
            if let Ok(number) = ex_mlx_core::item::read(buffer.bytes(), buffer.dtype()) {
                if let Ok(done) = crate::reply::done_at_once(tag, NumberTerm(number)) {
                    return Ok(done);
                }
            }
        }
    }
    submit_read(env, tag, tensor, |tensor| {
        Ok(NumberTerm(ex_mlx_core::item::item(&tensor.array()?)?))
    })
}
