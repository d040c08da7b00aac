//! Reductions: `reduce(tag, op, t, axes | nil, keep_dims)` and
//! `arg_reduce(tag, op, t, axis | nil, keep_dims)`.

use ex_mlx_core::error::Result;
use ex_mlx_core::ops::reduce;
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::NewTensor;
use crate::term::{decode_bool, decode_op, decode_opt_int, decode_opt_ints, decode_tensor};

#[rustler::nif]
fn reduce<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    axes: Term<'a>,
    keep_dims: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let axes = decode_opt_ints("axes", axes)?;
        let keep_dims = decode_bool("keep_dims", keep_dims)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let out = reduce::reduce(&op, &t.array()?, axes.as_deref(), keep_dims)?;
            NewTensor::new(out, device)
        })
    })())
}

#[rustler::nif]
fn arg_reduce<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    axis: Term<'a>,
    keep_dims: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let axis = decode_opt_int("axis", axis)?;
        let keep_dims = decode_bool("keep_dims", keep_dims)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let out = reduce::arg_reduce(&op, &t.array()?, axis, keep_dims)?;
            NewTensor::new(out, device)
        })
    })())
}

/// `window(tag, op, t, window, strides, padding, dilations)` for
/// :window_sum, :window_product, :window_max, :window_min.
#[allow(clippy::too_many_arguments)]
#[rustler::nif]
fn window<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    window_dims: Term<'a>,
    strides: Term<'a>,
    padding: Term<'a>,
    dilations: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let window = crate::term::decode_ints("window", window_dims)?;
        let strides = crate::term::decode_ints("strides", strides)?;
        let padding: Vec<(i64, i64)> = padding.decode().map_err(|_| {
            ex_mlx_core::Error::arg(
                "padding",
                format!(
                    "expected a list of {{low, high}} pairs, got: {}",
                    crate::term::show(padding)
                ),
            )
        })?;
        let dilations = crate::term::decode_ints("dilations", dilations)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let out = ex_mlx_core::ops::window::window(
                &op,
                &t.array()?,
                &window,
                &strides,
                &padding,
                &dilations,
            )?;
            NewTensor::new(out, device)
        })
    })())
}
