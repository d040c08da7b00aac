//! Indexing NIFs: take, take_along_axis, gather, scatter.

use ex_mlx_core::ops::indexing;
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::{common_device, NewTensor};
use crate::term::{decode_bool, decode_int, decode_ints, decode_tensor};

#[rustler::nif]
fn take<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    indices: Term<'a>,
    axis: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let idx = decode_tensor("indices", indices)?;
        let axis = decode_int("axis", axis)?;
        let device = common_device(&[&t, &idx])?;
        submit(env, tag, device, move || {
            NewTensor::new(indexing::take(&t.array()?, &idx.array()?, axis)?, device)
        })
    })())
}

#[rustler::nif]
fn take_along_axis<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    indices: Term<'a>,
    axis: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let idx = decode_tensor("indices", indices)?;
        let axis = decode_int("axis", axis)?;
        let device = common_device(&[&t, &idx])?;
        submit(env, tag, device, move || {
            NewTensor::new(
                indexing::take_along_axis(&t.array()?, &idx.array()?, axis)?,
                device,
            )
        })
    })())
}

#[rustler::nif]
fn gather<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    indices: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let idx = decode_tensor("indices", indices)?;
        let axes = decode_ints("axes", axes)?;
        let device = common_device(&[&t, &idx])?;
        submit(env, tag, device, move || {
            NewTensor::new(indexing::gather(&t.array()?, &idx.array()?, &axes)?, device)
        })
    })())
}

/// `scatter(tag, t, indices, updates, axes, add?)`.
#[rustler::nif]
fn scatter<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    indices: Term<'a>,
    updates: Term<'a>,
    axes: Term<'a>,
    add: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let idx = decode_tensor("indices", indices)?;
        let upd = decode_tensor("updates", updates)?;
        let axes = decode_ints("axes", axes)?;
        let add = decode_bool("add", add)?;
        let device = common_device(&[&t, &idx, &upd])?;
        submit(env, tag, device, move || {
            let out = indexing::scatter(&t.array()?, &idx.array()?, &upd.array()?, &axes, add)?;
            NewTensor::new(out, device)
        })
    })())
}
