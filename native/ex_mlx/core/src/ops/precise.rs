//! f64 element-wise functions computed on the host.
//!
//! MLX 0.32's CPU backend evaluates `exp`, `sin`, `cos`, `erf`, `erfinv`,
//! `sigmoid` and `logaddexp` on float64 arrays with float32-accurate
//! approximations (measured here: `exp(0.1)` came back as 1.1051709651947021,
//! the true value being 1.1051709180756477), and `expm1`/`log1p` an ulp off.
//! ExMLX never narrows f64 silently, so for f64 these run here instead,
//! element by element, with the platform's C math library (the same one
//! Erlang's `:math` uses, so results match Nx.BinaryBackend bit for bit).
//! `erfc` and `cbrt`, which MLX lacks, run here for every float type. This
//! evaluates the input: the result is a fresh array, not a lazy graph node.

use mlx_rs::{Array, Dtype};

use crate::dtype::broadcast_shape;
use crate::error::{Error, Result};
use crate::host::{array_from_bytes, HostBuffer};

// The C library's functions Rust's std does not expose.
extern "C" {
    #[link_name = "erf"]
    fn c_erf(x: f64) -> f64;
    #[link_name = "erfc"]
    fn c_erfc(x: f64) -> f64;
}

/// The error function (the C library's).
pub fn erf(x: f64) -> f64 {
    // SAFETY: erf is a pure C function of one double, defined for every input.
    unsafe { c_erf(x) }
}

/// The complementary error function (the C library's).
pub fn erfc(x: f64) -> f64 {
    // SAFETY: erfc is a pure C function of one double, defined for every input.
    unsafe { c_erfc(x) }
}

/// The elements of an f64 array, row-major.
pub(crate) fn f64s(a: &Array) -> Result<Vec<f64>> {
    read(a, f64::from_le_bytes)
}

/// The elements of `a`, row-major, each of its `N` bytes made an f64 by
/// `value`.
fn read<const N: usize>(a: &Array, value: fn([u8; N]) -> f64) -> Result<Vec<f64>> {
    let buffer = HostBuffer::new(a)?;
    Ok(buffer
        .bytes()
        .chunks_exact(N)
        .map(|c| value(c.try_into().unwrap_or([0; N])))
        .collect())
}

/// An f64 array of `shape` holding `values` (row-major).
pub(crate) fn from_f64s(values: &[f64], shape: &[i32]) -> Result<Array> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    array_from_bytes(&bytes, shape, Dtype::Float64)
}

/// `f(a)` computed on the host in f64, for an op MLX lacks (`name` is
/// the op's, for errors); the result has `a`'s float type (integers give
/// f32, as MLX's own float functions do), each value rounded once from f64.
/// No f64 array is made for other types: MLX's GPU backend has none.
pub fn on_host(name: &str, a: &Array, f: fn(f64) -> f64) -> Result<Array> {
    let out_dtype = match a.dtype() {
        d if d.is_float() => d,
        Dtype::Complex64 => {
            return Err(Error::Type(format!(
                "{name} is not defined for complex tensors in ExMLX"
            )))
        }
        _ => Dtype::Float32,
    };
    let values: Vec<f64> = host_f64s(a)?.into_iter().map(f).collect();
    rounded(&values, a.shape(), out_dtype)
}

/// The elements of `a` as f64, row-major: floats read as f32 (which holds
/// every f16 and bf16 value), integers as i64 or u64 (exact up to 2^53, as
/// MLX's own cast to f64 is).
fn host_f64s(a: &Array) -> Result<Vec<f64>> {
    match a.dtype() {
        Dtype::Float64 => f64s(a),
        Dtype::Uint64 => read(a, |c| u64::from_le_bytes(c) as f64),
        d if d.is_float() => read(&a.as_dtype(Dtype::Float32)?, |c| {
            f32::from_le_bytes(c) as f64
        }),
        _ => read(&a.as_dtype(Dtype::Int64)?, |c| i64::from_le_bytes(c) as f64),
    }
}

/// An array of `shape` and the float type `dtype` holding `values`, each
/// rounded once to `dtype` (to nearest, ties to even).
fn rounded(values: &[f64], shape: &[i32], dtype: Dtype) -> Result<Array> {
    let bytes: Vec<u8> = match dtype {
        Dtype::Float64 => return from_f64s(values, shape),
        Dtype::Float32 => values
            .iter()
            .flat_map(|&v| (v as f32).to_le_bytes())
            .collect(),
        Dtype::Float16 => values
            .iter()
            .flat_map(|&v| half::f16::from_f64(v).to_le_bytes())
            .collect(),
        Dtype::Bfloat16 => values
            .iter()
            .flat_map(|&v| half::bf16::from_f64(v).to_le_bytes())
            .collect(),
        other => {
            return Err(Error::Internal(format!(
                "a host result cannot be of type {}",
                crate::dtype::display(other)
            )))
        }
    };
    array_from_bytes(&bytes, shape, dtype)
}

