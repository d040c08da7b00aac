//! Linear algebra.

use mlx_rs::{linalg, ops, Array};

use crate::dtype::display_shape;
use crate::error::{Error, Result};

/// Matrix product with NumPy semantics (batched over leading axes).
pub fn matmul(a: &Array, b: &Array) -> Result<Array> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(Error::arg("a", "matmul needs tensors of rank 1 or more"));
    }
    let k_a = a.shape()[a.ndim() - 1];
    let k_b = if b.ndim() == 1 {
        b.shape()[0]
    } else {
        b.shape()[b.ndim() - 2]
    };
    if k_a != k_b {
        return Err(Error::arg(
            "b",
            format!(
                "cannot multiply {} by {}: contracted dimensions {k_a} and {k_b} differ",
                display_shape(a.shape()),
                display_shape(b.shape())
            ),
        ));
    }
    let inexact = |d: mlx_rs::Dtype| d.is_float() || d.is_complex();
    if inexact(a.dtype()) || inexact(b.dtype()) {
        return Ok(ops::matmul(a, b)?);
    }
    integer_matmul(a, b)
}

/// MLX's matmul takes only floating types; integers (and bools) are multiplied
/// exactly here as a broadcast product summed over the contracted axis, with
/// the wrap-around of the promoted integer type (as Nx does), never through a
/// float.
fn integer_matmul(a: &Array, b: &Array) -> Result<Array> {
    let out_dtype = ops::multiply(
        Array::from_int(1).as_dtype(a.dtype())?,
        Array::from_int(1).as_dtype(b.dtype())?,
    )?
    .dtype();
    // Promote vectors to matrices, as matmul does, and remember to drop the axes.
    let a2 = if a.ndim() == 1 {
        a.reshape(&[1, a.shape()[0]])?
    } else {
        a.clone()
    };
    let b2 = if b.ndim() == 1 {
        b.reshape(&[b.shape()[0], 1])?
    } else {
        b.clone()
    };
    // [..., n, k, 1] * [..., 1, k, m] summed over k.
    let lhs = ops::expand_dims_axes(&a2, &[-1])?;
    let rhs = ops::expand_dims_axes(&b2, &[-3])?;
    let product = ops::multiply(&lhs, &rhs)?.as_dtype(out_dtype)?;
    let mut out = product.sum_axes(&[-2], false)?.as_dtype(out_dtype)?;
    if b.ndim() == 1 {
        out = ops::squeeze_axes(&out, &[-1])?;
    }
    if a.ndim() == 1 {
        out = ops::squeeze_axes(&out, &[-2 + (b.ndim() == 1) as i32])?;
    }
    Ok(out)
}

/// Checks that `a` is a (batch of) square matrix of a floating type.
fn check_square(name: &'static str, a: &Array) -> Result<()> {
    let n = a.ndim();
    let square = n >= 2 && a.shape()[n - 1] == a.shape()[n - 2];
    check_shape(name, a, square, "square matrices")
}

/// Checks that `a` is a (batch of) matrix of a floating type.
fn check_matrix(name: &'static str, a: &Array) -> Result<()> {
    check_shape(name, a, a.ndim() >= 2, "a matrix (rank 2 or more)")
}

fn check_shape(name: &'static str, a: &Array, ok: bool, needs: &str) -> Result<()> {
    if !ok {
        return Err(Error::arg(
            name,
            format!("needs {needs}, got shape {}", display_shape(a.shape())),
        ));
    }
    check_float(name, a)
}

fn check_float(name: &'static str, a: &Array) -> Result<()> {
    if a.dtype().is_float() || a.dtype().is_complex() {
        Ok(())
    } else {
        Err(Error::Type(format!(
            "{name}: linear algebra needs a floating type, got {}",
            crate::dtype::display(a.dtype())
        )))
    }
}

/// `x` with `a · x = b`: a general solve, or a triangular one when
/// `triangular` says which triangle (`Some(true)`: upper).
pub fn solve_general(a: &Array, b: &Array, triangular: Option<bool>) -> Result<Array> {
    match triangular {
        None => solve(a, b),
        Some(upper) => solve_triangular(a, b, upper),
    }
}

/// Lower (or upper) Cholesky factor of a symmetric positive-definite matrix.
pub fn cholesky(a: &Array, upper: bool) -> Result<Array> {
    check_square("tensor", a)?;
    Ok(linalg::cholesky(a, Some(upper))?)
}

/// `(q, r)` with `q` orthonormal and `r` upper triangular ("reduced" mode).
pub fn qr(a: &Array) -> Result<(Array, Array)> {
    check_matrix("tensor", a)?;
    Ok(linalg::qr(a)?)
}

/// Eigenvalues (ascending) and eigenvectors of a symmetric matrix.
pub fn eigh(a: &Array) -> Result<(Array, Array)> {
    check_square("tensor", a)?;
    Ok(linalg::eigh(a, None)?)
}

