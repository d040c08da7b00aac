//! Linear algebra: `matmul(tag, a, b)`.

use ex_mlx_core::ops::linalg;
use rustler::{Atom, Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::{common_device, NewTensor};
use crate::term::decode_tensor;

#[rustler::nif]
fn matmul<'a>(env: Env<'a>, tag: Term<'a>, a: Term<'a>, b: Term<'a>) -> NifResult<Atom> {
    queued((|| {
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let device = common_device(&[&a, &b])?;
        submit(env, tag, device, move || {
            Ok(NewTensor::new(
                linalg::matmul(&a.array(), &b.array())?,
                device,
            ))
        })
    })())
}
