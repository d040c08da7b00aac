//! The op table: every operation ExMLX runs on tensors, declared once.
//!
//! Each entry gives an op's name, its tensor inputs, its parameters (with the
//! defaults ExMLX's Elixir API gives them), the type rule of its result(s),
//! flags, and the MLX call. From it come [`Op`] (the ops, by name), the NIF
//! that runs any op (native/ex_mlx/src/op.rs: one NIF, deferred mode
//! included), the op list Elixir reads (`ExMLX.Native.op_table/0`), and the
//! public functions of the `ExMLX` module, which `lib/ex_mlx/op_table.ex`
//! generates from this file's text at compile time: the `///` lines of an
//! entry are that function's documentation. docs/architecture.md says how
//! to add an op.
//!
//! An entry reads
//!
//! ```text
//! /// Elixir documentation, with a runnable example.
//! name(input, ...; param: Kind = "default", ...) -> rule [flags] => body;
//! ```
//!
//! * inputs: tensors, bound by name to `&Array`; `..name` binds a list
//!   (`&[Array]`); none for ops that create a tensor;
//! * parameters: `name: Kind` (a trailing `_` in a name that is a Rust
//!   keyword, `type_`, is not part of it; see [`ParamKind`], whose Rust types are in
//!   [`super::params::kinds`]); `= "x"` makes it an option of the Elixir
//!   function with default `x` (an Elixir expression), `#[positional]` before
//!   it keeps it a positional argument with that default; a parameter named
//!   `device` says where an op without inputs runs;
//! * rule: the result's type ([`DtypeRule`]), or `[rule, ...]` for several
//!   results (returned as a tuple);
//! * flags: `[view]` (the result shares its input's buffer, so allocates
//!   nothing to check against the memory limit), `[cpu]` (MLX runs it on the
//!   CPU only: on a GPU's worker it runs on that thread's CPU stream, see
//!   [`Op::apply`]), `[nx]`
//!   (for ExMLX.Backend and ExMLX.FFT only: no function of `ExMLX`),
//!   `[custom]` (the `ExMLX` function is written by hand in lib/ex_mlx.ex,
//!   its arguments being arranged otherwise);
//! * body: an expression returning `Result<Array>` (MLX's or ExMLX's error)
//!   or a `Result` of a tuple of arrays.

use mlx_rs::{ops, Array};

use super::params::{all_axes, dim, ones, FromParam, Param, ParamKind};
use super::{
    bitwise, conv, convert, creation, cumulative, elementwise, fast, fft, indexing, linalg,
    nx_linalg, precise, quantization, reduce, shape, sort, window,
};
use crate::error::{Error, Result};

mod queries;
mod syntax;
#[cfg(test)]
mod tests;

use syntax::{check_arity, missing, op_table};
pub use syntax::{DtypeRule, Inputs, IntoOutputs, Outputs, ParamSpec};

