//! Sorting NIFs: sort, argsort, top_k, partition; and cumulative ops.

use ex_mlx_core::ops::{cumulative, sort};
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::NewTensor;
use crate::term::{decode_bool, decode_int, decode_op, decode_tensor};

/// `sort(tag, t, axis, descending?, indices?)`: values, or (with `indices?`) the argsort.
#[rustler::nif]
fn sort<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    axis: Term<'a>,
    descending: Term<'a>,
    indices: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let axis = decode_int("axis", axis)?;
        let descending = decode_bool("descending", descending)?;
        let indices = decode_bool("indices", indices)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let out = if indices {
                sort::argsort(&t.array()?, axis, descending)?
            } else {
                sort::sort(&t.array()?, axis, descending)?
            };
            NewTensor::new(out, device)
        })
    })())
}

/// `top_k(tag, t, k)`: `[values, indices]`.
#[rustler::nif]
fn top_k<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    k: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let k = decode_int("k", k)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let (values, indices) = sort::top_k(&t.array()?, k)?;
            Ok(vec![
                NewTensor::new(values, device)?,
                NewTensor::new(indices, device)?,
            ])
        })
    })())
}

#[rustler::nif]
fn partition<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    kth: Term<'a>,
    axis: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let kth = decode_int("kth", kth)?;
        let axis = decode_int("axis", axis)?;
        let device = t.device;
        submit(env, tag, device, move || {
            NewTensor::new(sort::partition(&t.array()?, kth, axis)?, device)
        })
    })())
}

/// `cumulative(tag, op, t, axis, reverse?)`.
#[rustler::nif]
fn cumulative<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    axis: Term<'a>,
    reverse: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let axis = decode_int("axis", axis)?;
        let reverse = decode_bool("reverse", reverse)?;
        let device = t.device;
        submit(env, tag, device, move || {
            NewTensor::new(
                cumulative::cumulative(&op, &t.array()?, axis, reverse)?,
                device,
            )
        })
    })())
}
