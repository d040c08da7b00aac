//! Element-wise operations: `unary(tag, op, t)` and `binary(tag, op, a, b)`.

use ex_mlx_core::error::Result;
use ex_mlx_core::ops::elementwise;
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::{common_device, NewTensor};
use crate::term::{decode_op, decode_tensor};

/// `op(t)` element-wise; `op` is one of `ex_mlx_core::ops::elementwise::UNARY`.
#[rustler::nif]
fn unary<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let device = t.device;
        submit(env, tag, device, move || {
            NewTensor::new(elementwise::unary(&op, &t.array()?)?, device)
        })
    })())
}

/// `a op b` element-wise with broadcasting; `op` is one of `BINARY`.
#[rustler::nif]
fn binary<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    a: Term<'a>,
    b: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let op = decode_op(op)?;
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let device = common_device(&[&a, &b])?;
        submit(env, tag, device, move || {
            NewTensor::new(elementwise::binary(&op, &a.array()?, &b.array()?)?, device)
        })
    })())
}
