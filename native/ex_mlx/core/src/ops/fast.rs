//! MLX's fused kernels for what models compute at every layer: one kernel
//! where the composed ops take several (ExMLX.Compiler recognises the
//! composed forms under `fuse: true`: docs/numerics.md says how their
//! results differ).

use mlx_rs::fast::ScaledDotProductAttentionMask;
use mlx_rs::{ops, Array, Dtype};

use super::admitted::Form;

use super::check_axis;
use crate::dtype::{broadcast_shape, display, display_shape, is_integer};
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

/// `softmax(scale · queries · keysᵀ + mask) · values` per batch and head
/// (MLX's `fast::scaled_dot_product_attention`): `queries` of shape
/// `{b, h, t_q, d}`, `keys` `{b, h_kv, t_kv, d}`, `values`
/// `{b, h_kv, t_kv, d_v}`, of one floating type, `h` a multiple of `h_kv`
/// (grouped-query attention: each key and value head serves `h / h_kv`
/// query heads); `mask` added to the scores, of that type (or boolean:
/// `false` excludes a key), broadcastable to `{b, h, t_q, t_kv}`. The
/// softmax is computed in float32. The result is `{b, h, t_q, d_v}`.
pub fn scaled_dot_product_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    mask: &Array,
    scale: f64,
) -> Result<Array> {
    check_attention(queries, keys, values)?;
    if mask.dtype() != Dtype::Bool && mask.dtype() != queries.dtype() {
        return Err(Error::Type(format!(
            "mask: scaled_dot_product_attention needs a boolean mask or one of the \
             queries' type ({}), got {}",
            display(queries.dtype()),
            display(mask.dtype())
        )));
    }
    check_mask_shape(
        "scaled_dot_product_attention",
        "mask",
        mask.shape(),
        queries,
        keys,
    )?;
    masked_attention(queries, keys, values, mask, scale)
}

/// `softmax(scale · queries · keysᵀ + bias) · values`, `bias` being 0 for
/// the keys `admitted` admits and the type's smallest finite value for the
/// others (Bumblebee's attention bias), for the operands of
/// [`scaled_dot_product_attention`] and a boolean `admitted` broadcastable
/// to the scores. The keys past the last admitted one, and a mask that
/// admits every key left, are not given to MLX (crate::ops::admitted):
/// `admitted`'s values are read for it (an evaluation, unless a program
/// knows them: [`attention_of_admitted`]).
pub fn attention_admitted(
    queries: &Array,
    keys: &Array,
    values: &Array,
    admitted: &Array,
    scale: f64,
) -> Result<Array> {
    check_attention(queries, keys, values)?;
    check_admitted(admitted.dtype(), admitted.shape(), queries, keys)?;
    let buffer = crate::host::HostBuffer::new(admitted)?;
    let known: Vec<bool> = buffer.bytes().iter().map(|&b| b != 0).collect();
    attention_of_admitted(queries, keys, values, &known, admitted.shape(), scale)
}

/// [`attention_admitted`] given the mask's values (row-major, of `shape`).
pub fn attention_of_admitted(
    queries: &Array,
    keys: &Array,
    values: &Array,
    admitted: &[bool],
    shape: &[i32],
    scale: f64,
) -> Result<Array> {
    check_attention(queries, keys, values)?;
    check_admitted(Dtype::Bool, shape, queries, keys)?;
    let (t_q, t_kv) = (queries.shape()[2] as usize, keys.shape()[2] as usize);
    let Some(plan) = super::admitted::plan(admitted, shape, t_q, t_kv) else {
        let bias = bias_of(admitted, shape, queries.dtype())?;
        return masked_attention(queries, keys, values, &bias, scale);
    };
    let (keys, values) = if plan.kept < t_kv {
        let first = |a: &Array| {
            let mut stops: Vec<i64> = a.shape().iter().map(|&d| d as i64).collect();
            stops[2] = plan.kept as i64;
            super::shape::slice(a, &[0; 4], &stops, &[1; 4])
        };
        (first(keys)?, first(values)?)
    } else {
        (keys.clone(), values.clone())
    };
    let scale = scale as f32;
    Ok(match plan.form {
        Form::All => {
            mlx_rs::fast::scaled_dot_product_attention(queries, &keys, &values, scale, None, None)?
        }
        Form::Causal => mlx_rs::fast::scaled_dot_product_attention(
            queries,
            &keys,
            &values,
            scale,
            ScaledDotProductAttentionMask::Causal,
            None,
        )?,
        Form::Mask(kept, kept_shape) => {
            let bias = bias_of(&kept, &kept_shape, queries.dtype())?;
            return masked_attention(queries, &keys, &values, &bias, scale as f64);
        }
    })
}

