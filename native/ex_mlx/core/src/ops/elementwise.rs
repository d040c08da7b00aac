//! Element-wise operations that are more than one MLX call (the op table,
//! [`super::table`], calls MLX directly for the others).

use mlx_rs::{ops, Array, Dtype};

use crate::dtype::is_integer;
use crate::error::Result;

/// The type MLX computes `a op b` in.
fn promoted(a: &Array, b: &Array) -> Result<Dtype> {
    Ok(ops::add(
        Array::from_int(0).as_dtype(a.dtype())?,
        Array::from_int(0).as_dtype(b.dtype())?,
    )?
    .dtype())
}

/// `a` to the power `b`. A float32 `a` to a float32 power of 2 that is
/// already computed and adds no dimension (Nx's `pow(x, 2)` in a layer
/// norm's variance) is `square` (one multiplication, rounded once: the
/// correctly rounded square, as Nx.BinaryBackend's `pow` gives it), not
/// MLX's CPU power, which calls the C library's `powf` value by value and
/// is not always rounded correctly (glibc's `powf(x, 2)` missed x² for 42 of
/// 20,000 values of [-100, 100]). A power still being computed takes MLX's
/// (docs/numerics.md lists this among the paths not yet one implementation).
pub fn power(a: &Array, b: &Array) -> Result<Array> {
    let exponent = if a.dtype() == Dtype::Float32
        && b.dtype() == Dtype::Float32
        && b.size() == 1
        && b.ndim() <= a.ndim()
        && crate::ahead::is_available(b)
    {
        b.try_item_exact::<f32>().ok()
    } else {
        None
    };
    match exponent {
        Some(2.0) => Ok(ops::square(a)?),
        _ => Ok(ops::power(a, b)?),
    }
}

/// Where integer division would trap: a zero divisor, and the signed
/// minimum divided by -1. On x86 both raise SIGFPE, which would end the
/// VM; MLX does not check. (`dtype` is the computation type.)
fn traps(a: &Array, b: &Array, dtype: Dtype) -> Result<(Array, Array)> {
    let zero = ops::eq(b, Array::from_int(0).as_dtype(dtype)?)?;
    let min = match dtype {
        Dtype::Int8 => Some(Array::from_slice(&[i8::MIN], &[])),
        Dtype::Int16 => Some(Array::from_slice(&[i16::MIN], &[])),
        Dtype::Int32 => Some(Array::from_int(i32::MIN)),
        Dtype::Int64 => Some(Array::from_slice(&[i64::MIN], &[])),
        _ => None,
    };
    let trap = match min {
        Some(min) => {
            let overflow = ops::logical_and(
                ops::eq(a.as_dtype(dtype)?, &min)?,
                ops::eq(b, Array::from_int(-1).as_dtype(dtype)?)?,
            )?;
            ops::logical_or(&zero, &overflow)?
        }
        None => zero.clone(),
    };
    Ok((zero, trap))
}

/// `a / b`: for integers truncated toward zero (Elixir's `div/2`, Nx's
/// `quotient`), for floats rounded down (MLX's `floor_divide`). For
/// integers, division by zero gives -1 (all bits set) and the signed minimum
/// divided by -1 gives the minimum, as XLA defines them, rather than a trap
/// (see [`traps`]).
///
/// MLX's integer `floor_divide` truncates in MLX 0.32.2 and rounds down in
/// 0.32.4; the quotient is made exact for either: where the remainder left
/// by MLX's quotient (`a - q·b`, exact in wrapping arithmetic) is non-zero
/// and its sign is not `a`'s, the quotient was rounded down, one below the
/// truncated one.
pub fn quotient(a: &Array, b: &Array) -> Result<Array> {
    let dtype = promoted(a, b)?;
    if !is_integer(dtype) {
        return Ok(ops::floor_divide(a, b)?);
    }
    let (zero, trap) = traps(a, b, dtype)?;
    let one = Array::from_int(1).as_dtype(dtype)?;
    let divisor = ops::select(&trap, &one, b)?;
    let mut q = ops::floor_divide(a, &divisor)?;
    let signed = matches!(
        dtype,
        Dtype::Int8 | Dtype::Int16 | Dtype::Int32 | Dtype::Int64
    );
    if signed {
        let r = ops::subtract(a, ops::multiply(&q, &divisor)?)?;
        let zero_value = Array::from_int(0).as_dtype(dtype)?;
        let rounded_down = ops::logical_and(
            ops::ne(&r, &zero_value)?,
            ops::ne(ops::lt(&r, &zero_value)?, ops::lt(a, &zero_value)?)?,
        )?;
        q = ops::add(&q, rounded_down.as_dtype(q.dtype())?)?;
    }
    let all_ones = Array::from_int(-1).as_dtype(q.dtype())?;
    Ok(ops::select(&zero, &all_ones, &q)?)
}

