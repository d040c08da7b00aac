//! Element-wise operations.

use ex_mlx_core::error::Result;
use rustler::{Atom, Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::{common_device, NewTensor};
use crate::term::decode_tensor;

/// `add(tag, a, b)`: a + b with broadcasting (lazy: nothing is computed yet).
#[rustler::nif]
fn add<'a>(env: Env<'a>, tag: Term<'a>, a: Term<'a>, b: Term<'a>) -> NifResult<Atom> {
    queued((|| -> Result<()> {
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let device = common_device(&[&a, &b])?;
        submit(env, tag, device, move || {
            Ok(NewTensor::new(
                mlx_rs::ops::add(a.array(), b.array())?,
                device,
            ))
        })
    })())
}
