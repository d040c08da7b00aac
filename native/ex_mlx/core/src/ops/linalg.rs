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
        return float_matmul(a, b);
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

/// `out`, or, when it has no elements, zeros of its shape and type made
/// without running its kernel: MLX 0.32's CPU kernels of `lu`, `inv`,
/// `tri_inv` and `solve` divide by the matrix size, so a 0 × 0 matrix ended
/// the process (SIGFPE).
fn no_elements(out: Array) -> Result<Array> {
    if out.size() == 0 {
        Ok(ops::zeros_dtype(out.shape(), out.dtype())?)
    } else {
        Ok(out)
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
    let (p, l, u) = linalg::lu(a)?;
    Ok((no_elements(p)?, no_elements(l)?, no_elements(u)?))
}

/// `x` with `a · x = b`.
pub fn solve(a: &Array, b: &Array) -> Result<Array> {
    check_square("a", a)?;
    no_elements(linalg::solve(a, b)?)
}

pub fn inv(a: &Array) -> Result<Array> {
    check_square("tensor", a)?;
    no_elements(linalg::inv(a)?)
}

/// Inverse of a triangular matrix.
pub fn tri_inv(a: &Array, upper: bool) -> Result<Array> {
    check_square("tensor", a)?;
    no_elements(linalg::tri_inv(a, Some(upper))?)
}

/// `x` with `a · x = b` for triangular `a`.
pub fn solve_triangular(a: &Array, b: &Array, upper: bool) -> Result<Array> {
    check_square("a", a)?;
    no_elements(linalg::solve_triangular(a, b, upper)?)
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
        if let Some(product) = matmul_form(a, b, &axes_a, &axes_b)? {
            return Ok(product);
        }
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
    // (sizes spelled out: MLX cannot infer a -1 next to a 0)
    let rows: i32 = free_a.iter().map(|&i| a.shape()[i as usize]).product();
    let cols: i32 = free_b.iter().map(|&i| b.shape()[i as usize]).product();
    let lhs = ops::transpose_axes(a, &lhs_perm)?.reshape(&[rows, k])?;
    let rhs = ops::transpose_axes(b, &rhs_perm)?.reshape(&[k, cols])?;
    Ok(integer_matmul(&lhs, &rhs)?.reshape(&out_shape)?)
}

/// A one-axis contraction as one `matmul` of `a` and `b` or their
/// transposed views, or `None` when it has no such form. `a` is contracted on
/// either axis of a matrix or on the last axis of any rank, `b` on either
/// axis of a matrix or on a vector. MLX's tensordot transposes and reshapes
/// its operands first, and the reshape copies a transposed one (a weight
/// matrix, in the `x · Wᵀ` and `xᵀ · dy` products of a gradient); matmul reads
/// a transposed view in place.
fn matmul_form(a: &Array, b: &Array, axes_a: &[i32], axes_b: &[i32]) -> Result<Option<Array>> {
    let (&[i], &[j]) = (axes_a, axes_b) else {
        return Ok(None);
    };
    let (rank_a, rank_b) = (a.ndim() as i32, b.ndim() as i32);
    if rank_b > 2 || (rank_a > 2 && i != rank_a - 1) {
        return Ok(None);
    }
    let lhs = if rank_a == 2 && i == 0 {
        ops::swap_axes(a, 0, 1)?
    } else {
        a.clone()
    };
    let rhs = if rank_b == 2 && j == 1 {
        ops::swap_axes(b, 0, 1)?
    } else {
        b.clone()
    };
    Ok(Some(float_matmul(&lhs, &rhs)?))
}

/// MLX's matmul of floating tensors, or one row or column times a float32
/// matrix computed in one pass on the CPU (crate::cpu_kernels decides).
fn float_matmul(a: &Array, b: &Array) -> Result<Array> {
    match crate::cpu_kernels::vector_product(a, b)? {
        Some(product) => Ok(product),
        None => Ok(ops::matmul(a, b)?),
    }
}

/// Einstein summation (`"ij,jk->ik"`).
pub fn einsum(subscripts: &str, operands: &[Array]) -> Result<Array> {
    Ok(ops::einsum(subscripts, operands)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element `index` (row-major) of a tensor of `shape` whose elements
    /// are `values`.
    fn at(values: &[f32], shape: &[usize], index: &[usize]) -> f32 {
        let flat = index.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i);
        values[flat]
    }

    /// Every index of `shape`, row-major.
    fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
        shape.iter().fold(vec![vec![]], |acc, &n| {
            acc.iter()
                .flat_map(|prefix| {
                    (0..n).map(move |i| {
                        let mut next = prefix.clone();
                        next.push(i);
                        next
                    })
                })
                .collect()
        })
    }

    /// The contraction of `a` on `i` with `b` on `j`, summed here element
    /// by element: the free axes of `a`, then those of `b`.
    fn contracted(
        (a, sa): (&[f32], &[usize]),
        (b, sb): (&[f32], &[usize]),
        i: usize,
        j: usize,
    ) -> (Vec<i32>, Vec<f32>) {
        let free = |s: &[usize], k: usize| -> Vec<usize> {
            s.iter()
                .enumerate()
                .filter(|&(n, _)| n != k)
                .map(|(_, &d)| d)
                .collect()
        };
        let (fa, fb) = (free(sa, i), free(sb, j));
        let shape: Vec<usize> = fa.iter().chain(&fb).copied().collect();
        let values = indices(&shape)
            .iter()
            .map(|index| {
                (0..sa[i])
                    .map(|k| {
                        let mut ia = index[..fa.len()].to_vec();
                        ia.insert(i, k);
                        let mut ib = index[fa.len()..].to_vec();
                        ib.insert(j, k);
                        at(a, sa, &ia) * at(b, sb, &ib)
                    })
                    .sum()
            })
            .collect();
        (shape.iter().map(|&d| d as i32).collect(), values)
    }

    /// The one-axis contractions that run as a matmul of (transposed)
    /// views, and a few that take MLX's tensordot, against sums by hand.
    #[test]
    fn one_axis_contractions_match_sums_by_hand() {
        let cases: &[(&[usize], &[usize], usize, usize)] = &[
            (&[2, 3], &[3, 4], 1, 0),
            (&[3, 2], &[3, 4], 0, 0),
            (&[2, 3], &[4, 3], 1, 1),
            (&[3, 2], &[4, 3], 0, 1),
            (&[3], &[3, 4], 0, 0),
            (&[3], &[4, 3], 0, 1),
            (&[2, 3], &[3], 1, 0),
            (&[3, 2], &[3], 0, 0),
            (&[3], &[3], 0, 0),
            (&[2, 5, 3], &[3, 4], 2, 0),
            (&[2, 5, 3], &[4, 3], 2, 1),
            (&[2, 5, 3], &[3], 2, 0),
            // no matmul form: MLX's tensordot
            (&[3, 5, 2], &[3, 4], 0, 0),
            (&[2, 3], &[4, 3, 2], 1, 1),
            (&[2, 0], &[0, 4], 1, 0),
        ];
        for &(sa, sb, i, j) in cases {
            let numbered = |s: &[usize], offset: f32| -> Vec<f32> {
                (0..s.iter().product::<usize>())
                    .map(|v| v as f32 * 0.5 + offset)
                    .collect()
            };
            let (va, vb) = (numbered(sa, 1.0), numbered(sb, -2.0));
            let dims = |s: &[usize]| s.iter().map(|&d| d as i32).collect::<Vec<_>>();
            let a = Array::from_slice(&va, &dims(sa));
            let b = Array::from_slice(&vb, &dims(sb));
            let out = tensordot(&a, &b, &[i as i64], &[j as i64]).unwrap();
            let (shape, expected) = contracted((&va, sa), (&vb, sb), i, j);
            let case = format!("{sa:?} axis {i} · {sb:?} axis {j}");
            assert_eq!(out.shape(), &shape[..], "{case}");
            assert_eq!(out.as_slice::<f32>(), &expected[..], "{case}");
        }
    }

    /// Integer contractions (the exact integer matmul) where an axis has
    /// size 0: sums over nothing are 0, and results with no elements have
    /// the shape the free axes give. (The reshape before the product read
    /// `-1` beside a 0, which MLX cannot infer: it raised instead.)
    #[test]
    fn integer_contractions_over_empty_axes() {
        // (a's shape, b's shape, a's axis, b's axis, the result's shape)
        type Case<'a> = (&'a [i32], &'a [i32], i64, i64, &'a [i32]);
        let cases: &[Case] = &[
            (&[3, 0], &[0, 4], 1, 0, &[3, 4]),
            (&[0, 3], &[3, 4], 1, 0, &[0, 4]),
            (&[2, 3], &[3, 0], 1, 0, &[2, 0]),
            (&[0], &[0], 0, 0, &[]),
        ];
        for &(sa, sb, i, j, shape) in cases {
            let sevens = |s: &[i32]| {
                let n: i32 = s.iter().product();
                Array::from_slice(&vec![7i32; n as usize], s)
            };
            let out = tensordot(&sevens(sa), &sevens(sb), &[i], &[j]).unwrap();
            out.eval().unwrap();
            assert_eq!(out.shape(), shape, "{sa:?} · {sb:?}");
            assert_eq!(out.dtype(), mlx_rs::Dtype::Int32);
            let n: i32 = shape.iter().product();
            if n > 0 {
                assert_eq!(out.as_slice::<i32>(), &vec![0; n as usize][..]);
            }
        }
    }
}