/// The remainder with the dividend's sign (Elixir's `rem/2`, C's `fmod`),
/// which pairs with `quotient` truncating toward zero. MLX's own remainder
/// takes the divisor's sign (Python's `%`). Floats: sign(a) · (|a| mod |b|);
/// integers: MLX's remainder, less `b` where its sign is not `a`'s. For
/// integers, `a rem 0` is `a`, as XLA defines it, rather than a trap (see
/// [`traps`]).
pub fn remainder(a: &Array, b: &Array) -> Result<Array> {
    let dtype = promoted(a, b)?;
    let (zero, b) = if is_integer(dtype) {
        let (zero, trap) = traps(a, b, dtype)?;
        let one = Array::from_int(1).as_dtype(dtype)?;
        (Some(zero), ops::select(&trap, &one, b)?)
    } else {
        (None, b.clone())
    };
    let negative = ops::lt(a, Array::from_int(0))?;
    let r = if is_integer(dtype) {
        // The truncated remainder from MLX's floored one (the sign of `b`):
        // where that is non-zero and its sign differs from `a`'s, take `b`
        // off. (Not through |a|: |INT_MIN| overflows, and -128 rem 3 as s8
        // came out -1 instead of -2.)
        let floored = ops::remainder(a, &b)?;
        let other_sign = ops::logical_and(
            ops::ne(&floored, Array::from_int(0))?,
            ops::ne(ops::lt(&floored, Array::from_int(0))?, &negative)?,
        )?;
        ops::select(&other_sign, ops::subtract(&floored, &b)?, &floored)?
    } else {
        let r = ops::remainder(ops::abs(a)?, ops::abs(&b)?)?;
        // a's sign bit, -0.0's included (1 / -0.0 is -inf): C's fmod
        let zero = ops::eq(a, Array::from_int(0))?;
        let negative_zero = ops::logical_and(
            &zero,
            ops::lt(ops::divide(Array::from_int(1), a)?, Array::from_int(0))?,
        )?;
        let negative = ops::logical_or(&negative, &negative_zero)?;
        ops::select(&negative, ops::negative(&r)?, &r)?
    };
    match zero {
        Some(zero) => Ok(ops::select(&zero, a.as_dtype(r.dtype())?, &r)?),
        None => Ok(r),
    }
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
    let both = promoted(a, b)?;
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

/// MLX's `erf`, with the sign of zero kept: MLX 0.32's CPU `erf` gives −0
/// for +0 (it negates its value wherever x > 0 does not hold).
pub fn erf(a: &Array) -> mlx_rs::error::Result<Array> {
    let e = ops::erf(a)?;
    if !a.dtype().is_float() {
        return Ok(e);
    }
    let zero = ops::eq(a, Array::from_f32(0.0).as_dtype(a.dtype())?)?;
    ops::select(&zero, a, &e)
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

    #[test]
    fn integer_division_by_zero_and_overflow_do_not_trap() {
        let (q, r, q8) = run_blocking(Device::Cpu, || {
            let a = Array::from_slice(&[7i32, -7, i32::MIN, i32::MIN], &[4]);
            let b = Array::from_slice(&[0i32, 0, -1, 2], &[4]);
            let a8 = Array::from_slice(&[5u8], &[1]);
            let b8 = Array::from_slice(&[0u8], &[1]);
            Ok((
                quotient(&a, &b)?.as_slice::<i32>().to_vec(),
                remainder(&a, &b)?.as_slice::<i32>().to_vec(),
                quotient(&a8, &b8)?.as_slice::<u8>().to_vec(),
            ))
        })
        .unwrap();
        // XLA: x / 0 = -1 (all bits set), MIN / -1 = MIN (wraps), x rem 0 = x
        assert_eq!(q, vec![-1, -1, i32::MIN, i32::MIN / 2]);
        assert_eq!(r, vec![7, -7, 0, 0]);
        assert_eq!(q8, vec![255]);
    }

    #[test]
    fn erf_keeps_the_sign_of_zero() {
        let (ours, mlx) = run_blocking(Device::Cpu, || {
            let x = Array::from_slice(&[0.0f32, -0.0, 0.5, -2.0], &[4]);
            Ok((
                erf(&x)?.as_slice::<f32>().to_vec(),
                ops::erf(&x)?.as_slice::<f32>().to_vec(),
            ))
        })
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // erf(+0) is +0, erf(-0) is -0 (MLX's own gives -0 for both)
        assert_eq!(
            bits(&ours[..2]),
            vec![0.0f32.to_bits(), (-0.0f32).to_bits()]
        );
        assert_eq!(mlx[0].to_bits(), (-0.0f32).to_bits());
        // elsewhere MLX's values, bit for bit
        assert_eq!(bits(&ours[2..]), bits(&mlx[2..]));
    }

    #[test]
    fn a_float32_power_two_is_the_square_rounded_once() {
        let mut xs: Vec<f32> = (0..20_000)
            .map(|i| (i as f32 - 10_000.0) * 1.000_123e-2)
            .collect();
        xs.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            1e20,
            1e-30,
        ]);
        xs.extend([
            f32::MIN_POSITIVE,
            3.402_823_5e38,
            16_777_215.0,
            0.999_999_94,
        ]);
        // squares halfway between two float32 values (4097² is 2^24 + 8193),
        // which the C library's powf rounds away from the even neighbour
        xs.extend([4097.0, -4099.0, 5791.0]);
        let given = xs.clone();
        let (squares, wider) = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&given, &[given.len() as i32]);
            let two = Array::from_f32(2.0);
            two.eval()?;
            // a power of shape {1, 1} adds a dimension: MLX's power
            let two_2d = Array::from_slice(&[2.0f32], &[1, 1]);
            two_2d.eval()?;
            Ok((
                power(&x, &two)?.as_slice::<f32>().to_vec(),
                power(&x, &two_2d)?.shape().to_vec(),
            ))
        })
        .unwrap();
        for (x, got) in xs.iter().zip(&squares) {
            // (a float32 product is exact in float64: rounded once here)
            let want = (*x as f64 * *x as f64) as f32;
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{x}² gave {got}, {want} expected"
            );
        }
        assert_eq!(wider, vec![1, xs.len() as i32]);
    }
}
