//! Element-wise operations: unary and binary (with broadcasting).

use mlx_rs::{ops, Array};

use crate::error::Result;

/// Names of the unary ops, for documentation and error messages.
pub const UNARY: &[&str] = &[
    "abs",
    "negate",
    "sign",
    "floor",
    "ceil",
    "round",
    "sqrt",
    "rsqrt",
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erf_inv",
    "sigmoid",
    "square",
    "reciprocal",
    "logical_not",
    "is_nan",
    "is_infinity",
    "is_finite",
    "real",
    "imag",
    "conjugate",
    "degrees",
    "radians",
    "bitwise_not",
    "population_count",
    "count_leading_zeros",
];

/// `op(a)` element-wise.
pub fn unary(op: &str, a: &Array) -> Result<Array> {
    if super::precise::needs_host(op, a.dtype()) {
        return super::precise::unary(op, a);
    }
    let out = match op {
        "abs" => ops::abs(a),
        "negate" => ops::negative(a),
        "sign" => ops::sign(a),
        "floor" => ops::floor(a),
        "ceil" => ops::ceil(a),
        "round" => return round_half_away(a),
        "sqrt" => ops::sqrt(a),
        "rsqrt" => ops::rsqrt(a),
        "exp" => ops::exp(a),
        "expm1" => ops::expm1(a),
        "log" => ops::log(a),
        "log1p" => ops::log1p(a),
        "log2" => ops::log2(a),
        "log10" => ops::log10(a),
        "sin" => ops::sin(a),
        "cos" => ops::cos(a),
        "tan" => ops::tan(a),
        "asin" => ops::asin(a),
        "acos" => ops::acos(a),
        "atan" => ops::atan(a),
        "sinh" => ops::sinh(a),
        "cosh" => ops::cosh(a),
        "tanh" => ops::tanh(a),
        "asinh" => ops::asinh(a),
        "acosh" => ops::acosh(a),
        "atanh" => ops::atanh(a),
        "erf" => ops::erf(a),
        "erf_inv" => ops::erfinv(a),
        "sigmoid" => ops::sigmoid(a),
        "square" => ops::square(a),
        "reciprocal" => ops::reciprocal(a),
        "logical_not" => ops::logical_not(a),
        "is_nan" => ops::is_nan(a),
        "is_infinity" => ops::is_inf(a),
        "is_finite" => a.is_finite(),
        "real" => ops::real(a),
        "imag" => ops::imag(a),
        "conjugate" => return conjugate(a),
        "degrees" => ops::degrees(a),
        "radians" => ops::radians(a),
        "bitwise_not" => return super::bitwise::bitwise_not(a),
        "population_count" => return super::bitwise::population_count(a),
        "count_leading_zeros" => return super::bitwise::count_leading_zeros(a),
        _ => return Err(super::unknown_op("unary op", op, UNARY)),
    };
    Ok(out?)
}

/// The remainder with the dividend's sign (Elixir's `rem/2`, C's `fmod`),
/// which pairs with `quotient` truncating toward zero. MLX's own remainder
/// takes the divisor's sign (Python's `%`); on non-negative operands the two
/// agree, so: sign(a) · (|a| mod |b|).
fn remainder(a: &Array, b: &Array) -> mlx_rs::error::Result<Array> {
    let r = ops::remainder(ops::abs(a)?, ops::abs(b)?)?;
    let negative = ops::lt(a, Array::from_int(0))?;
    ops::select(&negative, ops::negative(&r)?, &r)
}

/// Complex conjugate (negates the imaginary part exactly, zeros included).
fn conjugate(a: &Array) -> Result<Array> {
    // SAFETY: one mlx-c call; `a` is a live array for its duration.
    unsafe {
        super::raw::op("conjugate", |res, s| {
            mlx_sys::mlx_conjugate(res, a.as_ptr(), s)
        })
    }
}

/// Rounds half away from zero (Elixir's `round/1`, Nx's `round`); MLX's own
/// `round` goes half to even.
fn round_half_away(a: &Array) -> Result<Array> {
    if !a.dtype().is_float() {
        return Ok(ops::round(a, None)?);
    }
    let t = a.trunc()?;
    let frac = ops::abs(ops::subtract(a, &t)?)?;
    let half = Array::from_f32(0.5).as_dtype(a.dtype())?;
    let bump = ops::multiply(ops::ge(&frac, &half)?.as_dtype(a.dtype())?, ops::sign(a)?)?;
    Ok(ops::add(&t, &bump)?)
}

/// Names of the binary ops.
pub const BINARY: &[&str] = &[
    "add",
    "subtract",
    "multiply",
    "divide",
    "pow",
    "remainder",
    "quotient",
    "atan2",
    "min",
    "max",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logaddexp",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
];

/// `a op b` element-wise, with broadcasting and MLX's type promotion.
pub fn binary(op: &str, a: &Array, b: &Array) -> Result<Array> {
    if op == "logaddexp" {
        let both = ops::add(
            Array::from_int(0).as_dtype(a.dtype())?,
            Array::from_int(0).as_dtype(b.dtype())?,
        )?
        .dtype();
        if super::precise::needs_host(op, both) {
            return super::precise::logaddexp(&a.as_dtype(both)?, &b.as_dtype(both)?);
        }
    }
    let out = match op {
        "add" => ops::add(a, b),
        "subtract" => ops::subtract(a, b),
        "multiply" => ops::multiply(a, b),
        "divide" => ops::divide(a, b),
        "pow" => ops::power(a, b),
        "remainder" => remainder(a, b),
        "quotient" => ops::floor_divide(a, b),
        "atan2" => ops::atan2(a, b),
        "min" => ops::minimum(a, b),
        "max" => ops::maximum(a, b),
        "equal" => ops::eq(a, b),
        "not_equal" => ops::ne(a, b),
        "less" => ops::lt(a, b),
        "less_equal" => ops::le(a, b),
        "greater" => ops::gt(a, b),
        "greater_equal" => ops::ge(a, b),
        "logical_and" => ops::logical_and(a, b),
        "logical_or" => ops::logical_or(a, b),
        "logical_xor" => ops::ne(
            ops::ne(a, Array::from_int(0))?,
            ops::ne(b, Array::from_int(0))?,
        ),
        "logaddexp" => ops::logaddexp(a, b),
        op if super::bitwise::BINARY.contains(&op) => return super::bitwise::binary(op, a, b),
        _ => return Err(super::unknown_op("binary op", op, BINARY)),
    };
    Ok(out?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::error::Error;
    use crate::worker::run_blocking;

    #[test]
    fn every_listed_op_is_implemented() {
        run_blocking(Device::Cpu, || {
            let float = Array::from_slice(&[0.5f32, 0.25], &[2]);
            let int = Array::from_slice(&[5i32, 3], &[2]);
            let input = |op: &str| {
                let bitwise = op.contains("bit") || op.contains("shift") || op.contains("count");
                if bitwise {
                    int.clone()
                } else {
                    float.clone()
                }
            };
            for op in UNARY {
                unary(op, &input(op)).map_err(|e| Error::Internal(format!("{op}: {e}")))?;
            }
            for op in BINARY {
                let a = input(op);
                binary(op, &a, &a).map_err(|e| Error::Internal(format!("{op}: {e}")))?;
            }
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn unknown_ops_are_named() {
        let a = Array::from_int(1);
        let e = unary("frobnicate", &a).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("op: unknown unary op :frobnicate; known: abs"));
    }
}