op_table! {
    // -------------------------------------------------------------------------
    // Element-wise, one input
    // -------------------------------------------------------------------------
    unary {
        /// Absolute value (the modulus of a complex number, as a float).
        ///
        ///     iex> ExMLX.full(-0.75, {:f, 32}, {2}) |> ExMLX.abs() |> ExMLX.to_list()
        ///     [0.75, 0.75]
        abs(tensor) -> real => ops::abs(tensor);
        /// `-x`.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.negate() |> ExMLX.to_list()
        ///     [-0.75, -0.75]
        negate(tensor) -> same => ops::negative(tensor);
        /// -1, 0 or 1 by the sign of `x`.
        ///
        ///     iex> ExMLX.full(-0.75, {:f, 32}, {2}) |> ExMLX.sign() |> ExMLX.to_list()
        ///     [-1.0, -1.0]
        sign(tensor) -> same => ops::sign(tensor);
        /// The largest integer not above `x`.
        ///
        ///     iex> ExMLX.full(-0.75, {:f, 32}, {2}) |> ExMLX.floor() |> ExMLX.to_list()
        ///     [-1.0, -1.0]
        floor(tensor) -> same => ops::floor(tensor);
        /// The smallest integer not below `x`.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.ceil() |> ExMLX.to_list()
        ///     [1.0, 1.0]
        ceil(tensor) -> same => ops::ceil(tensor);
        /// The nearest integer, halves away from zero (Elixir's `round/1`).
        ///
        ///     iex> ExMLX.full(-2.5, {:f, 32}, {2}) |> ExMLX.round() |> ExMLX.to_list()
        ///     [-3.0, -3.0]
        round(tensor) -> same => elementwise::round_half_away(tensor);
        /// Square root.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.sqrt() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.866, 0.866]
        sqrt(tensor) -> float => ops::sqrt(tensor);
        /// `1 / sqrt(x)`.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.rsqrt() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [1.1547, 1.1547]
        rsqrt(tensor) -> float => ops::rsqrt(tensor);
        /// Cube root (for every float type, computed through f64).
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.cbrt() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.9086, 0.9086]
        cbrt(tensor) -> float => precise::on_host("cbrt", tensor, f64::cbrt);
        /// `e^x`.
        ///
        /// On the CPU a float32 tensor of 4,096 values or more is computed in
        /// vectors, in float64 rounded once (within one unit in the last place;
        /// MLX's own CPU kernel is a few units off in places).
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.exp() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [2.117, 2.117]
        exp(tensor) -> float => precise::f64_on_host("exp", tensor, f64::exp, |a| ops::exp(a));
        /// `e^x - 1`, accurate near 0.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.expm1() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [1.117, 1.117]
        expm1(tensor) -> float => precise::f64_on_host("expm1", tensor, f64::exp_m1, |a| ops::expm1(a));
        /// Natural logarithm.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.log() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [-0.2877, -0.2877]
        log(tensor) -> float => ops::log(tensor);
        /// `log(1 + x)`, accurate near 0.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.log1p() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.5596, 0.5596]
        log1p(tensor) -> float => precise::f64_on_host("log1p", tensor, f64::ln_1p, |a| ops::log1p(a));
        /// Base-2 logarithm.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.log2() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [-0.415, -0.415]
        log2(tensor) -> float => ops::log2(tensor);
        /// Base-10 logarithm.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.log10() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [-0.1249, -0.1249]
        log10(tensor) -> float => ops::log10(tensor);
        /// Sine.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.sin() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.6816, 0.6816]
        sin(tensor) -> float => precise::f64_on_host("sin", tensor, f64::sin, |a| ops::sin(a));
        /// Cosine.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.cos() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.7317, 0.7317]
        cos(tensor) -> float => precise::f64_on_host("cos", tensor, f64::cos, |a| ops::cos(a));
        /// Tangent.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.tan() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.9316, 0.9316]
        tan(tensor) -> float => ops::tan(tensor);
        /// Arcsine.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.asin() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.8481, 0.8481]
        asin(tensor) -> float => ops::asin(tensor);
        /// Arccosine.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.acos() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.7227, 0.7227]
        acos(tensor) -> float => ops::acos(tensor);
        /// Arctangent.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.atan() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.6435, 0.6435]
        atan(tensor) -> float => ops::atan(tensor);
        /// Hyperbolic sine.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.sinh() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.8223, 0.8223]
        sinh(tensor) -> float => ops::sinh(tensor);
        /// Hyperbolic cosine.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.cosh() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [1.2947, 1.2947]
        cosh(tensor) -> float => ops::cosh(tensor);
        /// Hyperbolic tangent.
        ///
        /// On the CPU a float32 tensor of 4,096 values or more is computed in
        /// vectors, in float64 rounded once (within one unit in the last place;
        /// MLX's own CPU kernel is a few units off in places).
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.tanh() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.6351, 0.6351]
        tanh(tensor) -> float => Ok::<Array, Error>(ops::tanh(tensor)?);
        /// Inverse hyperbolic sine.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.asinh() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.6931, 0.6931]
        asinh(tensor) -> float => ops::asinh(tensor);
        /// Inverse hyperbolic cosine.
        ///
        ///     iex> ExMLX.full(1.5, {:f, 32}, {2}) |> ExMLX.acosh() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.9624, 0.9624]
        acosh(tensor) -> float => ops::acosh(tensor);
        /// Inverse hyperbolic tangent.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.atanh() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.973, 0.973]
        atanh(tensor) -> float => ops::atanh(tensor);
        /// The error function.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.erf() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.7112, 0.7112]
        erf(tensor) -> float => precise::f64_on_host("erf", tensor, precise::erf, elementwise::erf);
        /// The complementary error function, `1 - erf(x)` (for every float
        /// type, computed through f64).
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.erfc() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.2888, 0.2888]
        erfc(tensor) -> float => precise::on_host("erfc", tensor, precise::erfc);
        /// The inverse of `erf/1`.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.erf_inv() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.8134, 0.8134]
        erf_inv(tensor) -> float => precise::f64_on_host("erf_inv", tensor, precise::erf_inv, |a| ops::erfinv(a));
        /// `1 / (1 + e^-x)`.
        ///
        /// On the CPU a float32 tensor of 4,096 values or more is computed in
        /// vectors, in float64 rounded once (within one unit in the last place;
        /// MLX's own CPU kernel is a few units off in places).
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.sigmoid() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.6792, 0.6792]
        sigmoid(tensor) -> float => precise::f64_on_host("sigmoid", tensor, precise::sigmoid, |a| ops::sigmoid(a));
        /// `x * x`.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.square() |> ExMLX.to_list()
        ///     [0.5625, 0.5625]
        square(tensor) -> same => ops::square(tensor);
        /// `1 / x`.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.reciprocal() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [1.3333, 1.3333]
        reciprocal(tensor) -> float => ops::reciprocal(tensor);
        /// Radians to degrees.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.degrees() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [42.9718, 42.9718]
        degrees(tensor) -> float => ops::degrees(tensor);
        /// Degrees to radians.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.radians() |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.0131, 0.0131]
        radians(tensor) -> float => ops::radians(tensor);
        /// `true` where `x` is zero.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.logical_not() |> ExMLX.to_list()
        ///     [false, false]
        logical_not(tensor) -> bool => ops::logical_not(tensor);
        /// `true` where `x` is NaN.
        ///
        ///     iex> ExMLX.full(:nan, {:f, 32}, {2}) |> ExMLX.is_nan() |> ExMLX.to_list()
        ///     [true, true]
        is_nan(tensor) -> bool => ops::is_nan(tensor);
        /// `true` where `x` is an infinity.
        ///
        ///     iex> ExMLX.full(:neg_infinity, {:f, 32}, {2}) |> ExMLX.is_infinity() |> ExMLX.to_list()
        ///     [true, true]
        is_infinity(tensor) -> bool => ops::is_inf(tensor);
        /// `true` where `x` is neither NaN nor an infinity.
        ///
        ///     iex> ExMLX.full(0.75, {:f, 32}, {2}) |> ExMLX.is_finite() |> ExMLX.to_list()
        ///     [true, true]
        is_finite(tensor) -> bool => tensor.is_finite();
        /// The real part (a real tensor is its own real part).
        ///
        ///     iex> ExMLX.full({0.75, -2.0}, {:c, 64}, {2}) |> ExMLX.real() |> ExMLX.to_list()
        ///     [0.75, 0.75]
        real(tensor) -> real => ops::real(tensor);
        /// The imaginary part (zero for a real tensor).
        ///
        ///     iex> ExMLX.full({0.75, -2.0}, {:c, 64}, {2}) |> ExMLX.imag() |> ExMLX.to_list()
        ///     [-2.0, -2.0]
        imag(tensor) -> real => ops::imag(tensor);
        /// The complex conjugate (a real tensor is its own).
        ///
        ///     iex> ExMLX.full({0.75, -2.0}, {:c, 64}, {2}) |> ExMLX.conjugate() |> ExMLX.to_list()
        ///     [{0.75, 2.0}, {0.75, 2.0}]
        conjugate(tensor) -> same => elementwise::conjugate(tensor);
        /// Bitwise complement (integer types).
        ///
        ///     iex> ExMLX.full(5, {:u, 8}, {2}) |> ExMLX.bitwise_not() |> ExMLX.to_list()
        ///     [250, 250]
        bitwise_not(tensor) -> same => bitwise::bitwise_not(tensor);
        /// The number of one bits (integer types).
        ///
        ///     iex> ExMLX.full(5, {:u, 8}, {2}) |> ExMLX.population_count() |> ExMLX.to_list()
        ///     [2, 2]
        population_count(tensor) -> same => bitwise::population_count(tensor);
        /// The number of zero bits above the highest one bit (integer types).
        ///
        ///     iex> ExMLX.full(5, {:u, 8}, {2}) |> ExMLX.count_leading_zeros() |> ExMLX.to_list()
        ///     [5, 5]
        count_leading_zeros(tensor) -> same => bitwise::count_leading_zeros(tensor);
    }

    // -------------------------------------------------------------------------
    // Element-wise, two inputs (broadcast together)
    // -------------------------------------------------------------------------
    binary {
        /// `a + b`.
        ///
        ///     iex> ExMLX.add(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [5.0, 5.0]
        add(a, b) -> promote => ops::add(a, b);
        /// `a - b`.
        ///
        ///     iex> ExMLX.subtract(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [1.0, 1.0]
        subtract(a, b) -> promote => ops::subtract(a, b);
        /// `a * b`.
        ///
        ///     iex> ExMLX.multiply(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [6.0, 6.0]
        multiply(a, b) -> promote => ops::multiply(a, b);
        /// `a / b` (integers give floats).
        ///
        ///     iex> ExMLX.divide(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [1.5, 1.5]
        divide(a, b) -> promote => ops::divide(a, b);
        /// `a` to the power `b`.
        ///
        ///     iex> ExMLX.pow(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [9.0, 9.0]
        pow(a, b) -> promote => elementwise::power(a, b);
        /// The remainder of `a / b` with the sign of `a` (Elixir's `rem/2`).
        /// For integers, `x rem 0` is `x` (as XLA defines it; the CPU's
        /// division would trap).
        ///
        ///     iex> ExMLX.remainder(ExMLX.full(-7, {:s, 32}, {2}), ExMLX.full(2, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [-1, -1]
        remainder(a, b) -> promote => elementwise::remainder(a, b);
        /// `a / b` rounded toward zero. For integers, `x / 0` is -1 (all bits
        /// set) and the signed minimum divided by -1 is the minimum, as XLA
        /// defines them (the CPU's division would trap).
        ///
        ///     iex> ExMLX.quotient(ExMLX.full(7, {:s, 32}, {2}), ExMLX.full(2, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [3, 3]
        quotient(a, b) -> promote => elementwise::quotient(a, b);
        /// The angle of the point `(b, a)`.
        ///
        ///     iex> ExMLX.atan2(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.9828, 0.9828]
        atan2(a, b) -> promote => ops::atan2(a, b);
        /// The smaller of `a` and `b`.
        ///
        ///     iex> ExMLX.min(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [2.0, 2.0]
        min(a, b) -> promote => ops::minimum(a, b);
        /// The larger of `a` and `b`.
        ///
        ///     iex> ExMLX.max(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [3.0, 3.0]
        max(a, b) -> promote => ops::maximum(a, b);
        /// `a == b`.
        ///
        ///     iex> ExMLX.equal(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [false, false]
        equal(a, b) -> bool => ops::eq(a, b);
        /// `a != b`.
        ///
        ///     iex> ExMLX.not_equal(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [true, true]
        not_equal(a, b) -> bool => ops::ne(a, b);
        /// `a < b`.
        ///
        ///     iex> ExMLX.less(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [false, false]
        less(a, b) -> bool => ops::lt(a, b);
        /// `a <= b`.
        ///
        ///     iex> ExMLX.less_equal(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [false, false]
        less_equal(a, b) -> bool => ops::le(a, b);
        /// `a > b`.
        ///
        ///     iex> ExMLX.greater(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [true, true]
        greater(a, b) -> bool => ops::gt(a, b);
        /// `a >= b`.
        ///
        ///     iex> ExMLX.greater_equal(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [true, true]
        greater_equal(a, b) -> bool => ops::ge(a, b);
        /// Both non-zero.
        ///
        ///     iex> ExMLX.logical_and(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(0.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [false, false]
        logical_and(a, b) -> bool => ops::logical_and(a, b);
        /// Either non-zero.
        ///
        ///     iex> ExMLX.logical_or(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(0.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [true, true]
        logical_or(a, b) -> bool => ops::logical_or(a, b);
        /// Exactly one non-zero.
        ///
        ///     iex> ExMLX.logical_xor(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list()
        ///     [false, false]
        logical_xor(a, b) -> bool => elementwise::logical_xor(a, b);
        /// `log(e^a + e^b)`, without overflow.
        ///
        ///     iex> ExMLX.logaddexp(ExMLX.full(3.0, {:f, 32}, {2}), ExMLX.full(2.0, {:f, 32}, {})) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [3.3133, 3.3133]
        logaddexp(a, b) -> promote => elementwise::logaddexp(a, b);
        /// Bitwise and (integer types).
        ///
        ///     iex> ExMLX.bitwise_and(ExMLX.iota({:s, 32}, {3}), ExMLX.full(2, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [0, 0, 2]
        bitwise_and(a, b) -> promote => bitwise::binary("bitwise_and", mlx_sys::mlx_bitwise_and, a, b);
        /// Bitwise or (integer types).
        ///
        ///     iex> ExMLX.bitwise_or(ExMLX.iota({:s, 32}, {3}), ExMLX.full(2, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [2, 3, 2]
        bitwise_or(a, b) -> promote => bitwise::binary("bitwise_or", mlx_sys::mlx_bitwise_or, a, b);
        /// Bitwise exclusive or (integer types).
        ///
        ///     iex> ExMLX.bitwise_xor(ExMLX.iota({:s, 32}, {3}), ExMLX.full(2, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [2, 3, 0]
        bitwise_xor(a, b) -> promote => bitwise::binary("bitwise_xor", mlx_sys::mlx_bitwise_xor, a, b);
        /// `a` shifted left by `b` bits (integer types).
        ///
        ///     iex> ExMLX.left_shift(ExMLX.iota({:s, 32}, {3}), ExMLX.full(2, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [0, 4, 8]
        left_shift(a, b) -> promote => bitwise::shift("left_shift", mlx_sys::mlx_left_shift, true, a, b);
        /// `a` shifted right by `b` bits (integer types; arithmetic for signed ones).
        ///
        ///     iex> ExMLX.right_shift(ExMLX.full(-8, {:s, 32}, {3}), ExMLX.full(2, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [-2, -2, -2]
        right_shift(a, b) -> promote => bitwise::shift("right_shift", mlx_sys::mlx_right_shift, false, a, b);
    }

    // -------------------------------------------------------------------------
    // Creation and conversion
    // -------------------------------------------------------------------------
    creation {
        /// A tensor of `shape` filled with `value`: an integer, a float, `:nan`,
        /// `:infinity`, `:neg_infinity`, or `{re, im}` for `{:c, 64}`.
        ///
        ///     iex> ExMLX.full(7, {:s, 16}, {2}) |> ExMLX.to_binary()
        ///     <<7::16-little, 7::16-little>>
        ///
        /// An integer that does not fit the type is an error, not a wrap-around:
        ///
        ///     iex> ExMLX.full(300, {:u, 8}, {1})
        ///     ** (ExMLX.Error) value: 300 does not fit in {:u, 8}
        full(; value: Scalar, type_: Type, shape: Shape, device: Device = "ExMLX.default_device()") -> typed => creation::full(value, type_, &shape);
        /// Counts `0, 1, 2, ...` along `:axis` of `shape`, or over the whole
        /// tensor row-major when no axis is given (Nx's `iota`).
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 2}) |> ExMLX.to_list()
        ///     [0, 1, 2, 3]
        ///     iex> ExMLX.iota({:s, 32}, {2, 2}, axis: 0) |> ExMLX.to_list()
        ///     [0, 0, 1, 1]
        iota(; type_: Type, shape: Shape, axis: OptInt = "nil", device: Device = "ExMLX.default_device()") -> typed => creation::iota(type_, &shape, axis);
        /// An `n × m` matrix with ones on the diagonal (`m` defaults to `n`).
        ///
        ///     iex> ExMLX.eye(2, {:u, 8}) |> ExMLX.to_binary()
        ///     <<1, 0, 0, 1>>
        eye(; n: Int, type_: Type, m: OptInt = "nil", device: Device = "ExMLX.default_device()") -> typed => creation::eye(dim("n", n)?, dim("m", m.unwrap_or(n))?, type_);
        /// Converts the elements to `type` (floats to integers truncate toward zero).
        ///
        ///     iex> ExMLX.full(2.75, {:f, 32}, {}) |> ExMLX.as_type({:s, 32}) |> ExMLX.item()
        ///     2
        as_type(tensor; type_: Type) -> typed => convert::as_type(tensor, type_);
        /// Reinterprets the bytes of each element as `type`, which must have the same size.
        ///
        ///     iex> ExMLX.full(1.0, {:f, 32}, {}) |> ExMLX.bitcast({:u, 32}) |> ExMLX.item()
        ///     0x3F800000
        bitcast(tensor; type_: Type) -> typed [view] => convert::bitcast(tensor, type_);
    }

    // -------------------------------------------------------------------------
    // Reductions
    // -------------------------------------------------------------------------
    reduce {
        /// The sum over `:axes` (all axes by default); `keep_dims: true` keeps
        /// the reduced axes with size 1.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.sum(axes: [1]) |> ExMLX.to_list()
        ///     [3, 12]
        sum(tensor; axes: OptInts = "nil", keep_dims: Bool = "false") -> accumulate => reduce::sum(tensor, axes, keep_dims);
        /// The product over `:axes` (all axes by default); `keep_dims: true`
        /// keeps the reduced axes with size 1.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.product(axes: [1]) |> ExMLX.to_list()
        ///     [0, 60]
        product(tensor; axes: OptInts = "nil", keep_dims: Bool = "false") -> accumulate => reduce::in_f32_for_halves(tensor, |t| reduce::over(t, axes, keep_dims, |a, axes, keep| a.prod_axes(axes, keep)));
        /// The smallest element over `:axes` (all axes by default);
        /// `keep_dims: true` keeps the reduced axes with size 1.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.reduce_min(axes: [1]) |> ExMLX.to_list()
        ///     [0, 3]
        reduce_min(tensor; axes: OptInts = "nil", keep_dims: Bool = "false") -> same => reduce::extreme("min", tensor, axes, keep_dims, |a, axes, keep| a.min_axes(axes, keep));
        /// The largest element over `:axes` (all axes by default);
        /// `keep_dims: true` keeps the reduced axes with size 1.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.reduce_max(axes: [1]) |> ExMLX.to_list()
        ///     [2, 5]
        reduce_max(tensor; axes: OptInts = "nil", keep_dims: Bool = "false") -> same => reduce::extreme("max", tensor, axes, keep_dims, |a, axes, keep| a.max_axes(axes, keep));
        /// Whether every element over `:axes` (all axes by default) is non-zero;
        /// `keep_dims: true` keeps the reduced axes with size 1.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.all(axes: [1]) |> ExMLX.to_list()
        ///     [false, true]
        all(tensor; axes: OptInts = "nil", keep_dims: Bool = "false") -> bool => reduce::over(tensor, axes, keep_dims, |a, axes, keep| a.all_axes(axes, keep));
        /// Whether any element over `:axes` (all axes by default) is non-zero;
        /// `keep_dims: true` keeps the reduced axes with size 1.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.any(axes: [1]) |> ExMLX.to_list()
        ///     [true, true]
        any(tensor; axes: OptInts = "nil", keep_dims: Bool = "false") -> bool => reduce::over(tensor, axes, keep_dims, |a, axes, keep| a.any_axes(axes, keep));
        /// The mean over `:axes` (all axes by default); `keep_dims: true` keeps
        /// the reduced axes with size 1.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.mean(axes: [1]) |> ExMLX.to_list()
        ///     [1.0, 4.0]
        mean(tensor; axes: OptInts = "nil", keep_dims: Bool = "false") -> float => reduce::mean(tensor, axes, keep_dims);
        /// Index of the largest element along `:axis` (of the flattened tensor
        /// by default); ties go to the lowest index.
        ///
        ///     iex> ExMLX.from_binary(<<1, 9, 9, 2>>, {:u, 8}, {4}) |> ExMLX.argmax() |> ExMLX.item()
        ///     1
        argmax(tensor; axis: OptInt = "nil", keep_dims: Bool = "false") -> index => reduce::arg("argmax", tensor, axis, keep_dims, |a, axis, keep| ops::indexing::argmax_axis(a, axis, keep));
        /// Index of the smallest element along `:axis` (of the flattened tensor
        /// by default); ties go to the lowest index.
        ///
        ///     iex> ExMLX.from_binary(<<5, 1, 1, 2>>, {:u, 8}, {4}) |> ExMLX.argmin() |> ExMLX.item()
        ///     1
        argmin(tensor; axis: OptInt = "nil", keep_dims: Bool = "false") -> index => reduce::arg("argmin", tensor, axis, keep_dims, |a, axis, keep| ops::indexing::argmin_axis(a, axis, keep));
        /// `window_sum` over windows of `window` (a tuple or list, one size
        /// per axis). Options, one entry per axis: `:strides` (1), `:padding`
        /// (`{low, high}`, padded with the reduction's identity),
        /// `:window_dilations` (1).
        ///
        ///     iex> ExMLX.iota({:s, 32}, {5}) |> ExMLX.window_sum({2}) |> ExMLX.to_list()
        ///     [1, 3, 5, 7]
        window_sum(tensor; window: Ints, strides: OptInts = "nil", padding: OptPairs = "nil", window_dilations: OptInts = "nil") -> same => reduce::in_f32_for_halves(tensor, |t| window::window(window::Reduction::Sum, t, &window, strides, padding, window_dilations));
        /// `window_product` over windows of `window`; options as in `window_sum/3`.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {5}) |> ExMLX.window_product({2}) |> ExMLX.to_list()
        ///     [0, 2, 6, 12]
        window_product(tensor; window: Ints, strides: OptInts = "nil", padding: OptPairs = "nil", window_dilations: OptInts = "nil") -> same => reduce::in_f32_for_halves(tensor, |t| window::window(window::Reduction::Product, t, &window, strides, padding, window_dilations));
        /// `window_max` over windows of `window`; options as in `window_sum/3`.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {5}) |> ExMLX.window_max({2}) |> ExMLX.to_list()
        ///     [1, 2, 3, 4]
        window_max(tensor; window: Ints, strides: OptInts = "nil", padding: OptPairs = "nil", window_dilations: OptInts = "nil") -> same => window::window(window::Reduction::Max, tensor, &window, strides, padding, window_dilations);
        /// `window_min` over windows of `window`; options as in `window_sum/3`.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {5}) |> ExMLX.window_min({2}) |> ExMLX.to_list()
        ///     [0, 1, 2, 3]
        window_min(tensor; window: Ints, strides: OptInts = "nil", padding: OptPairs = "nil", window_dilations: OptInts = "nil") -> same => window::window(window::Reduction::Min, tensor, &window, strides, padding, window_dilations);
        /// Running sum along `:axis` (default 0); `reverse: true` runs from the end.
        ///
        ///     iex> ExMLX.from_binary(<<1, 3, 2>>, {:u, 8}, {3}) |> ExMLX.cumulative_sum() |> ExMLX.to_list()
        ///     [1, 4, 6]
        cumulative_sum(tensor; axis: Int = "0", reverse: Bool = "false") -> same => reduce::in_f32_for_halves(tensor, |t| cumulative::along(t, axis, reverse, |a, axis, rev| a.cumsum(axis, rev, true)));
        /// Running product along `:axis` (default 0); `reverse: true` runs from the end.
        ///
        ///     iex> ExMLX.from_binary(<<1, 3, 2>>, {:u, 8}, {3}) |> ExMLX.cumulative_product() |> ExMLX.to_list()
        ///     [1, 3, 6]
        cumulative_product(tensor; axis: Int = "0", reverse: Bool = "false") -> same => reduce::in_f32_for_halves(tensor, |t| cumulative::along(t, axis, reverse, |a, axis, rev| a.cumprod(axis, rev, true)));
        /// Running minimum along `:axis` (default 0); `reverse: true` runs from the end.
        ///
        ///     iex> ExMLX.from_binary(<<1, 3, 2>>, {:u, 8}, {3}) |> ExMLX.cumulative_min() |> ExMLX.to_list()
        ///     [1, 1, 1]
        cumulative_min(tensor; axis: Int = "0", reverse: Bool = "false") -> same => cumulative::along(tensor, axis, reverse, |a, axis, rev| a.cummin(axis, rev, true));
        /// Running maximum along `:axis` (default 0); `reverse: true` runs from the end.
        ///
        ///     iex> ExMLX.from_binary(<<1, 3, 2>>, {:u, 8}, {3}) |> ExMLX.cumulative_max() |> ExMLX.to_list()
        ///     [1, 3, 3]
        cumulative_max(tensor; axis: Int = "0", reverse: Bool = "false") -> same => cumulative::along(tensor, axis, reverse, |a, axis, rev| a.cummax(axis, rev, true));
    }

    // -------------------------------------------------------------------------
    // Shape
    // -------------------------------------------------------------------------
    shape {
        /// The same elements in a new shape with as many elements.
        ///
        ///     iex> ExMLX.iota({:u, 8}, {6}) |> ExMLX.reshape({2, 3}) |> ExMLX.shape()
        ///     {2, 3}
        reshape(tensor; shape: Shape) -> same [view] => shape::reshape(tensor, &shape);
        /// Permutes the axes (reverses them by default).
        ///
        ///     iex> ExMLX.iota({:u, 8}, {2, 3}) |> ExMLX.transpose() |> ExMLX.to_list()
        ///     [0, 3, 1, 4, 2, 5]
        transpose(tensor; #[positional] axes: OptInts = "nil") -> same [view] => shape::transpose(tensor, &axes.unwrap_or_else(|| all_axes(tensor.ndim()).into_iter().rev().collect()));
        /// Broadcasts to `shape` (NumPy rules: trailing axes match or are 1).
        ///
        ///     iex> ExMLX.full(1, {:u, 8}, {3}) |> ExMLX.broadcast_to({2, 3}) |> ExMLX.to_list()
        ///     [1, 1, 1, 1, 1, 1]
        broadcast_to(tensor; shape: Shape) -> same [view] => shape::broadcast_to(tensor, &shape);
        /// Removes size-1 axes (all of them, or those in `axes`).
        ///
        ///     iex> ExMLX.full(1, {:u, 8}, {1, 3, 1}) |> ExMLX.squeeze() |> ExMLX.shape()
        ///     {3}
        squeeze(tensor; #[positional] axes: OptInts = "nil") -> same [view] => shape::squeeze(tensor, axes.as_deref());
        /// Inserts size-1 axes at `axes` (positions in the result).
        ///
        ///     iex> ExMLX.full(1, {:u, 8}, {3}) |> ExMLX.expand_dims([0, 2]) |> ExMLX.shape()
        ///     {1, 3, 1}
        expand_dims(tensor; axes: Ints) -> same [view] => shape::expand_dims(tensor, &axes);
        /// Reverses the elements along `axes`.
        ///
        ///     iex> ExMLX.iota({:u, 8}, {3}) |> ExMLX.flip([0]) |> ExMLX.to_list()
        ///     [2, 1, 0]
        flip(tensor; axes: Ints) -> same => shape::flip(tensor, &axes);
        /// Elements `starts[i]..stops[i]-1` of each axis, every `strides[i]`-th
        /// (default 1): a view into the tensor.
        ///
        ///     iex> ExMLX.iota({:u, 8}, {10}) |> ExMLX.slice([1], [8], [3]) |> ExMLX.to_list()
        ///     [1, 4, 7]
        slice(tensor; starts: Ints, stops: Ints, #[positional] strides: OptInts = "nil") -> same [view] => shape::slice(tensor, &starts, &stops, &strides.unwrap_or_else(|| ones(starts.len())));
        /// The tensor's elements in a buffer of their own, in row-major
        /// order: a copy of a strided view (some columns of a matrix, a
        /// transpose), the tensor itself when it is contiguous already.
        ///
        ///     iex> ExMLX.iota({:u, 8}, {2, 3}) |> ExMLX.transpose() |> ExMLX.contiguous() |> ExMLX.to_list()
        ///     [0, 3, 1, 4, 2, 5]
        contiguous(tensor) -> same => shape::contiguous(tensor);
        /// The lower triangle of the last two axes: the elements on and below
        /// diagonal `k` (0 the main one, positive above it, negative below),
        /// zeros elsewhere. Rank 2 or more.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {3, 3}) |> ExMLX.tril() |> ExMLX.to_list()
        ///     [0, 0, 0, 3, 4, 0, 6, 7, 8]
        tril(tensor; k: Int = "0") -> same => ops::tril(tensor, i32::try_from(k).map_err(|_| Error::arg("k", format!("{k} is out of range")))?);
        /// The upper triangle of the last two axes: the elements on and above
        /// diagonal `k` (0 the main one, positive above it, negative below),
        /// zeros elsewhere. Rank 2 or more.
        ///
        ///     iex> ExMLX.iota({:s, 32}, {3, 3}) |> ExMLX.triu(k: 1) |> ExMLX.to_list()
        ///     [0, 1, 2, 0, 0, 5, 0, 0, 0]
        triu(tensor; k: Int = "0") -> same => ops::triu(tensor, i32::try_from(k).map_err(|_| Error::arg("k", format!("{k} is out of range")))?);
        /// Joins tensors along an existing axis.
        ///
        ///     iex> a = ExMLX.iota({:u, 8}, {2})
        ///     iex> ExMLX.concatenate([a, a], 0) |> ExMLX.to_list()
        ///     [0, 1, 0, 1]
        concatenate(..tensors; #[positional] axis: Int = "0") -> promote => shape::concatenate(tensors, axis);
        /// Joins tensors of one shape along a new axis.
        ///
        ///     iex> a = ExMLX.iota({:u, 8}, {2})
        ///     iex> ExMLX.stack([a, a], 1) |> ExMLX.shape()
        ///     {2, 2}
        stack(..tensors; #[positional] axis: Int = "0") -> promote => shape::stack(tensors, axis);
        /// `on_true` where `pred` is non-zero, else `on_false` (broadcasting all three).
        ///
        ///     iex> pred = ExMLX.from_binary(<<1, 0>>, {:u, 8}, {2})
        ///     iex> ExMLX.select(pred, ExMLX.full(1, {:s, 8}, {2}), ExMLX.full(-1, {:s, 8}, {2})) |> ExMLX.to_list()
        ///     [1, -1]
        select(pred, on_true, on_false) -> promote => shape::select(pred, on_true, on_false);
        /// Clamps every element into `[min, max]`.
        ///
        ///     iex> t = ExMLX.iota({:s, 32}, {5})
        ///     iex> ExMLX.clip(t, ExMLX.full(1, {:s, 32}, {}), ExMLX.full(3, {:s, 32}, {})) |> ExMLX.to_list()
        ///     [1, 1, 2, 3, 3]
        clip(tensor, min, max) -> promote => shape::clip(tensor, min, max);
        /// Pads each axis with `{low, high, interior}` copies of `value`
        /// (`ExMLX.pad/3` documents it).
        pad(tensor, value; widths: PadConfig) -> same [custom] => shape::pad_general(tensor, &widths, value);
        /// A block of `lengths` starting at `starts` (an integer tensor, one
        /// start per axis), clamped so it fits, as Nx does. `ExMLX.dynamic_slice/3`
        /// takes a list of integers too.
        dynamic_slice(tensor, starts; lengths: Shape) -> same [custom] => shape::dynamic_slice(tensor, starts, &lengths);
        /// The tensor with `update` written at `starts` (an integer tensor),
        /// clamped so it fits (Nx's `put_slice`).
        put_slice(tensor, starts, update) -> same [custom] => shape::put_slice(tensor, starts, update);
    }

    // -------------------------------------------------------------------------
    // Indexing and sorting
    // -------------------------------------------------------------------------
    indexing {
        /// Elements at `indices` (an integer tensor) along `axis`.
        ///
        ///     iex> t = ExMLX.iota({:s, 32}, {5})
        ///     iex> ExMLX.take(t, ExMLX.from_binary(<<4, 0, 4>>, {:u, 8}, {3}), 0) |> ExMLX.to_list()
        ///     [4, 0, 4]
        take(tensor, indices; #[positional] axis: Int = "0") -> same => indexing::take(tensor, indices, axis);
        /// `t[..., indices[...], ...]` along `axis`, `indices` having `t`'s rank.
        ///
        ///     iex> t = ExMLX.iota({:s, 32}, {2, 3})
        ///     iex> idx = ExMLX.from_binary(<<2, 1>>, {:u, 8}, {2, 1})
        ///     iex> ExMLX.take_along_axis(t, idx, 1) |> ExMLX.to_list()
        ///     [2, 4]
        take_along_axis(tensor, indices; axis: Int) -> same => indexing::take_along_axis(tensor, indices, axis);
        /// Nx's gather: each row of `indices` (`{..., k}`) picks one position
        /// over `axes` (k of them, all axes by default); the result holds the
        /// slices there.
        ///
        ///     iex> t = ExMLX.iota({:s, 32}, {2, 3})
        ///     iex> idx = ExMLX.from_binary(<<1, 2, 0, 0>>, {:u, 8}, {2, 2})
        ///     iex> ExMLX.gather(t, idx) |> ExMLX.to_list()
        ///     [5, 0]
        gather(tensor, indices; #[positional] axes: OptInts = "nil") -> same => indexing::gather(tensor, indices, &axes.unwrap_or_else(|| all_axes(tensor.ndim())));
        /// Writes `updates` at the positions given by the rows of `indices`
        /// over `:axes` (all by default; Nx's `indexed_put`); `add: true` adds
        /// instead (`indexed_add`, repeated positions accumulate).
        ///
        ///     iex> t = ExMLX.full(0, {:s, 32}, {3})
        ///     iex> idx = ExMLX.from_binary(<<0, 2, 2>>, {:u, 8}, {3, 1})
        ///     iex> upd = ExMLX.full(1, {:s, 32}, {3})
        ///     iex> ExMLX.scatter(t, idx, upd, add: true) |> ExMLX.to_list()
        ///     [1, 0, 2]
        scatter(tensor, indices, updates; axes: OptInts = "nil", add: Bool = "false") -> same => indexing::scatter(tensor, indices, updates, &axes.unwrap_or_else(|| all_axes(tensor.ndim())), add);
        /// Sorted along `:axis` (default the last); `direction: :desc` for descending.
        ///
        ///     iex> ExMLX.from_binary(<<3, 1, 2>>, {:u, 8}, {3}) |> ExMLX.sort(direction: :desc) |> ExMLX.to_list()
        ///     [3, 2, 1]
        sort(tensor; axis: Int = "-1", direction: Direction = ":asc") -> same => sort::sort(tensor, axis, direction);
        /// Indices that sort along `:axis` (default the last); stable in both
        /// directions (equal elements keep their order).
        ///
        ///     iex> ExMLX.from_binary(<<2, 1, 2>>, {:u, 8}, {3}) |> ExMLX.argsort(direction: :desc) |> ExMLX.to_list()
        ///     [0, 2, 1]
        argsort(tensor; axis: Int = "-1", direction: Direction = ":asc") -> index => sort::argsort(tensor, axis, direction);
        /// The `k` largest elements along the last axis (largest first) and their indices.
        ///
        ///     iex> {values, indices} = ExMLX.top_k(ExMLX.from_binary(<<5, 9, 1, 9>>, {:u, 8}, {4}), 2)
        ///     iex> {ExMLX.to_list(values), ExMLX.to_list(indices)}
        ///     {[9, 9], [1, 3]}
        top_k(tensor; k: Int) -> [same, index] => sort::top_k(tensor, k);
        /// Partitions along `:axis` around the `kth` element: it lands where a
        /// full sort would put it, smaller elements before, others after (in any order).
        ///
        ///     iex> t = ExMLX.from_binary(<<5, 1, 4, 2, 3>>, {:u, 8}, {5})
        ///     iex> ExMLX.partition(t, 2) |> ExMLX.to_list() |> Enum.at(2)
        ///     3
        partition(tensor; kth: Int, axis: Int = "-1") -> same => sort::partition(tensor, kth, axis);
    }

    // -------------------------------------------------------------------------
    // Linear algebra and convolution
    // -------------------------------------------------------------------------
    linalg {
        /// Matrix product (NumPy semantics: batched over leading axes).
        ///
        ///     iex> a = ExMLX.from_binary(<<1, 2, 3, 4>>, {:u, 8}, {2, 2})
        ///     iex> ExMLX.matmul(a, ExMLX.eye(2, {:u, 8})) |> ExMLX.to_list()
        ///     [1, 2, 3, 4]
        matmul(a, b) -> promote => linalg::matmul(a, b);
        /// Contracts `axes_a` of `a` with `axes_b` of `b` (integers exactly).
        ///
        ///     iex> a = ExMLX.iota({:s, 32}, {2, 3})
        ///     iex> ExMLX.tensordot(a, a, [1], [1]) |> ExMLX.to_list()
        ///     [5, 14, 14, 50]
        tensordot(a, b; axes_a: Ints, axes_b: Ints) -> promote => linalg::tensordot(a, b, &axes_a, &axes_b);
        /// Einstein summation (`ExMLX.einsum/2` documents it).
        einsum(..tensors; subscripts: Str) -> promote [custom] => linalg::einsum(&subscripts, tensors);
        /// N-d convolution in MLX's channels-last layout: `input` is
        /// `{batch, spatial..., in_channels}`, `kernel` is
        /// `{out_channels, spatial..., in_channels / groups}`. Options (one
        /// entry per spatial axis): `:strides` (1), `:padding` (`{low, high}`,
        /// `{0, 0}`), `:kernel_dilation` (1), `:input_dilation` (1); `:groups` (1),
        /// for any number of spatial axes (MLX groups 1-D and 2-D ones; ExMLX
        /// convolves the groups of others one by one).
        ///
        ///     iex> x = ExMLX.iota({:f, 32}, {1, 4, 1})
        ///     iex> k = ExMLX.full(1.0, {:f, 32}, {1, 2, 1})
        ///     iex> ExMLX.conv(x, k) |> ExMLX.to_list()
        ///     [1.0, 3.0, 5.0]
        conv(input, kernel; strides: OptInts = "nil", padding: OptPairs = "nil", kernel_dilation: OptInts = "nil", input_dilation: OptInts = "nil", groups: Int = "1") -> promote => conv::conv_general(input, kernel, strides, padding, kernel_dilation, input_dilation, groups);
        /// The lower Cholesky factor `l` of a symmetric positive-definite
        /// matrix (`a = l · lᵀ`); `upper: true` gives the upper one. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<4.0::32-float-little, 2.0::32-float-little, 2.0::32-float-little, 5.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> ExMLX.cholesky(a) |> ExMLX.to_list()
        ///     [2.0, 0.0, 1.0, 2.0]
        cholesky(tensor; upper: Bool = "false") -> same [cpu] => linalg::cholesky(tensor, upper);
        /// `{q, r}`, `q` with orthonormal columns and `r` upper triangular. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<3.0::32-float-little, 4.0::32-float-little>>, {:f, 32}, {2, 1})
        ///     iex> {q, r} = ExMLX.qr(a)
        ///     iex> magnitudes = &Enum.map(ExMLX.to_list(&1), fn x -> Float.round(abs(x), 4) end)
        ///     iex> {magnitudes.(q), magnitudes.(r)}
        ///     {[0.6, 0.8], [5.0]}
        qr(tensor) -> [same, same] [cpu] => linalg::qr(tensor);
        /// `{eigenvalues, eigenvectors}` of a symmetric matrix. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<2.0::32-float-little, 0.0::32-float-little, 0.0::32-float-little, 3.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> {w, _v} = ExMLX.eigh(a)
        ///     iex> ExMLX.to_list(w)
        ///     [2.0, 3.0]
        eigh(tensor) -> [same, same] [cpu] => linalg::eigh(tensor);
        /// `{u, s, vt}` with `a = u · diag(s) · vt`. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<3.0::32-float-little, 0.0::32-float-little, 0.0::32-float-little, -2.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> {_u, s, _vt} = ExMLX.svd(a)
        ///     iex> ExMLX.to_list(s)
        ///     [3.0, 2.0]
        svd(tensor) -> [same, same, same] [cpu] => linalg::svd(tensor);
        /// `{p, l, u}`: row `i` of `a` is row `p[i]` of `l · u`. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<0.0::32-float-little, 1.0::32-float-little, 1.0::32-float-little, 0.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> {p, _l, _u} = ExMLX.lu(a)
        ///     iex> ExMLX.to_list(p)
        ///     [1, 0]
        lu(tensor) -> [index, same, same] [cpu] => linalg::lu(tensor);
        /// The inverse of a square matrix. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<2.0::32-float-little, 0.0::32-float-little, 0.0::32-float-little, 4.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> ExMLX.inv(a) |> ExMLX.to_list()
        ///     [0.5, 0.0, 0.0, 0.25]
        inv(tensor) -> same [cpu] => linalg::inv(tensor);
        /// The inverse of a lower (`upper: true`: upper) triangular matrix. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<2.0::32-float-little, 0.0::32-float-little, 2.0::32-float-little, 4.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> ExMLX.tri_inv(a) |> ExMLX.to_list()
        ///     [0.5, 0.0, -0.25, 0.25]
        tri_inv(tensor; upper: Bool = "false") -> same [cpu] => linalg::tri_inv(tensor, upper);
        /// The determinant of a square matrix. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<2.0::32-float-little, 1.0::32-float-little, 1.0::32-float-little, 3.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> ExMLX.determinant(a) |> ExMLX.item()
        ///     5.0
        determinant(tensor) -> same [cpu] => linalg::determinant(tensor);
        /// `x` with `a · x = b`; `triangular: :lower | :upper` uses the
        /// triangular solver. On the CPU.
        ///
        ///     iex> a = ExMLX.from_binary(<<2.0::32-float-little, 0.0::32-float-little, 0.0::32-float-little, 4.0::32-float-little>>, {:f, 32}, {2, 2})
        ///     iex> b = ExMLX.from_binary(<<2.0::32-float-little, 2.0::32-float-little>>, {:f, 32}, {2})
        ///     iex> ExMLX.solve(a, b) |> ExMLX.to_list()
        ///     [1.0, 0.5]
        solve(a, b; triangular: Triangular = "nil") -> promote [cpu] => linalg::solve_general(a, b, triangular);
        /// Nx's factorisations, in f64 rounded once to `out_type`, with Nx's
        /// conventions (see ex_mlx_core's `nx_linalg`).
        nx_cholesky(tensor; out_type: Type) -> typed [cpu, nx] => nx_linalg::cholesky(tensor, false, out_type);
        nx_eigh(tensor; out_type: Type) -> [typed, typed] [cpu, nx] => nx_linalg::eigh(tensor, out_type);
        nx_svd(tensor; out_type: Type) -> [typed, typed, typed] [cpu, nx] => nx_linalg::svd(tensor, out_type);
        nx_lu(tensor; out_type: Type) -> [index, typed, typed] [cpu, nx] => nx_linalg::lu(tensor, out_type);
        nx_determinant(tensor; out_type: Type) -> typed [cpu, nx] => nx_linalg::determinant(tensor, out_type);
        nx_qr(tensor; complete: Bool, eps: Float, out_type: Type) -> [typed, typed] [cpu, nx] => nx_linalg::qr(tensor, complete, eps, out_type);
        nx_solve(a, b; triangular: Triangular, out_type: Type) -> typed [cpu, nx] => nx_linalg::solve(a, b, triangular, out_type);
    }

    // -------------------------------------------------------------------------
    // Fourier transforms (ExMLX.FFT documents and checks their options)
    // -------------------------------------------------------------------------
    fft {
        fft(tensor; n: OptInt, axis: Int) -> complex [nx] => fft::fft1(fft::Kind::Fft, tensor, n, axis);
        ifft(tensor; n: OptInt, axis: Int) -> complex [nx] => fft::fft1(fft::Kind::Ifft, tensor, n, axis);
        rfft(tensor; n: OptInt, axis: Int) -> complex [nx] => fft::fft1(fft::Kind::Rfft, tensor, n, axis);
        irfft(tensor; n: OptInt, axis: Int) -> real [nx] => fft::fft1(fft::Kind::Irfft, tensor, n, axis);
        fft2(tensor; s: OptInts, axes: OptInts) -> complex [nx] => fft::fftn(fft::Kind::Fft, fft::Dims::Two, tensor, s.as_deref(), axes.as_deref());
        ifft2(tensor; s: OptInts, axes: OptInts) -> complex [nx] => fft::fftn(fft::Kind::Ifft, fft::Dims::Two, tensor, s.as_deref(), axes.as_deref());
        rfft2(tensor; s: OptInts, axes: OptInts) -> complex [nx] => fft::fftn(fft::Kind::Rfft, fft::Dims::Two, tensor, s.as_deref(), axes.as_deref());
        irfft2(tensor; s: OptInts, axes: OptInts) -> real [nx] => fft::fftn(fft::Kind::Irfft, fft::Dims::Two, tensor, s.as_deref(), axes.as_deref());
        fftn(tensor; s: OptInts, axes: OptInts) -> complex [nx] => fft::fftn(fft::Kind::Fft, fft::Dims::Any, tensor, s.as_deref(), axes.as_deref());
        ifftn(tensor; s: OptInts, axes: OptInts) -> complex [nx] => fft::fftn(fft::Kind::Ifft, fft::Dims::Any, tensor, s.as_deref(), axes.as_deref());
        rfftn(tensor; s: OptInts, axes: OptInts) -> complex [nx] => fft::fftn(fft::Kind::Rfft, fft::Dims::Any, tensor, s.as_deref(), axes.as_deref());
        irfftn(tensor; s: OptInts, axes: OptInts) -> real [nx] => fft::fftn(fft::Kind::Irfft, fft::Dims::Any, tensor, s.as_deref(), axes.as_deref());
        fftshift(tensor; axes: OptInts) -> same [nx] => fft::shift(false, tensor, axes.as_deref());
        ifftshift(tensor; axes: OptInts) -> same [nx] => fft::shift(true, tensor, axes.as_deref());
    }

    // -------------------------------------------------------------------------
    // MLX's fused kernels (ExMLX.Compiler with `fuse: true` uses them for
    // the composed forms: docs/numerics.md)
    // -------------------------------------------------------------------------
    fast {
        /// Root-mean-square normalization over the last axis, scaled:
        /// `x / sqrt(mean(x², last axis) + eps) · weight`, `weight` having the
        /// last axis' size, in one MLX kernel (half-precision inputs are
        /// normalized in float32, then rounded, then scaled).
        ///
        ///     iex> x = ExMLX.from_binary(<<3.0::float-32-native, 4.0::float-32-native>>, {:f, 32}, {1, 2})
        ///     iex> ExMLX.rms_norm(x, ExMLX.full(2.0, {:f, 32}, {2}), eps: 0.0) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [1.6971, 2.2627]
        rms_norm(tensor, weight; eps: Float = "1.0e-5") -> same => fast::rms_norm(tensor, weight, eps);
        /// `exp(x - max) / sum(exp(x - max))` over `:axes` (the last by
        /// default), in one MLX kernel (half-precision inputs are computed
        /// in float32).
        ///
        ///     iex> x = ExMLX.from_binary(<<0.0::float-32-native, 1.0986123::float-32-native>>, {:f, 32}, {2})
        ///     iex> ExMLX.softmax(x) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.25, 0.75]
        softmax(tensor; axes: Ints = "[-1]") -> same => fast::softmax(tensor, &axes);
        /// Attention in one MLX kernel: `softmax(scale · q · kᵀ + mask) · v`
        /// per batch and head, for `queries` `{b, h, t_q, d}`, `keys`
        /// `{b, h_kv, t_kv, d}`, `values` `{b, h_kv, t_kv, d_v}` (`h` a
        /// multiple of `h_kv`) and a `mask` added to the scores (or boolean,
        /// `false` excluding a key) broadcastable to `{b, h, t_q, t_kv}`;
        /// the softmax in float32.
        ///
        ///     iex> q = ExMLX.from_binary(<<1.0::float-32-native, 0.0::float-32-native>>, {:f, 32}, {1, 1, 1, 2})
        ///     iex> k = ExMLX.from_binary(<<1.0::float-32-native, 0.0::float-32-native, 0.0::float-32-native, 1.0::float-32-native>>, {:f, 32}, {1, 1, 2, 2})
        ///     iex> v = ExMLX.from_binary(<<2.0::float-32-native, 4.0::float-32-native>>, {:f, 32}, {1, 1, 2, 1})
        ///     iex> mask = ExMLX.full(0.0, {:f, 32}, {1, 1, 1, 2})
        ///     iex> ExMLX.scaled_dot_product_attention(q, k, v, mask, scale: :math.log(3)) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [2.5]
        scaled_dot_product_attention(queries, keys, values, mask; scale: Float = "1.0") -> same => fast::scaled_dot_product_attention(queries, keys, values, mask, scale);
        /// Attention over the keys each query is `admitted` to (a boolean
        /// broadcastable to `{b, h, t_q, t_kv}`): `softmax(scale · q · kᵀ +
        /// bias) · v`, the bias 0 for an admitted key and the type's
        /// smallest finite value for any other (Bumblebee's attention
        /// bias). The mask's values are read: the keys past the last one
        /// any query is admitted to are not given to MLX, nor a mask that
        /// admits every key left (MLX's causal mode for a causal one).
        ///
        ///     iex> q = ExMLX.from_binary(<<1.0::float-32-native, 0.0::float-32-native>>, {:f, 32}, {1, 1, 1, 2})
        ///     iex> k = ExMLX.from_binary(<<1.0::float-32-native, 0.0::float-32-native, 0.0::float-32-native, 1.0::float-32-native, 5.0::float-32-native, 5.0::float-32-native>>, {:f, 32}, {1, 1, 3, 2})
        ///     iex> v = ExMLX.from_binary(<<2.0::float-32-native, 4.0::float-32-native, 100.0::float-32-native>>, {:f, 32}, {1, 1, 3, 1})
        ///     iex> admitted = ExMLX.from_binary(<<1, 1, 0>>, :bool, {1, 1, 1, 3})
        ///     iex> ExMLX.attention_admitted(q, k, v, admitted, scale: :math.log(3)) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [2.5]
        attention_admitted(queries, keys, values, admitted; scale: Float = "1.0") -> same => fast::attention_admitted(queries, keys, values, admitted, scale);
        /// Rotary position embedding in one MLX kernel: for `{..., t, d}`,
        /// the first `dims` features of the row at position `p` (`offset`
        /// plus its index along `t`; `offset` a scalar or one per entry of
        /// the first axis) rotated in pairs `(i, i + dims/2)` by the angle
        /// `p · scale / freqs[i]` (`freqs` of shape `{dims / 2}`), computed
        /// in float32.
        ///
        ///     iex> x = ExMLX.from_binary(<<1.0::float-32-native, 0.0::float-32-native>>, {:f, 32}, {1, 1, 2})
        ///     iex> offset = ExMLX.full(1, {:s, 32}, {})
        ///     iex> freqs = ExMLX.full(3 / :math.pi(), {:f, 32}, {1})
        ///     iex> ExMLX.rope(x, offset, freqs, 2) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))
        ///     [0.5, 0.866]
        rope(tensor, offset, freqs; dims: Int, traditional: Bool = "false", scale: Float = "1.0") -> same => fast::rope(tensor, offset, freqs, dims, traditional, scale);
    }

    // -------------------------------------------------------------------------
    // MLX's affine quantization (crate::ops::quantization)
    // -------------------------------------------------------------------------
    quantization {
        /// `{packed, scales, biases}`: each row of the tensor cut into groups
        /// of `group_size` values, each stored as `bits`-bit integers `q`
        /// (packed into `{:u, 32}` words, lowest bits first) with a scale and
        /// a bias in the tensor's type, standing for `scale · q + bias`.
        ///
        ///     iex> w = ExMLX.from_binary(for(i <- 0..31, into: <<>>, do: <<i * 1.0::float-32-native>>), {:f, 32}, {1, 32})
        ///     iex> {packed, scales, biases} = ExMLX.quantize(w, group_size: 32, bits: 5)
        ///     iex> {packed.shape, ExMLX.to_list(scales), ExMLX.to_list(biases)}
        ///     {{1, 5}, [-1.0], [31.0]}
        quantize(tensor; group_size: Int = "64", bits: Int = "4") -> [index, same, same] => quantization::quantize(tensor, group_size, bits);
        /// `scales · q + biases` for the integers `q` that `packed` holds (see
        /// `quantize`), in the scales' type.
        ///
        ///     iex> words = <<0x76543210::32-native, 0xFEDCBA98::32-native>>
        ///     iex> packed = ExMLX.from_binary(words <> words, {:u, 32}, {1, 4})
        ///     iex> scales = ExMLX.full(0.5, {:f, 32}, {1, 1})
        ///     iex> biases = ExMLX.full(-1.0, {:f, 32}, {1, 1})
        ///     iex> ExMLX.dequantize(packed, scales, biases, group_size: 32, bits: 4) |> ExMLX.to_list() |> Enum.take(5)
        ///     [-1.0, -0.5, 0.0, 0.5, 1.0]
        dequantize(packed, scales, biases; group_size: Int = "64", bits: Int = "4") -> second => quantization::dequantize(packed, scales, biases, group_size, bits);
        /// `tensor · wᵀ` (`transpose: true`, a linear layer's `{out, in}`
        /// weight) or `tensor · w`, `w` the matrix `packed`, `scales` and
        /// `biases` stand for (see `quantize`), computed without making `w`.
        ///
        ///     iex> w = ExMLX.from_binary(for(i <- 0..31, into: <<>>, do: <<i * 1.0::float-32-native>>), {:f, 32}, {1, 32})
        ///     iex> {packed, scales, biases} = ExMLX.quantize(w, group_size: 32, bits: 5)
        ///     iex> x = ExMLX.full(1.0, {:f, 32}, {1, 32})
        ///     iex> ExMLX.quantized_matmul(x, packed, scales, biases, group_size: 32, bits: 5) |> ExMLX.to_list()
        ///     [496.0]
        quantized_matmul(tensor, packed, scales, biases; transpose: Bool = "true", group_size: Int = "64", bits: Int = "4") -> same => quantization::quantized_matmul(tensor, packed, scales, biases, transpose, group_size, bits);
    }
}
