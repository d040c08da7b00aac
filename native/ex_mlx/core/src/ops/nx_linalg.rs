//! Linear algebra as ExMLX.Backend gives it to Nx: Nx's definitions and
//! conventions, with each result rounded once to the type Nx asks for.
//!
//! * Cholesky and LU run in the tensor's precision (f32 for f32 and
//!   narrower types, f64 for f64), as Nx's own algorithms do.
//! * Triangular solves run in f64 (Nx.BinaryBackend's do too): MLX's f32
//!   path gave -0.66666675 for -2/3 (-0.6666667 rounded once).
//! * `solve` is Nx's definition, an LU factorisation followed by the two
//!   triangular solves (the middle result rounded to the working precision,
//!   as Nx stores it). `determinant` is Nx's too: the explicit formula for
//!   2 × 2 and 3 × 3 matrices (here in f64), the LU's diagonal product (in
//!   f64) for larger ones. MLX's own f64 determinant goes through
//!   f32-accurate logarithms: it gave 629.9999... for 630.
//! * QR, eigh and SVD run in f64. QR is computed here (see
//!   [`householder_qr`]) with Nx's Householder choices, so signs and
//!   untouched columns come out as Nx's; eigh orders eigenvalues by
//!   decreasing magnitude, as Nx does, and turns each eigenvector so that
//!   its largest component is positive; SVD turns each singular pair so that
//!   the right vector (of a tall or square matrix; the left one of a wide
//!   matrix) has its largest component positive, and writes no `-0.0`.
//!
//! MLX's linear algebra runs on the CPU stream only; callers run these on
//! the CPU worker.

use mlx_rs::{linalg, ops, Array, Dtype};

use super::householder::{householder_qr, order_eigh, orient_svd};
use super::precise::{f64s, from_f64s};
use crate::dtype::{display, display_shape};
use crate::error::{Error, Result};
use crate::host::array_from_bytes;

/// Checks that `dtype` is a floating type results can be rounded to.
fn check_out(dtype: Dtype) -> Result<()> {
    match dtype {
        Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float32 | Dtype::Float64 => Ok(()),
        other => Err(Error::Type(format!(
            "linear algebra results are real floats ({{:f, 16}}, {{:bf, 16}}, {{:f, 32}} or {{:f, 64}}), not {}",
            display(other)
        ))),
    }
}

/// Refuses complex tensors: Nx's own algorithms handle them.
fn check_real(name: &'static str, a: &Array) -> Result<()> {
    if a.dtype().is_complex() {
        return Err(Error::Type(format!(
            "{name}: ExMLX's linear algebra is real-only, got {}",
            display(a.dtype())
        )));
    }
    Ok(())
}

/// `a` as f64.
fn as_f64(name: &'static str, a: &Array) -> Result<Array> {
    check_real(name, a)?;
    Ok(a.as_dtype(Dtype::Float64)?)
}

/// `a` in its working precision: f64 stays f64, every other real type is
/// computed in f32 (MLX's LAPACK takes only those two).
fn working(name: &'static str, a: &Array) -> Result<Array> {
    check_real(name, a)?;
    if a.dtype() == Dtype::Float64 {
        Ok(a.clone())
    } else {
        Ok(a.as_dtype(Dtype::Float32)?)
    }
}

