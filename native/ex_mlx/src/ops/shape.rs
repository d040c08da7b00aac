//! Shape operations: reshape, transpose, broadcast_to, squeeze, expand_dims,
//! flip, concatenate, stack, select, clip, pad.

use ex_mlx_core::error::Result;
use ex_mlx_core::ops::shape;
use mlx_rs::Array;
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::{common_device, NewTensor, TensorRef};
use crate::term::{
    decode_int, decode_ints, decode_opt_ints, decode_shape, decode_tensor, decode_tensors,
};

/// Queues `op(t.array())` on `t`'s device and replies with the new tensor.
fn on_tensor<'a, F>(
    env: Env<'a>,
    tag: Term<'a>,
    t: TensorRef,
    op: F,
) -> Result<crate::reply::Submitted>
where
    F: FnOnce(&Array) -> Result<Array> + Send + 'static,
{
    let device = t.device;
    submit(env, tag, device, move || {
        // every op given here makes a view: no new buffer
        Ok(NewTensor::view(op(&t.array()?)?, device))
    })
}

#[rustler::nif]
fn reshape<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    shape: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let dims = decode_shape("shape", shape)?;
        on_tensor(env, tag, t, move |a| shape::reshape(a, &dims))
    })())
}

#[rustler::nif]
fn transpose<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let axes = decode_ints("axes", axes)?;
        on_tensor(env, tag, t, move |a| shape::transpose(a, &axes))
    })())
}

#[rustler::nif]
fn broadcast_to<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    shape: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let dims = decode_shape("shape", shape)?;
        on_tensor(env, tag, t, move |a| shape::broadcast_to(a, &dims))
    })())
}

#[rustler::nif]
fn squeeze<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let axes = decode_opt_ints("axes", axes)?;
        on_tensor(env, tag, t, move |a| shape::squeeze(a, axes.as_deref()))
    })())
}

#[rustler::nif]
fn expand_dims<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let axes = decode_ints("axes", axes)?;
        on_tensor(env, tag, t, move |a| shape::expand_dims(a, &axes))
    })())
}

#[rustler::nif]
fn flip<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let axes = decode_ints("axes", axes)?;
        on_tensor(env, tag, t, move |a| shape::flip(a, &axes))
    })())
}

/// Joins `tensors` along an existing axis (`stack? = false`) or a new one.
fn join<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    tensors: Term<'a>,
    axis: Term<'a>,
    stack: bool,
) -> Result<crate::reply::Submitted> {
    let tensors = decode_tensors("tensors", tensors)?;
    let axis = decode_int("axis", axis)?;
    let refs: Vec<&TensorRef> = tensors.iter().collect();
    let device = if refs.is_empty() {
        ex_mlx_core::device::Device::Cpu
    } else {
        common_device(&refs)?
    };
    submit(env, tag, device, move || {
        let arrays: Vec<Array> = tensors
            .iter()
            .map(|t| t.array())
            .collect::<std::result::Result<_, _>>()?;
        let out = if stack {
            shape::stack(&arrays, axis)?
        } else {
            shape::concatenate(&arrays, axis)?
        };
        NewTensor::new(out, device)
    })
}

#[rustler::nif]
fn concatenate<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    tensors: Term<'a>,
    axis: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued(join(env, tag, tensors, axis, false))
}

#[rustler::nif]
fn stack<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    tensors: Term<'a>,
    axis: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued(join(env, tag, tensors, axis, true))
}

/// Queues `op(a, b, c)` on the three tensors' common device.
fn on_three<'a, F>(
    env: Env<'a>,
    tag: Term<'a>,
    names: [&'static str; 3],
    terms: [Term<'a>; 3],
    op: F,
) -> Result<crate::reply::Submitted>
where
    F: FnOnce(&Array, &Array, &Array) -> Result<Array> + Send + 'static,
{
    let a = decode_tensor(names[0], terms[0])?;
    let b = decode_tensor(names[1], terms[1])?;
    let c = decode_tensor(names[2], terms[2])?;
    let device = common_device(&[&a, &b, &c])?;
    submit(env, tag, device, move || {
        NewTensor::new(op(&a.array()?, &b.array()?, &c.array()?)?, device)
    })
}

#[rustler::nif]
fn select<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    pred: Term<'a>,
    on_true: Term<'a>,
    on_false: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued(on_three(
        env,
        tag,
        ["pred", "on_true", "on_false"],
        [pred, on_true, on_false],
        shape::select,
    ))
}

#[rustler::nif]
fn clip<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    min: Term<'a>,
    max: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued(on_three(
        env,
        tag,
        ["tensor", "min", "max"],
        [t, min, max],
        shape::clip,
    ))
}

/// `pad(tag, t, [{low, high} | {low, high, interior}, ...], value)`: `value`
/// is a rank-0 tensor.
#[rustler::nif]
fn pad<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    widths: Term<'a>,
    value: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let value = decode_tensor("value", value)?;
        let device = common_device(&[&t, &value])?;
        let bad = || {
            ex_mlx_core::Error::arg(
                "widths",
                format!(
                    "expected a list of {{low, high}} or {{low, high, interior}} integers, got: {}",
                    crate::term::show(widths)
                ),
            )
        };
        let items: Vec<Term> = widths.decode().map_err(|_| bad())?;
        let config = items
            .iter()
            .map(|item| {
                if let Ok((lo, hi)) = item.decode::<(i64, i64)>() {
                    Ok((lo, hi, 0))
                } else {
                    item.decode::<(i64, i64, i64)>().map_err(|_| bad())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        submit(env, tag, device, move || {
            NewTensor::new(
                shape::pad_general(&t.array()?, &config, &value.array()?)?,
                device,
            )
        })
    })())
}

/// `dynamic_slice(tag, t, starts, lengths)`: `starts` is an integer tensor.
#[rustler::nif]
fn dynamic_slice<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    starts: Term<'a>,
    lengths: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let starts = decode_tensor("starts", starts)?;
        let lengths = decode_shape("lengths", lengths)?;
        let device = common_device(&[&t, &starts])?;
        submit(env, tag, device, move || {
            NewTensor::new(
                shape::dynamic_slice(&t.array()?, &starts.array()?, &lengths)?,
                device,
            )
        })
    })())
}

/// `put_slice(tag, t, starts, update)`: `starts` is an integer tensor.
#[rustler::nif]
fn put_slice<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    starts: Term<'a>,
    update: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued(on_three(
        env,
        tag,
        ["tensor", "starts", "update"],
        [t, starts, update],
        shape::put_slice,
    ))
}

/// `slice(tag, t, starts, stops, strides)`.
#[rustler::nif]
fn slice<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    starts: Term<'a>,
    stops: Term<'a>,
    strides: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let starts = decode_ints("starts", starts)?;
        let stops = decode_ints("stops", stops)?;
        let strides = decode_ints("strides", strides)?;
        on_tensor(env, tag, t, move |a| {
            shape::slice(a, &starts, &stops, &strides)
        })
    })())
}