/// The additive mask of `admitted`: 0 where a key is admitted, the
/// smallest finite value of `dtype` where it is not.
fn bias_of(admitted: &[bool], shape: &[i32], dtype: Dtype) -> Result<Array> {
    let (zero, least): (&[u8], &[u8]) = match dtype {
        Dtype::Float32 => (&[0; 4], &[0xff, 0xff, 0x7f, 0xff]),
        Dtype::Float16 => (&[0; 2], &[0xff, 0xfb]),
        Dtype::Bfloat16 => (&[0; 2], &[0x7f, 0xff]),
        other => {
            return Err(Error::Type(format!(
                "queries: attention_admitted needs float32, float16 or bfloat16 queries, got {}",
                display(other)
            )))
        }
    };
    let bytes: Vec<u8> = admitted
        .iter()
        .flat_map(|&a| if a { zero } else { least }.iter().copied())
        .collect();
    crate::host::array_from_bytes(&bytes, shape, dtype)
}

/// The attention of [`scaled_dot_product_attention`] under the additive or
/// boolean `mask`, its operands checked.
fn masked_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    mask: &Array,
    scale: f64,
) -> Result<Array> {
    if cuda_one_masked_query(queries, values) {
        // (the same query twice, its first result row kept: see
        // cuda_one_masked_query)
        let twice = ops::concatenate(&[queries, queries], 2)?;
        let rows = mlx_rs::fast::scaled_dot_product_attention(
            &twice,
            keys,
            values,
            scale as f32,
            mask,
            None,
        )?;
        let mut stops: Vec<i64> = rows.shape().iter().map(|&d| d as i64).collect();
        stops[2] = 1;
        return super::shape::slice(&rows, &[0; 4], &stops, &[1; 4]);
    }
    Ok(mlx_rs::fast::scaled_dot_product_attention(
        queries,
        keys,
        values,
        scale as f32,
        mask,
        None,
    )?)
}

/// Checks the operands of an attention: `queries`, `keys` and `values` of
/// rank 4 and one floating type, of one batch size, keys and values of one
/// head count and length, queries and keys of one depth, the queries' head
/// count a multiple of the keys'.
fn check_attention(queries: &Array, keys: &Array, values: &Array) -> Result<()> {
    let named = [("queries", queries), ("keys", keys), ("values", values)];
    for (name, a) in named {
        check_floating(name, a)?;
        if a.ndim() != 4 {
            return Err(Error::arg(
                name,
                format!(
                    "scaled_dot_product_attention needs tensors of rank 4 \
                     ({{batch, heads, sequence, depth}}), got shape {}",
                    display_shape(a.shape())
                ),
            ));
        }
        if a.dtype() != queries.dtype() {
            return Err(Error::Type(format!(
                "{name}: scaled_dot_product_attention needs queries, keys and values of one \
                 type, got {} and {}",
                display(queries.dtype()),
                display(a.dtype())
            )));
        }
    }
    let (q, k, v) = (queries.shape(), keys.shape(), values.shape());
    let shapes = || {
        format!(
            "queries {}, keys {}, values {}",
            display_shape(q),
            display_shape(k),
            display_shape(v)
        )
    };
    if q[0] != k[0] || k[0] != v[0] || k[1] != v[1] || k[2] != v[2] || q[3] != k[3] {
        return Err(Error::arg(
            "keys",
            format!(
                "scaled_dot_product_attention needs one batch size, keys and values with \
                 one head count and sequence length, and queries and keys of one depth; \
                 got {}",
                shapes()
            ),
        ));
    }
    if k[1] == 0 || q[1] % k[1] != 0 {
        return Err(Error::arg(
            "keys",
            format!(
                "scaled_dot_product_attention needs the queries' head count to be a \
                 multiple of the keys' and values'; got {}",
                shapes()
            ),
        ));
    }
    Ok(())
}

/// Checks that `op`'s mask of `shape` broadcasts to the scores of
/// `queries` and `keys` (`{b, h, t_q, t_kv}`).
fn check_mask_shape(
    op: &str,
    name: &'static str,
    shape: &[i32],
    queries: &Array,
    keys: &Array,
) -> Result<()> {
    let (q, k) = (queries.shape(), keys.shape());
    let scores = [q[0], q[1], q[2], k[2]];
    if !broadcast_shape(shape, &scores).is_ok_and(|s| s == scores) {
        return Err(Error::arg(
            name,
            format!(
                "{op} needs a mask broadcastable to the scores' shape {}, got {}",
                display_shape(&scores),
                display_shape(shape)
            ),
        ));
    }
    Ok(())
}

