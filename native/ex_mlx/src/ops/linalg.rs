//! Linear algebra: `matmul(tag, a, b)`, MLX's factorisations and solves
//! (`linalg`, `solve`) and ExMLX.Backend's (`nx_linalg`, `nx_qr`, `nx_solve`).

use ex_mlx_core::ops::{linalg, nx_linalg};
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit};
use crate::tensor::{common_device, NewTensor};
use crate::term::decode_tensor;

#[rustler::nif]
fn matmul<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    a: Term<'a>,
    b: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let device = common_device(&[&a, &b])?;
        submit(env, tag, device, move || {
            NewTensor::new(linalg::matmul(&a.array()?, &b.array()?)?, device)
        })
    })())
}

/// `linalg(tag, op, t, upper?)`: single-matrix factorisations and inverses.
/// Replies with a list of tensors (`[l]`, `[q, r]`, `[u, s, vt]`, ...).
#[rustler::nif]
fn linalg<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    upper: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let op = crate::term::decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let upper = crate::term::decode_bool("upper", upper)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let a = t.array()?;
            let outs = match op.as_str() {
                "cholesky" => vec![linalg::cholesky(&a, upper)?],
                "qr" => {
                    let (q, r) = linalg::qr(&a)?;
                    vec![q, r]
                }
                "eigh" => {
                    let (w, v) = linalg::eigh(&a)?;
                    vec![w, v]
                }
                "svd" => {
                    let (u, s, vt) = linalg::svd(&a)?;
                    vec![u, s, vt]
                }
                "lu" => {
                    let (p, l, u) = linalg::lu(&a)?;
                    vec![p, l, u]
                }
                "inv" => vec![linalg::inv(&a)?],
                "tri_inv" => vec![linalg::tri_inv(&a, upper)?],
                "determinant" => vec![linalg::determinant(&a)?],
                other => {
                    return Err(ex_mlx_core::ops::unknown_op(
                        "linalg op",
                        other,
                        &[
                            "cholesky",
                            "qr",
                            "eigh",
                            "svd",
                            "lu",
                            "inv",
                            "tri_inv",
                            "determinant",
                        ],
                    ))
                }
            };
            outs.into_iter()
                .map(|o| NewTensor::new(o, device))
                .collect::<Result<Vec<_>, _>>()
        })
    })())
}

/// `nx_linalg(tag, op, t, out_type)`: ExMLX.Backend's factorisations, in
/// f64 with results rounded once to `out_type` (see
/// `ex_mlx_core::ops::nx_linalg`). Replies with a list of tensors: `[l]`
/// (`:cholesky`), `[w, v]` (`:eigh`), `[u, s, vt]` (`:svd`), `[p, l, u]`
/// (`:lu`), `[det]` (`:determinant`).
#[rustler::nif]
fn nx_linalg<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    op: Term<'a>,
    t: Term<'a>,
    out_type: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let op = crate::term::decode_op(op)?;
        let t = decode_tensor("tensor", t)?;
        let out = crate::term::decode_type("out_type", out_type)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let a = t.array()?;
            let outs = match op.as_str() {
                "cholesky" => vec![nx_linalg::cholesky(&a, false, out)?],
                "eigh" => {
                    let (w, v) = nx_linalg::eigh(&a, out)?;
                    vec![w, v]
                }
                "svd" => {
                    let (u, s, vt) = nx_linalg::svd(&a, out)?;
                    vec![u, s, vt]
                }
                "lu" => {
                    let (p, l, u) = nx_linalg::lu(&a, out)?;
                    vec![p, l, u]
                }
                "determinant" => vec![nx_linalg::determinant(&a, out)?],
                other => {
                    return Err(ex_mlx_core::ops::unknown_op(
                        "nx_linalg op",
                        other,
                        &["cholesky", "eigh", "svd", "lu", "determinant"],
                    ))
                }
            };
            outs.into_iter()
                .map(|o| NewTensor::new(o, device))
                .collect::<Result<Vec<_>, _>>()
        })
    })())
}

/// `nx_qr(tag, t, complete, eps, out_type)`: Nx's Householder QR, `[q, r]`.
#[rustler::nif]
fn nx_qr<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    complete: Term<'a>,
    eps: Term<'a>,
    out_type: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let complete = crate::term::decode_bool("complete", complete)?;
        let eps = crate::term::decode_number("eps", eps)?;
        let out = crate::term::decode_type("out_type", out_type)?;
        let device = t.device;
        submit(env, tag, device, move || {
            let (q, r) = nx_linalg::qr(&t.array()?, complete, eps, out)?;
            Ok(vec![NewTensor::new(q, device)?, NewTensor::new(r, device)?])
        })
    })())
}

