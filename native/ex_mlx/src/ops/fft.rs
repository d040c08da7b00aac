//! Fourier transform NIFs.

use ex_mlx_core::ops::fft;
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::NewTensor;
use crate::term::{
    decode_int, decode_ints, decode_op, decode_opt_int, decode_opt_ints, decode_tensor,
};

/// `fft(tag, op, t, n | nil, axis)` for :fft, :ifft, :rfft, :irfft.
#[rustler::nif]
fn fft<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    n: Term<'a>,
    axis: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let n = decode_opt_int("n", n)?;
        let axis = decode_int("axis", axis)?;
        let device = t.device;
        submit(env, tag, device, move || {
            NewTensor::new(fft::fft1(&op, &t.array()?, n, axis)?, device)
        })
    })())
}

/// `fft2(tag, op, t, lengths | nil, axes)` for :fft2, :ifft2.
#[rustler::nif]
fn fft2<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    lengths: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let lengths = decode_opt_ints("lengths", lengths)?;
        let axes = decode_ints("axes", axes)?;
        let device = t.device;
        submit(env, tag, device, move || {
            NewTensor::new(
                fft::fft2(&op, &t.array()?, lengths.as_deref(), &axes)?,
                device,
            )
        })
    })())
}
