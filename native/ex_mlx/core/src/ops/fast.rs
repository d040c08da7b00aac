//! MLX's fused kernels for what models compute at every layer: one kernel
//! where the composed ops take several (ExMLX.Compiler recognises the
//! composed forms under `fuse: true`: docs/numerics.md says how their
//! results differ).

use mlx_rs::{ops, Array};

use super::check_axis;
use crate::dtype::{display, display_shape};
use crate::error::{Error, Result};

/// `x / sqrt(mean(x², last axis) + eps) · weight` (MLX's `fast::rms_norm`):
/// `x` floating, of rank 1 or more, `weight` of shape `{d}` for `x`'s last
/// dimension `d`.
pub fn rms_norm(x: &Array, weight: &Array, eps: f64) -> Result<Array> {
    check_floating("tensor", x)?;
    check_floating("weight", weight)?;
    let d = match x.shape().last() {
        Some(&d) => d,
        None => {
            return Err(Error::arg(
                "tensor",
                "rms_norm needs a tensor of rank 1 or more",
            ))
        }
    };
    if weight.shape() != [d] {
        return Err(Error::arg(
            "weight",
            format!(
                "rms_norm needs a weight of shape {{{d}}} for a tensor of shape {}, got {}",
                display_shape(x.shape()),
                display_shape(weight.shape())
            ),
        ));
    }
    Ok(mlx_rs::fast::rms_norm(x, Some(weight), eps as f32)?)
}

/// `exp(x - max) / sum(exp(x - max))` over `axes` (MLX's `softmax`, in
/// float32 for half-precision inputs: `precise`).
pub fn softmax(x: &Array, axes: &[i64]) -> Result<Array> {
    check_floating("tensor", x)?;
    let axes = axes
        .iter()
        .map(|&a| check_axis("axes", a, x.ndim()))
        .collect::<Result<Vec<i32>>>()?;
    Ok(ops::softmax_axes(x, &axes, true)?)
}

fn check_floating(name: &'static str, a: &Array) -> Result<()> {
    if a.dtype().is_float() {
        Ok(())
    } else {
        Err(Error::Type(format!(
            "{name}: needs a floating-point type, got {}",
            display(a.dtype())
        )))
    }
}