/// `nx_solve(tag, a, b, triangular, out_type)`: `x` with `a · x = b` in f64,
/// rounded once to `out_type`; `triangular` is `nil`, `:lower` or `:upper`.
#[rustler::nif]
fn nx_solve<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    a: Term<'a>,
    b: Term<'a>,
    triangular: Term<'a>,
    out_type: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let kind = decode_triangular(triangular)?;
        let out = crate::term::decode_type("out_type", out_type)?;
        let device = common_device(&[&a, &b])?;
        submit(env, tag, device, move || {
            NewTensor::new(
                nx_linalg::solve(&a.array()?, &b.array()?, kind, out)?,
                device,
            )
        })
    })())
}

/// `nil` (a general matrix), `:lower` or `:upper` as `None`, `Some(false)`,
/// `Some(true)` (whether the matrix is upper triangular).
fn decode_triangular(term: Term) -> Result<Option<bool>, ex_mlx_core::Error> {
    match term.atom_to_string().ok().as_deref() {
        Some("nil") => Ok(None),
        Some("lower") => Ok(Some(false)),
        Some("upper") => Ok(Some(true)),
        _ => Err(ex_mlx_core::Error::arg(
            "triangular",
            format!(
                "expected nil, :lower or :upper, got: {}",
                crate::term::show(term)
            ),
        )),
    }
}

/// `solve(tag, a, b, triangular)`: `triangular` is `nil`, `:lower` or `:upper`.
#[rustler::nif]
fn solve<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    a: Term<'a>,
    b: Term<'a>,
    triangular: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let kind = decode_triangular(triangular)?;
        let device = common_device(&[&a, &b])?;
        submit(env, tag, device, move || {
            let out = match kind {
                None => linalg::solve(&a.array()?, &b.array()?)?,
                Some(upper) => linalg::solve_triangular(&a.array()?, &b.array()?, upper)?,
            };
            NewTensor::new(out, device)
        })
    })())
}

/// `tensordot(tag, a, b, axes_a, axes_b)`.
#[rustler::nif]
fn tensordot<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    a: Term<'a>,
    b: Term<'a>,
    axes_a: Term<'a>,
    axes_b: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let a = decode_tensor("a", a)?;
        let b = decode_tensor("b", b)?;
        let axes_a = crate::term::decode_ints("axes_a", axes_a)?;
        let axes_b = crate::term::decode_ints("axes_b", axes_b)?;
        let device = common_device(&[&a, &b])?;
        submit(env, tag, device, move || {
            NewTensor::new(
                linalg::tensordot(&a.array()?, &b.array()?, &axes_a, &axes_b)?,
                device,
            )
        })
    })())
}

/// `einsum(tag, subscripts, tensors)`.
#[rustler::nif]
fn einsum<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    subscripts: Term<'a>,
    tensors: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let subscripts: String = subscripts.decode().map_err(|_| {
            ex_mlx_core::Error::arg(
                "subscripts",
                format!("expected a string, got: {}", crate::term::show(subscripts)),
            )
        })?;
        let tensors = crate::term::decode_tensors("tensors", tensors)?;
        let refs: Vec<_> = tensors.iter().collect();
        if refs.is_empty() {
            return Err(ex_mlx_core::Error::arg(
                "tensors",
                "needs at least one tensor",
            ));
        }
        let device = common_device(&refs)?;
        submit(env, tag, device, move || {
            let arrays: Vec<_> = tensors
                .iter()
                .map(|t| t.array())
                .collect::<std::result::Result<_, _>>()?;
            NewTensor::new(linalg::einsum(&subscripts, &arrays)?, device)
        })
    })())
}

/// `conv(tag, input, kernel, strides, padding, kernel_dilation, input_dilation, groups)`.
#[allow(clippy::too_many_arguments)]
#[rustler::nif]
fn conv<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    input: Term<'a>,
    kernel: Term<'a>,
    strides: Term<'a>,
    padding: Term<'a>,
    kernel_dilation: Term<'a>,
    input_dilation: Term<'a>,
    groups: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let input = decode_tensor("input", input)?;
        let kernel = decode_tensor("kernel", kernel)?;
        let strides = crate::term::decode_ints("strides", strides)?;
        let padding: Vec<(i64, i64)> = padding.decode().map_err(|_| {
            ex_mlx_core::Error::arg(
                "padding",
                format!(
                    "expected a list of {{low, high}} pairs, got: {}",
                    crate::term::show(padding)
                ),
            )
        })?;
        let kernel_dilation = crate::term::decode_ints("kernel_dilation", kernel_dilation)?;
        let input_dilation = crate::term::decode_ints("input_dilation", input_dilation)?;
        let groups = crate::term::decode_int("groups", groups)?;
        let device = common_device(&[&input, &kernel])?;
        submit(env, tag, device, move || {
            let out = ex_mlx_core::ops::conv::conv_general(
                &input.array()?,
                &kernel.array()?,
                &strides,
                &padding,
                &kernel_dilation,
                &input_dilation,
                groups,
            )?;
            NewTensor::new(out, device)
        })
    })())
}
