//! Creating tensors and converting types: `full`, `iota`, `eye`, `as_type`,
//! `bitcast`, and `item` (reading one element as a number).

use ex_mlx_core::error::Result;
use ex_mlx_core::ops::{convert, creation};
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::NewTensor;
use crate::term::{
    decode_device, decode_int, decode_opt_int, decode_scalar, decode_shape, decode_tensor,
    decode_type, NumberTerm,
};

#[rustler::nif]
fn full<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    value: Term<'a>,
    type_: Term<'a>,
    shape: Term<'a>,
    device: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let value = decode_scalar("value", value)?;
        let dtype = decode_type("type", type_)?;
        let shape = decode_shape("shape", shape)?;
        let device = decode_device("device", device)?;
        ex_mlx_core::device::check_dtype(dtype, device)?;
        // Checked here so the error names the value before any work is queued.
        creation::scalar_bytes(value, dtype)?;
        submit(env, tag, device, move || {
            NewTensor::new(creation::full(value, dtype, &shape)?, device)
        })
    })())
}

#[rustler::nif]
fn iota<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    type_: Term<'a>,
    shape: Term<'a>,
    axis: Term<'a>,
    device: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let dtype = decode_type("type", type_)?;
        let shape = decode_shape("shape", shape)?;
        let axis = decode_opt_int("axis", axis)?;
        let device = decode_device("device", device)?;
        ex_mlx_core::device::check_dtype(dtype, device)?;
        submit(env, tag, device, move || {
            NewTensor::new(creation::iota(dtype, &shape, axis)?, device)
        })
    })())
}

#[rustler::nif]
fn eye<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    n: Term<'a>,
    m: Term<'a>,
    type_: Term<'a>,
    device: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let to_dim = |name, t| -> Result<i32> {
            let v = decode_int(name, t)?;
            i32::try_from(v)
                .map_err(|_| ex_mlx_core::Error::arg(name, format!("{v} is out of range")))
        };
        let n = to_dim("n", n)?;
        let m = to_dim("m", m)?;
        let dtype = decode_type("type", type_)?;
        let device = decode_device("device", device)?;
        submit(env, tag, device, move || {
            NewTensor::new(creation::eye(n, m, dtype)?, device)
        })
    })())
}

/// `as_type` and `bitcast`: `convert(array, dtype)` on the tensor's device.
fn convert_nif<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    type_: Term<'a>,
    convert: fn(&mlx_rs::Array, mlx_rs::Dtype) -> ex_mlx_core::Result<mlx_rs::Array>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let dtype = decode_type("type", type_)?;
        let device = t.device;
        ex_mlx_core::device::check_dtype(dtype, device)?;
        submit(env, tag, device, move || {
            NewTensor::new(convert(&t.array()?, dtype)?, device)
        })
    })())
}

/// `as_type(tag, t, type)`: values converted to `type`.
#[rustler::nif]
fn as_type<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    type_: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    convert_nif(env, tag, t, type_, convert::as_type)
}

/// `bitcast(tag, t, type)`: bytes reinterpreted as `type`.
#[rustler::nif]
fn bitcast<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    type_: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    convert_nif(env, tag, t, type_, convert::bitcast)
}

/// `item(tag, t)`: the only element of `t` as an Elixir number.
#[rustler::nif]
fn item<'a>(env: Env<'a>, tag: Term<'a>, t: Term<'a>) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let device = t.device;
        submit(env, tag, device, move || {
            Ok(NumberTerm(ex_mlx_core::item::item(&t.array()?)?))
        })
    })())
}
