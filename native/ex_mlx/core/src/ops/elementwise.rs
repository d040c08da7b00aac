//! Element-wise operations that are more than one MLX call (the op table,
//! [`super::table`], calls MLX directly for the others).

use mlx_rs::{ops, Array};

use crate::error::Result;

/// The remainder with the dividend's sign (Elixir's `rem/2`, C's `fmod`),
/// which pairs with `quotient` truncating toward zero. MLX's own remainder
/// takes the divisor's sign (Python's `%`); on non-negative operands the two
/// agree, so: sign(a) · (|a| mod |b|).
pub fn remainder(a: &Array, b: &Array) -> Result<Array> {
    let r = ops::remainder(ops::abs(a)?, ops::abs(b)?)?;
    let negative = ops::lt(a, Array::from_int(0))?;
    Ok(ops::select(&negative, ops::negative(&r)?, &r)?)
}

/// Exactly one of `a` and `b` non-zero.
pub fn logical_xor(a: &Array, b: &Array) -> Result<Array> {
    Ok(ops::ne(
        ops::ne(a, Array::from_int(0))?,
        ops::ne(b, Array::from_int(0))?,
    )?)
}

/// `log(e^a + e^b)`; on f64 computed on the host (see [`super::precise`]).
pub fn logaddexp(a: &Array, b: &Array) -> Result<Array> {
    let both = ops::add(
        Array::from_int(0).as_dtype(a.dtype())?,
        Array::from_int(0).as_dtype(b.dtype())?,
    )?
    .dtype();
    if both == mlx_rs::Dtype::Float64 {
        return super::precise::logaddexp(&a.as_dtype(both)?, &b.as_dtype(both)?);
    }
    Ok(ops::logaddexp(a, b)?)
}

/// Complex conjugate (negates the imaginary part exactly, zeros included).
pub fn conjugate(a: &Array) -> Result<Array> {
    // SAFETY: one mlx-c call; `a` is a live array for its duration.
    unsafe {
        super::raw::op("conjugate", |res, s| {
            mlx_sys::mlx_conjugate(res, a.as_ptr(), s)
        })
    }
}

/// Rounds half away from zero (Elixir's `round/1`, Nx's `round`); MLX's own
/// `round` goes half to even.
pub fn round_half_away(a: &Array) -> Result<Array> {
    if !a.dtype().is_float() {
        return Ok(ops::round(a, None)?);
    }
    let t = a.trunc()?;
    let frac = ops::abs(ops::subtract(a, &t)?)?;
    let half = Array::from_f32(0.5).as_dtype(a.dtype())?;
    let bump = ops::multiply(ops::ge(&frac, &half)?.as_dtype(a.dtype())?, ops::sign(a)?)?;
    Ok(ops::add(&t, &bump)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    #[test]
    fn remainder_takes_the_dividends_sign_and_round_goes_away_from_zero() {
        let (rem, round) = run_blocking(Device::Cpu, || {
            let a = Array::from_slice(&[-7i32, 7, -7, 7], &[4]);
            let b = Array::from_slice(&[2i32, 2, -2, -2], &[4]);
            let x = Array::from_slice(&[-2.5f32, 2.5, 0.49, -0.5], &[4]);
            Ok((
                remainder(&a, &b)?.as_slice::<i32>().to_vec(),
                round_half_away(&x)?.as_slice::<f32>().to_vec(),
            ))
        })
        .unwrap();
        // Elixir: rem(-7, 2) = -1, rem(7, 2) = 1, rem(-7, -2) = -1, rem(7, -2) = 1
        assert_eq!(rem, vec![-1, 1, -1, 1]);
        // Elixir: round(-2.5) = -3, round(2.5) = 3, round(0.49) = 0, round(-0.5) = -1
        assert_eq!(round, vec![-3.0, 3.0, 0.0, -1.0]);
    }
}