/// `(u, s, vt)` with `a = u · diag(s) · vt` (full matrices).
pub fn svd(a: &Array) -> Result<(Array, Array, Array)> {
    check_matrix("tensor", a)?;
    Ok(linalg::svd(a)?)
}

/// `(p, l, u)`: the row permutation (as indices), unit lower and upper factors.
pub fn lu(a: &Array) -> Result<(Array, Array, Array)> {
    check_square("tensor", a)?;
    Ok(linalg::lu(a)?)
}

/// `x` with `a · x = b`.
pub fn solve(a: &Array, b: &Array) -> Result<Array> {
    check_square("a", a)?;
    Ok(linalg::solve(a, b)?)
}

pub fn inv(a: &Array) -> Result<Array> {
    check_square("tensor", a)?;
    Ok(linalg::inv(a)?)
}

/// Inverse of a triangular matrix.
pub fn tri_inv(a: &Array, upper: bool) -> Result<Array> {
    check_square("tensor", a)?;
    Ok(linalg::tri_inv(a, Some(upper))?)
}

/// `x` with `a · x = b` for triangular `a`.
pub fn solve_triangular(a: &Array, b: &Array, upper: bool) -> Result<Array> {
    check_square("a", a)?;
    Ok(linalg::solve_triangular(a, b, upper)?)
}

pub fn determinant(a: &Array) -> Result<Array> {
    check_square("tensor", a)?;
    Ok(linalg::det(a)?)
}

/// Contracts `axes_a` of `a` with `axes_b` of `b` (pairwise).
pub fn tensordot(a: &Array, b: &Array, axes_a: &[i64], axes_b: &[i64]) -> Result<Array> {
    if axes_a.len() != axes_b.len() {
        return Err(Error::arg(
            "axes",
            format!(
                "{} axes of a against {} axes of b",
                axes_a.len(),
                axes_b.len()
            ),
        ));
    }
    let axes_a = super::check_axes("axes_a", axes_a, a.ndim())?;
    let axes_b = super::check_axes("axes_b", axes_b, b.ndim())?;
    for (&i, &j) in axes_a.iter().zip(&axes_b) {
        let (m, n) = (a.shape()[i as usize], b.shape()[j as usize]);
        if m != n {
            return Err(Error::arg(
                "axes",
                format!("axis {i} of a has size {m}, axis {j} of b has size {n}"),
            ));
        }
    }
    let inexact = |d: mlx_rs::Dtype| d.is_float() || d.is_complex();
    if inexact(a.dtype()) || inexact(b.dtype()) {
        return Ok(ops::tensordot_axes(a, b, &axes_a, &axes_b)?);
    }
    // Integers: move the contracted axes to the end of a / the front of b and
    // use the exact integer matmul.
    let free_a: Vec<i32> = (0..a.ndim() as i32)
        .filter(|i| !axes_a.contains(i))
        .collect();
    let free_b: Vec<i32> = (0..b.ndim() as i32)
        .filter(|i| !axes_b.contains(i))
        .collect();
    let k: i32 = axes_a.iter().map(|&i| a.shape()[i as usize]).product();
    let lhs_perm: Vec<i32> = free_a.iter().chain(&axes_a).copied().collect();
    let rhs_perm: Vec<i32> = axes_b.iter().chain(&free_b).copied().collect();
    let out_shape: Vec<i32> = free_a
        .iter()
        .map(|&i| a.shape()[i as usize])
        .chain(free_b.iter().map(|&i| b.shape()[i as usize]))
        .collect();
    let lhs = ops::transpose_axes(a, &lhs_perm)?.reshape(&[-1, k])?;
    let rhs = ops::transpose_axes(b, &rhs_perm)?.reshape(&[k, -1])?;
    Ok(integer_matmul(&lhs, &rhs)?.reshape(&out_shape)?)
}

/// Einstein summation (`"ij,jk->ik"`).
pub fn einsum(subscripts: &str, operands: &[Array]) -> Result<Array> {
    Ok(ops::einsum(subscripts, operands)?)
}

#[cfg(test)]
mod timing {
    use super::*;

    /// `cargo test -p ex_mlx_core -- --ignored --nocapture time_matmul`:
    /// matmul GFLOPS through the worker, without the BEAM (a measurement).
    #[test]
    #[ignore]
    fn time_matmul() {
        use crate::device::Device;
        use crate::worker::run_blocking;
        let n = 1024;
        let gflops = run_blocking(Device::Cpu, move || {
            // (mlx-rs's random module needs a macOS-only clock symbol)
            let values: Vec<f32> = (0..n * n).map(|i| (i % 97) as f32 * 0.01).collect();
            let a = Array::from_slice(&values, &[n, n]);
            a.eval()?;
            let mut times = vec![];
            for _ in 0..15 {
                let t = std::time::Instant::now();
                matmul(&a, &a)?.eval()?;
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
            Ok(2.0 * (n as f64).powi(3) / times[7] / 1e9)
        })
        .unwrap();
        println!("matmul {n}: {gflops:.1} GFLOPS");
    }
}
