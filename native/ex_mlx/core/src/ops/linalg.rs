//! Linear algebra.

use mlx_rs::{ops, Array};

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