/// MLX's `mlx(a)`, except for f64 input, which MLX computes with f32
/// accuracy (see the module documentation): then `f` on the host.
pub fn f64_on_host(
    name: &str,
    a: &Array,
    f: fn(f64) -> f64,
    mlx: impl FnOnce(&Array) -> mlx_rs::error::Result<Array>,
) -> Result<Array> {
    if a.dtype() == Dtype::Float64 {
        on_host(name, a, f)
    } else {
        Ok(mlx(a)?)
    }
}

/// `logaddexp(a, b)` for f64 arrays (already broadcast to one shape).
pub fn logaddexp(a: &Array, b: &Array) -> Result<Array> {
    let shape = broadcast_shape(a.shape(), b.shape())?;
    let a = f64s(&mlx_rs::ops::broadcast_to(a, &shape)?)?;
    let b = f64s(&mlx_rs::ops::broadcast_to(b, &shape)?)?;
    let values: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| {
            if x == y && x.is_infinite() {
                return x;
            }
            let m = x.max(y);
            if m.is_nan() {
                return f64::NAN;
            }
            m + (-(x - y).abs()).exp().ln_1p()
        })
        .collect();
    from_f64s(&values, &shape)
}

pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Inverse error function: a rational first guess refined by Newton steps on
/// libm's erf (quadratic convergence to full f64 precision).
pub fn erf_inv(y: f64) -> f64 {
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y == 1.0 {
        return f64::INFINITY;
    }
    if y == -1.0 {
        return f64::NEG_INFINITY;
    }
    // Giles' single-precision approximation as the starting point.
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ] {
            p = c + p * w;
        }
        p * y
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ] {
            p = c + p * w;
        }
        p * y
    };
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    for _ in 0..4 {
        let err = erf(x) - y;
        let slope = two_over_sqrt_pi * (-x * x).exp();
        if slope == 0.0 {
            break;
        }
        let step = err / slope;
        x -= step;
        if step.abs() <= f64::EPSILON * x.abs() {
            break;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cbrt of f32, f16, bf16 and integer arrays: f64's cbrt of each value
    /// rounded once to the result type (computed here with std and `half`),
    /// with no f64 array made on the way (MLX's GPU backend has none).
    #[test]
    fn host_results_are_rounded_once_to_the_input_float_type() {
        let xs = [0.75f32, 2.0, -27.5, 1e-3, 3.0e7];
        let f32s = on_host("cbrt", &Array::from_slice(&xs, &[5]), f64::cbrt).unwrap();
        let expected: Vec<f32> = xs.iter().map(|&x| (x as f64).cbrt() as f32).collect();
        assert_eq!(f32s.dtype(), Dtype::Float32);
        assert_eq!(f32s.as_slice::<f32>(), &expected[..]);

        let halves: Vec<half::f16> = xs.iter().map(|&x| half::f16::from_f32(x)).collect();
        let r = on_host("cbrt", &Array::from_slice(&halves, &[5]), f64::cbrt).unwrap();
        let expected: Vec<half::f16> = halves
            .iter()
            .map(|h| half::f16::from_f64(h.to_f64().cbrt()))
            .collect();
        assert_eq!(r.dtype(), Dtype::Float16);
        assert_eq!(r.as_slice::<half::f16>(), &expected[..]);

        let brains: Vec<half::bf16> = xs.iter().map(|&x| half::bf16::from_f32(x)).collect();
        let r = on_host("erfc", &Array::from_slice(&brains, &[5]), erfc).unwrap();
        let expected: Vec<half::bf16> = brains
            .iter()
            .map(|h| half::bf16::from_f64(erfc(h.to_f64())))
            .collect();
        assert_eq!(r.dtype(), Dtype::Bfloat16);
        assert_eq!(r.as_slice::<half::bf16>(), &expected[..]);

        let ints = on_host(
            "cbrt",
            &Array::from_slice(&[27i64, -8, 1 << 40], &[3]),
            f64::cbrt,
        );
        let expected = [3.0f32, -2.0, ((1i64 << 40) as f64).cbrt() as f32];
        assert_eq!(ints.unwrap().as_slice::<f32>(), &expected);
    }

    #[test]
    fn erf_inv_inverts_erf() {
        // Round trips where erf_inv is well conditioned...
        for &x in &[-1.2, -0.1, 0.0, 1e-8, 0.3, 0.9] {
            let back = erf_inv(erf(x));
            assert!((back - x).abs() <= 1e-14 * x.abs().max(1.0), "{x}: {back}");
        }
        // ...and the forward residual near ±1, where erf_inv's slope
        // (√π/2·e^{x²}, ~7000 at x = 3) amplifies any rounding of y.
        for &y in &[-0.9999779095030014, 0.99, 0.999999, -0.5] {
            let x = erf_inv(y);
            assert!(
                (erf(x) - y).abs() <= 4.0 * f64::EPSILON,
                "{y}: erf({x}) = {}",
                erf(x)
            );
        }
        assert_eq!(erf_inv(1.0), f64::INFINITY);
        assert!(erf_inv(1.5).is_nan());
    }

    #[test]
    fn sigmoid_is_stable_at_both_ends() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert!((sigmoid(-800.0)).abs() < 1e-300);
        assert_eq!(sigmoid(800.0), 1.0);
    }
}
