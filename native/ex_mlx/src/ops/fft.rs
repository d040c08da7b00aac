//! Fourier transform and spectrum shift NIFs (`ExMLX.FFT`).

use ex_mlx_core::ops::fft;
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::NewTensor;
use crate::term::{decode_int, decode_op, decode_opt_int, decode_opt_ints, decode_tensor};

/// `fft(tag, op, t, n | nil, axis)` for the 1-D transforms :fft, :ifft,
/// :rfft, :irfft.
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

/// `fftn(tag, op, t, s | nil, axes | nil)` for the 2-D and N-D transforms
/// :fft2, :ifft2, :rfft2, :irfft2, :fftn, :ifftn, :rfftn, :irfftn (`nil`
/// takes the op's default).
#[rustler::nif]
fn fftn<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    s: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let s = decode_opt_ints("s", s)?;
        let axes = decode_opt_ints("axes", axes)?;
        let device = t.device;
        submit(env, tag, device, move || {
            NewTensor::new(
                fft::fftn(&op, &t.array()?, s.as_deref(), axes.as_deref())?,
                device,
            )
        })
    })())
}

/// `fftshift(tag, op, t, axes | nil)` for :fftshift and :ifftshift (`nil`:
/// every axis).
#[rustler::nif]
fn fftshift<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    axes: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let op = decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let axes = decode_opt_ints("axes", axes)?;
        let device = t.device;
        submit(env, tag, device, move || {
            NewTensor::new(fft::shift(&op, &t.array()?, axes.as_deref())?, device)
        })
    })())
}