/// `x` rounded to f32 toward zero, with the last bit set when that was
/// inexact ("round to odd"). Rounding this (to nearest, ties to even) to a
/// format with at least two fewer significand bits gives `x` rounded once
/// to that format; a plain cast through f32 would round twice, and so did
/// half's f64 conversions here (x86).
fn to_f32_odd(x: f64) -> f32 {
    let f = x as f32;
    if x.is_nan() || f as f64 == x {
        return f;
    }
    let mut bits = f.to_bits();
    if (f as f64).abs() > x.abs() {
        // rounded away from zero (to infinity, too): one step back
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// `a` (f32 or f64) rounded once to `dtype`. f64 to f32 is MLX's cast (one
/// IEEE rounding); f16 and bf16 are rounded here through [`to_f32_odd`].
pub fn round_once(a: &Array, dtype: Dtype) -> Result<Array> {
    match (a.dtype(), dtype) {
        (from, to) if from == to => Ok(a.clone()),
        (Dtype::Float64 | Dtype::Float32, Dtype::Float64 | Dtype::Float32) => {
            Ok(a.as_dtype(dtype)?)
        }
        (Dtype::Float64 | Dtype::Float32, Dtype::Float16 | Dtype::Bfloat16) => {
            // f32 to f64 is exact, and to_f32_odd leaves an f32 value as it is.
            let values = f64s(&a.as_dtype(Dtype::Float64)?)?;
            let bytes: Vec<u8> = if dtype == Dtype::Float16 {
                values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(to_f32_odd(v)).to_le_bytes())
                    .collect()
            } else {
                values
                    .iter()
                    .flat_map(|&v| half::bf16::from_f32(to_f32_odd(v)).to_le_bytes())
                    .collect()
            };
            array_from_bytes(&bytes, a.shape(), dtype)
        }
        (from, to) => Err(Error::Type(format!(
            "cannot round a linear algebra result from {} to {}",
            display(from),
            display(to)
        ))),
    }
}

/// `(batch, rows, cols)` of a (batch of) matrices.
fn matrix_dims(name: &'static str, a: &Array) -> Result<(usize, usize, usize)> {
    let shape = a.shape();
    let rank = shape.len();
    if rank < 2 {
        return Err(Error::arg(
            name,
            format!(
                "needs a matrix (rank 2 or more), got shape {}",
                display_shape(shape)
            ),
        ));
    }
    let m = shape[rank - 2] as usize;
    let n = shape[rank - 1] as usize;
    let batch = shape[..rank - 2].iter().map(|&d| d as usize).product();
    Ok((batch, m, n))
}

fn square_dims(name: &'static str, a: &Array) -> Result<(usize, usize)> {
    let (batch, m, n) = matrix_dims(name, a)?;
    if m != n {
        return Err(Error::arg(
            name,
            format!(
                "needs square matrices, got shape {}",
                display_shape(a.shape())
            ),
        ));
    }
    Ok((batch, n))
}

/// `shape` with its last two axes replaced by `rows × cols`.
fn matrix_shape(shape: &[i32], rows: usize, cols: usize) -> Vec<i32> {
    let mut out = shape[..shape.len() - 2].to_vec();
    out.push(rows as i32);
    out.push(cols as i32);
    out
}

/// Lower (or upper) Cholesky factor, in the working precision.
pub fn cholesky(a: &Array, upper: bool, out: Dtype) -> Result<Array> {
    check_out(out)?;
    square_dims("tensor", a)?;
    round_once(&linalg::cholesky(working("tensor", a)?, Some(upper))?, out)
}

/// `(q, r)` by [`householder_qr`]: reduced (`q` is `m × k`, `r` is `k × n`)
/// or complete (`m × m` and `m × n`); entries at most `eps` in magnitude are
/// zero.
pub fn qr(a: &Array, complete: bool, eps: f64, out: Dtype) -> Result<(Array, Array)> {
    check_out(out)?;
    let (batch, m, n) = matrix_dims("tensor", a)?;
    if eps.is_nan() || eps < 0.0 {
        return Err(Error::arg(
            "eps",
            format!("must be a non-negative number, got {eps}"),
        ));
    }
    let values = f64s(&as_f64("tensor", a)?)?;
    let k = m.min(n);
    let (q_cols, r_rows) = if complete { (m, m) } else { (k, k) };
    let mut q = Vec::with_capacity(batch * m * q_cols);
    let mut r = Vec::with_capacity(batch * r_rows * n);
    for b in 0..batch {
        let f = householder_qr(&values[b * m * n..(b + 1) * m * n], m, n, complete, eps);
        q.extend_from_slice(&f.q);
        r.extend_from_slice(&f.r);
    }
    let shape = a.shape();
    let q = from_f64s(&q, &matrix_shape(shape, m, q_cols))?;
    let r = from_f64s(&r, &matrix_shape(shape, r_rows, n))?;
    Ok((round_once(&q, out)?, round_once(&r, out)?))
}

/// Eigenvalues (by decreasing magnitude) and eigenvectors (in columns, each
/// with its largest component positive) of symmetric matrices.
pub fn eigh(a: &Array, out: Dtype) -> Result<(Array, Array)> {
    check_out(out)?;
    let (batch, n) = square_dims("tensor", a)?;
    let (w, v) = linalg::eigh(as_f64("tensor", a)?, None)?;
    let (w_shape, v_shape) = (w.shape().to_vec(), v.shape().to_vec());
    let (w, v) = (f64s(&w)?, f64s(&v)?);
    let mut w_out = Vec::with_capacity(w.len());
    let mut v_out = Vec::with_capacity(v.len());
    for b in 0..batch {
        let (wb, vb) = order_eigh(&w[b * n..(b + 1) * n], &v[b * n * n..(b + 1) * n * n], n);
        w_out.extend(wb);
        v_out.extend(vb);
    }
    Ok((
        round_once(&from_f64s(&w_out, &w_shape)?, out)?,
        round_once(&from_f64s(&v_out, &v_shape)?, out)?,
    ))
}

/// `(u, s, vt)` with full `u` (`m × m`) and `vt` (`n × n`), singular values
/// decreasing, signs as [`orient_svd`] sets them.
pub fn svd(a: &Array, out: Dtype) -> Result<(Array, Array, Array)> {
    check_out(out)?;
    let (batch, m, n) = matrix_dims("tensor", a)?;
    let (u, s, vt) = linalg::svd(as_f64("tensor", a)?)?;
    let (u_shape, vt_shape) = (u.shape().to_vec(), vt.shape().to_vec());
    let (mut u, mut vt) = (f64s(&u)?, f64s(&vt)?);
    for b in 0..batch {
        orient_svd(
            &mut u[b * m * m..(b + 1) * m * m],
            &mut vt[b * n * n..(b + 1) * n * n],
            m,
            n,
        );
    }
    Ok((
        round_once(&from_f64s(&u, &u_shape)?, out)?,
        round_once(&s, out)?,
        round_once(&from_f64s(&vt, &vt_shape)?, out)?,
    ))
}

/// `(p, l, u)` in the working precision: the row order as indices (row `i`
/// of `a` is row `p[i]` of `l · u`), unit lower and upper factors.
pub fn lu(a: &Array, out: Dtype) -> Result<(Array, Array, Array)> {
    check_out(out)?;
    square_dims("tensor", a)?;
    let (p, l, u) = linalg::lu(working("tensor", a)?)?;
    Ok((p, round_once(&l, out)?, round_once(&u, out)?))
}

/// The determinant, by Nx's definition: for 2 × 2 and 3 × 3 matrices the
/// explicit formula (here in f64); for larger ones the product (in f64) of
/// the diagonal of the working precision's LU factor `u`, negated for an
/// odd row permutation, `0.0` when a diagonal entry is zero.
pub fn determinant(a: &Array, out: Dtype) -> Result<Array> {
    check_out(out)?;
    let (batch, n) = square_dims("tensor", a)?;
    let batch_shape = &a.shape()[..a.shape().len() - 2];
    if n == 0 {
        return round_once(&from_f64s(&vec![1.0; batch], batch_shape)?, out);
    }
    if n <= 3 {
        let values = f64s(&as_f64("tensor", a)?)?;
        let dets: Vec<f64> = values
            .chunks_exact(n * n)
            .map(|m| match m {
                [x] => *x,
                [a, b, c, d] => a * d - b * c,
                [a, b, c, d, e, f, g, h, i] => {
                    a * e * i + b * f * g + c * d * h - c * e * g - b * d * i - a * f * h
                }
                _ => f64::NAN,
            })
            // x + 0.0: no -0.0 for a singular matrix
            .map(|det| det + 0.0)
            .collect();
        return round_once(&from_f64s(&dets, batch_shape)?, out);
    }
    let (p, _l, u) = linalg::lu(working("tensor", a)?)?;
    let order = indices(&p)?;
    let u = f64s(&u.as_dtype(Dtype::Float64)?)?;
    let dets: Vec<f64> = (0..batch)
        .map(|b| {
            let diagonal: f64 = (0..n).map(|i| u[b * n * n + i * n + i]).product();
            if diagonal == 0.0 {
                0.0
            } else if odd_permutation(&order[b * n..(b + 1) * n]) {
                -diagonal
            } else {
                diagonal
            }
        })
        .collect();
    round_once(&from_f64s(&dets, batch_shape)?, out)
}

/// The elements of an integer array as `usize`s.
fn indices(a: &Array) -> Result<Vec<usize>> {
    let buffer = crate::host::HostBuffer::new(&a.as_dtype(Dtype::Int64)?)?;
    buffer
        .bytes()
        .chunks_exact(8)
        .map(|c| {
            let i = i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            usize::try_from(i).map_err(|_| Error::Internal(format!("negative row index {i}")))
        })
        .collect()
}

/// Whether `order` (a permutation of `0..len`) is odd: its length minus
/// its number of cycles is odd.
fn odd_permutation(order: &[usize]) -> bool {
    let mut seen = vec![false; order.len()];
    let mut cycles = 0;
    for start in 0..order.len() {
        if seen[start] {
            continue;
        }
        cycles += 1;
        let mut i = start;
        while let Some(false) = seen.get(i).copied() {
            seen[i] = true;
            i = order[i];
        }
    }
    (order.len() - cycles) % 2 == 1
}

/// `x` with `a · x = b`, for `b` of `a`'s rank (a batch of matrices) or one
/// less (a batch of vectors). `triangular` is `Some(upper)` for a triangular
/// `a` (only that triangle is read), solved in f64; `None` for a general
/// `a`: its LU factors, then `l · y = b` (rows of `b` in the LU's row
/// order) and `u · x = y`, both in f64, `y` rounded to the working
/// precision in between; a zero on u's diagonal is an error, as in Nx.
pub fn solve(a: &Array, b: &Array, triangular: Option<bool>, out: Dtype) -> Result<Array> {
    check_out(out)?;
    square_dims("a", a)?;
    check_real("b", b)?;
    let vector = b.ndim() + 1 == a.ndim();
    let b = if vector {
        b.expand_dims(-1)?
    } else {
        b.clone()
    };
    let x = match triangular {
        Some(upper) => linalg::solve_triangular(as_f64("a", a)?, as_f64("b", &b)?, upper)?,
        None => {
            let a = working("a", a)?;
            let (p, l, u) = linalg::lu(&a)?;
            // As Nx does: a zero pivot is an error, not infinities.
            let pivots = f64s(&u.diagonal(0, -2, -1)?.as_dtype(Dtype::Float64)?)?;
            if pivots.contains(&0.0) {
                return Err(Error::arg("a", "can't solve for singular matrix"));
            }
            // Row i of a is row p[i] of l·u, so l·u·x = b has b's row i in
            // row p[i]: b's rows taken in the order of p's inverse.
            let inverse = ops::argsort_axis(&p, -1)?;
            let rows = ops::broadcast_to(inverse.expand_dims(-1)?, b.shape())?;
            let b = b.take_along_axis(&rows, -2)?;
            let y = linalg::solve_triangular(as_f64("l", &l)?, as_f64("b", &b)?, false)?;
            let y = y.as_dtype(a.dtype())?;
            linalg::solve_triangular(as_f64("u", &u)?, as_f64("y", &y)?, true)?
        }
    };
    let x = if vector { x.squeeze_axes(&[-1])? } else { x };
    round_once(&x, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    fn f64_matrix(values: &[f64], rows: i32, cols: i32) -> Result<Array> {
        from_f64s(values, &[rows, cols])
    }

    #[test]
    fn triangular_solves_are_the_f64_results_rounded_once() {
        let x = run_blocking(Device::Cpu, || {
            let t = f64_matrix(&[3.0, 0.0, 2.0, 1.0], 2, 2)?.as_dtype(Dtype::Float32)?;
            let b = from_f64s(&[4.0, 2.0], &[2])?.as_dtype(Dtype::Float32)?;
            let x = solve(&t, &b, Some(false), Dtype::Float32)?;
            Ok(x.as_slice::<f32>().to_vec())
        })
        .unwrap();
        // 3x = 4, 2x + y = 2: x = 4/3, y = -2/3
        assert_eq!(x, [(4.0f64 / 3.0) as f32, (-2.0f64 / 3.0) as f32]);
    }

    #[test]
    fn general_solves_of_vectors_and_matrices() {
        // a = [[2, 1], [4, 5]] (the LU swaps its rows), a⁻¹ = [[5, -1], [-4, 2]] / 6
        let (x, xs) = run_blocking(Device::Cpu, || {
            let a = f64_matrix(&[2.0, 1.0, 4.0, 5.0], 2, 2)?;
            let b = from_f64s(&[3.0, 9.0], &[2])?;
            let x = solve(&a, &b, None, Dtype::Float64)?
                .as_slice::<f64>()
                .to_vec();
            // a batch of two: a and 2·a, with b = [[3, 1], [9, 0]] for both
            let a2 = from_f64s(&[2.0, 1.0, 4.0, 5.0, 4.0, 2.0, 8.0, 10.0], &[2, 2, 2])?;
            let b2 = from_f64s(&[3.0, 1.0, 9.0, 0.0, 3.0, 1.0, 9.0, 0.0], &[2, 2, 2])?;
            let xs = solve(&a2, &b2, None, Dtype::Float32)?
                .as_slice::<f32>()
                .to_vec();
            Ok((x, xs))
        })
        .unwrap();
        // [3, 9]: x = (15 - 9, -12 + 18) / 6 = (1, 1)
        assert!(x.iter().all(|v| (v - 1.0).abs() < 1e-15), "{x:?}");
        // [[1, 2, 3], [4, 5, 6], [7, 8, 10]] pivots its rows in a 3-cycle;
        // x = (1, 2, 3) gives b = (14, 32, 53).
        let x3 = run_blocking(Device::Cpu, || {
            let a = f64_matrix(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0], 3, 3)?;
            let (p, _, _) = linalg::lu(&a)?;
            let b = from_f64s(&[14.0, 32.0, 53.0], &[3])?;
            let x = solve(&a, &b, None, Dtype::Float64)?;
            Ok((indices(&p)?, x.as_slice::<f64>().to_vec()))
        })
        .unwrap();
        assert_eq!(x3.0, [1, 2, 0]);
        for (got, want) in x3.1.iter().zip([1.0, 2.0, 3.0]) {
            assert!((got - want).abs() < 1e-13, "{:?}", x3.1);
        }
        // [1, 0]: (5, -4) / 6; for 2·a, half of each
        let (p, q) = ((5.0f64 / 6.0) as f32, (-4.0f64 / 6.0) as f32);
        let (p2, q2) = ((5.0f64 / 12.0) as f32, (-4.0f64 / 12.0) as f32);
        assert_eq!(xs, [1.0, p, 1.0, q, 0.5, p2, 0.5, q2]);
    }

    #[test]
    fn singular_systems_are_refused() {
        let err = run_blocking(Device::Cpu, || {
            let a = f64_matrix(&[1.0, 2.0, 2.0, 4.0], 2, 2)?;
            let b = from_f64s(&[1.0, 2.0], &[2])?;
            Ok(solve(&a, &b, None, Dtype::Float32).unwrap_err())
        })
        .unwrap();
        assert_eq!(err.to_string(), "a: can't solve for singular matrix");
    }

    #[test]
    fn cholesky_runs_in_the_working_precision() {
        let (l32, l64) = run_blocking(Device::Cpu, || {
            let a = f64_matrix(&[4.0, 2.0, 2.0, 3.0], 2, 2)?;
            let l32 = cholesky(&a.as_dtype(Dtype::Float32)?, false, Dtype::Float32)?;
            let l64 = cholesky(&a, false, Dtype::Float64)?;
            Ok((
                l32.as_slice::<f32>().to_vec(),
                l64.as_slice::<f64>().to_vec(),
            ))
        })
        .unwrap();
        // [[4, 2], [2, 3]] = l·lᵀ, l = [[2, 0], [1, √2]]
        assert_eq!(l32, [2.0, 0.0, 1.0, std::f32::consts::SQRT_2]);
        let s2 = std::f64::consts::SQRT_2;
        assert!(l64[..3] == [2.0, 0.0, 1.0] && (l64[3] - s2).abs() <= 2.0 * f64::EPSILON);
    }

    #[test]
    fn halves_are_rounded_from_f64_directly() {
        // 1 + 2⁻¹¹ + 2⁻⁴⁰ lies just above the midpoint of f16's 1 and
        // 1 + 2⁻¹⁰: rounded once it is 1 + 2⁻¹⁰. Through f32 it would first
        // become the midpoint 1 + 2⁻¹¹, then 1 (ties to even).
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        let bits = run_blocking(Device::Cpu, move || {
            let a = from_f64s(&[x], &[1])?;
            Ok(round_once(&a, Dtype::Float16)?.as_slice::<half::f16>()[0].to_bits())
        })
        .unwrap();
        assert_eq!(bits, half::f16::from_f32(1.0 + 2f32.powi(-10)).to_bits());

        // Exact values, both sides of a bf16 midpoint, NaN and overflow.
        let third = 1.0f64 / 3.0;
        let cases = [
            (1.5, 1.5f32),
            (-0.0, -0.0),
            (1.0 + 2f64.powi(-8) + 2f64.powi(-40), 1.0 + 2f32.powi(-7)),
            (1.0 + 2f64.powi(-8) - 2f64.powi(-40), 1.0),
            (1e300, f32::INFINITY),
            (-1e300, f32::NEG_INFINITY),
            (third, 171.0 / 512.0),
        ];
        for (x, want) in cases {
            let got = half::bf16::from_f32(to_f32_odd(x)).to_f32();
            assert_eq!(got.to_bits(), want.to_bits(), "{x}: {got} vs {want}");
        }
        assert!(half::bf16::from_f32(to_f32_odd(f64::NAN)).is_nan());
    }

    #[test]
    fn eigh_orders_by_magnitude() {
        let (w, v) = run_blocking(Device::Cpu, || {
            let a = f64_matrix(&[1.0, 0.0, 0.0, -3.0], 2, 2)?;
            let (w, v) = eigh(&a, Dtype::Float64)?;
            Ok((w.as_slice::<f64>().to_vec(), v.as_slice::<f64>().to_vec()))
        })
        .unwrap();
        // diag(1, -3): |-3| > |1|, so -3 first, its vector e₁ (positive)
        assert_eq!(w, [-3.0, 1.0]);
        assert_eq!(v, [0.0, 1.0, 1.0, 0.0]);
    }

    #[test]
    fn determinants_of_small_integer_matrices() {
        // The two 4 × 4 matrices of Nx's determinant example (both 630), a
        // row swap of the identity (-1) and a singular matrix (0).
        let dets = run_blocking(Device::Cpu, || {
            let values: Vec<f64> = [
                [2, 4, 6, 7, 5, 1, 8, 8, 1, 7, 3, 1, 3, 9, 2, 4],
                [2, 5, 1, 3, 4, 1, 7, 9, 6, 8, 3, 2, 7, 8, 1, 4],
                [0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1],
                [1, 2, 3, 4, 2, 4, 6, 8, 0, 1, 0, 1, 1, 0, 0, 1],
            ]
            .iter()
            .flatten()
            .map(|&x| x as f64)
            .collect();
            let a = from_f64s(&values, &[4, 4, 4])?;
            let f64_dets = determinant(&a, Dtype::Float64)?.as_slice::<f64>().to_vec();
            let f32_dets = determinant(&a, Dtype::Float32)?.as_slice::<f32>().to_vec();
            Ok((f64_dets, f32_dets))
        })
        .unwrap();
        // f64: within the LU's rounding
        for (got, want) in dets.0.iter().zip([630.0, 630.0, -1.0, 0.0]) {
            assert!((got - want).abs() <= 1e-12 * 630.0, "{:?}", dets.0);
        }
        // f32: the LU runs in f32, its diagonal's product in f64
        assert_eq!(dets.1[2..], [-1.0, 0.0]);
        for got in &dets.1[..2] {
            assert!((got - 630.0).abs() <= 1e-4, "{:?}", dets.1);
        }
    }

    #[test]
    fn small_determinants_use_the_explicit_formula() {
        let dets = run_blocking(Device::Cpu, || {
            let two = f64_matrix(&[1.0, 2.0, 3.0, 4.0], 2, 2)?.as_dtype(Dtype::Float32)?;
            let three = f64_matrix(&[1.0, 2.0, 3.0, 1.0, -2.0, 3.0, 7.0, 8.0, 9.0], 3, 3)?;
            let singular = f64_matrix(&[1.0, 0.0, 3.0, 0.0], 2, 2)?;
            Ok([
                determinant(&two, Dtype::Float32)?.as_slice::<f32>()[0],
                determinant(&three.as_dtype(Dtype::Float32)?, Dtype::Float32)?.as_slice::<f32>()[0],
                determinant(&singular, Dtype::Float32)?.as_slice::<f32>()[0],
            ])
        })
        .unwrap();
        // 1·4 - 2·3; -18 + 42 + 24 + 42 - 18 - 24 = 48 (rule of Sarrus)
        assert_eq!(dets[..2], [-2.0, 48.0]);
        assert_eq!(dets[2].to_bits(), 0.0f32.to_bits());
    }

    #[test]
    fn permutation_parity() {
        assert!(!odd_permutation(&[0, 1, 2]));
        assert!(odd_permutation(&[1, 0, 2]));
        assert!(!odd_permutation(&[1, 2, 0]));
        // (0 3)(1 2): two swaps; a 4-cycle: three
        assert!(!odd_permutation(&[3, 2, 1, 0]));
        assert!(odd_permutation(&[1, 2, 3, 0]));
        assert!(!odd_permutation(&[]));
    }

    #[test]
    fn integer_and_complex_inputs() {
        let err = run_blocking(Device::Cpu, || {
            // integers are computed in f64 like any real input
            let a = Array::from_slice(&[4i32, 2, 2, 3], &[2, 2]);
            let det = determinant(&a, Dtype::Float32)?;
            assert_eq!(det.as_slice::<f32>(), [8.0]);
            let c = a.as_dtype(Dtype::Complex64)?;
            Ok(determinant(&c, Dtype::Float32).unwrap_err())
        })
        .unwrap();
        assert_eq!(err.kind(), "type");
    }
}
