//! Element-wise operations.

use rustler::{Atom, Env, NifResult, Term};

use crate::error::Result;
use crate::nif::{decode_tensor, ok_or_error, submit_reply};
use crate::tensor::{common_device, NewTensor};

/// `add(tag, a, b)`: a + b with broadcasting (lazy: nothing is computed yet).
#[rustler::nif]
fn add<'a>(env: Env<'a>, tag: Term<'a>, a: Term<'a>, b: Term<'a>) -> NifResult<Atom> {
    ok_or_error((|| -> Result<()> {
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let device = common_device(&[&a, &b])?;
        submit_reply(env, tag, device, move || {
            Ok(NewTensor::new(mlx_rs::ops::add(a.array(), b.array())?, device))
        })
    })())
}