/// Checks `attention_admitted`'s mask: boolean, broadcastable to the scores.
fn check_admitted(dtype: Dtype, shape: &[i32], queries: &Array, keys: &Array) -> Result<()> {
    if dtype != Dtype::Bool {
        return Err(Error::Type(format!(
            "admitted: attention_admitted needs a boolean mask, got {}",
            display(dtype)
        )));
    }
    check_mask_shape("attention_admitted", "admitted", shape, queries, keys)
}

/// Whether the attention of a single query row under a mask is given to
/// MLX as two equal query rows, of which the first result row is kept: on
/// a CUDA GPU (a GPU of a Linux build) for half-precision inputs of a depth
/// cuDNN takes (a multiple of 8, at most 128). MLX 0.32's CUDA backend
/// runs one query under a mask array through its composed form (a scaling,
/// two batched products, the mask's addition and a softmax: five kernels),
/// and two query rows under the same mask through one cuDNN attention: the
/// same softmax-weighted sum, computed by another kernel (its rounding
/// differs within half precision; docs/numerics.md). Measured in
/// bench/results/llm-gpu.md ("One query's masked attention through
/// cuDNN"); decision 0018.
fn cuda_one_masked_query(queries: &Array, values: &Array) -> bool {
    let (q, v) = (queries.shape(), values.shape());
    let depth_ok = |d: i32| d % 8 == 0 && d <= 128;
    cfg!(target_os = "linux")
        && q[2] == 1
        && matches!(queries.dtype(), Dtype::Bfloat16 | Dtype::Float16)
        && depth_ok(q[3])
        && depth_ok(v[3])
        && !crate::device::Device::current_is_cpu()
}

/// Rotary position embedding (MLX's `fast::rope`, not the traditional
/// interleaved form): for `tensor` of shape `{..., t, d}`, the first `dims`
/// features of the row at sequence position `p` (`offset` plus the row's
/// index along `t`) rotated in pairs `(i, i + dims/2)` by the angles
/// `p · scale / freqs[i]`: `x_i cos − x_{i+dims/2} sin` and
/// `x_{i+dims/2} cos + x_i sin`; features past `dims` are kept. `offset` is
/// an integer scalar, or `{b}` for `tensor`'s first axis `b` (one offset per
/// batch entry); `freqs` `{dims / 2}` floating. MLX computes in float32 and
/// rounds once to `tensor`'s type.
pub fn rope(
    tensor: &Array,
    offset: &Array,
    freqs: &Array,
    dims: i64,
    traditional: bool,
    scale: f64,
) -> Result<Array> {
    check_floating("tensor", tensor)?;
    check_floating("freqs", freqs)?;
    let shape = tensor.shape();
    if shape.len() < 3 {
        return Err(Error::arg(
            "tensor",
            format!(
                "rope needs a tensor of rank 3 or more ({{..., sequence, features}}), got shape {}",
                display_shape(shape)
            ),
        ));
    }
    let features = i64::from(shape[shape.len() - 1]);
    if dims <= 0 || dims % 2 != 0 || dims > features {
        return Err(Error::arg(
            "dims",
            format!(
                "rope needs an even number of dimensions from 2 to the tensor's {features} \
                 features, got {dims}"
            ),
        ));
    }
    if freqs.shape() != [(dims / 2) as i32] {
        return Err(Error::arg(
            "freqs",
            format!(
                "rope needs freqs of shape {{{}}} for {dims} dimensions, got {}",
                dims / 2,
                display_shape(freqs.shape())
            ),
        ));
    }
    if !is_integer(offset.dtype()) {
        return Err(Error::Type(format!(
            "offset: rope needs an integer offset, got {}",
            display(offset.dtype())
        )));
    }
    let per_batch = offset.ndim() == 1 && offset.shape()[0] == shape[0];
    if !(offset.ndim() == 0 || per_batch) {
        return Err(Error::arg(
            "offset",
            format!(
                "rope needs a scalar offset or one per entry of the tensor's first axis ({{{}}}), \
                 got shape {}",
                shape[0],
                display_shape(offset.shape())
            ),
        ));
    }
    Ok(mlx_rs::fast::rope_dynamic(
        tensor,
        dims as i32,
        traditional,
        None,
        scale as f32,
        offset,
        freqs,
    )?)
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
