//! MLX's affine quantization: a matrix's rows cut into groups of
//! `group_size` values, each group stored as `bits`-bit integers `q` with
//! one scale and one bias, standing for `scale · q + bias`; the integers
//! packed into unsigned 32-bit words, lowest bits first. The ops check what
//! MLX would refuse, and name it.

use mlx_rs::{ops, Array, Dtype};

use crate::dtype::{display, display_shape};
use crate::error::{Error, Result};

/// The bit widths MLX 0.32's affine mode packs.
pub const BITS: [i64; 6] = [2, 3, 4, 5, 6, 8];

/// The group sizes MLX 0.32's affine mode takes.
pub const GROUP_SIZES: [i64; 3] = [32, 64, 128];

/// `{packed, scales, biases}` of `w` (MLX's `quantize`): `w` floating
/// (float32, float16 or bfloat16), of rank 2 or more, its last axis a
/// multiple of `group_size`; `packed` is uint32 with `d · bits / 32` words
/// a row for a last axis of `d`, `scales` and `biases` of `w`'s type with
/// `d / group_size` values a row.
pub fn quantize(w: &Array, group_size: i64, bits: i64) -> Result<(Array, Array, Array)> {
    let (group_size, bits) = check_format(group_size, bits)?;
    if !matches!(w.dtype(), Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16) {
        return Err(Error::Type(format!(
            "tensor: quantize needs {{:f, 32}}, {{:f, 16}} or {{:bf, 16}}, got {}",
            display(w.dtype())
        )));
    }
    let last = last_axis("tensor", w, "quantize")?;
    if last % group_size != 0 {
        return Err(Error::arg(
            "tensor",
            format!(
                "quantize needs a last axis that is a multiple of the group size {group_size}, \
                 got shape {}",
                display_shape(w.shape())
            ),
        ));
    }
    Ok(ops::quantize(w, group_size, bits)?)
}

/// `scales · q + biases` for the integers `q` packed in `packed` (MLX's
/// `dequantize`), in the scales' type: `packed` uint32 of rank 2 or more,
/// `scales` and `biases` of one floating type and of `packed`'s shape but
/// for the last axis, which holds `last · 32 / bits / group_size` values.
pub fn dequantize(
    packed: &Array,
    scales: &Array,
    biases: &Array,
    group_size: i64,
    bits: i64,
) -> Result<Array> {
    let (group_size, bits) = check_format(group_size, bits)?;
    check_triple(packed, scales, biases, group_size, bits, "dequantize")?;
    Ok(ops::dequantize(packed, scales, biases, group_size, bits)?)
}

/// `x · dequantize(packed)ᵀ` (`transpose`, the layout of a linear layer's
/// weight `{out, in}`) or `x · dequantize(packed)` (MLX's
/// `quantized_matmul`), without making the dequantized matrix: `x`'s last
/// axis is the contracted one, its other axes batch.
pub fn quantized_matmul(
    x: &Array,
    packed: &Array,
    scales: &Array,
    biases: &Array,
    transpose: bool,
    group_size: i64,
    bits: i64,
) -> Result<Array> {
    let (group_size, bits) = check_format(group_size, bits)?;
    check_triple(packed, scales, biases, group_size, bits, "quantized_matmul")?;
    if x.dtype() != scales.dtype() {
        return Err(Error::Type(format!(
            "tensor: quantized_matmul needs a tensor of the scales' type {}, got {}",
            display(scales.dtype()),
            display(x.dtype())
        )));
    }
    let x_last = last_axis("tensor", x, "quantized_matmul")?;
    let rows = packed.shape()[packed.ndim() - 2];
    let columns = packed.shape()[packed.ndim() - 1] * 32 / bits;
    let contracted = if transpose { columns } else { rows };
    if x_last != contracted {
        return Err(Error::arg(
            "tensor",
            format!(
                "quantized_matmul needs a last axis of {contracted} for a quantized matrix \
                 of {rows} × {columns} (transpose: {transpose}), got shape {}",
                display_shape(x.shape())
            ),
        ));
    }
    if gpu_kernel_wrong(transpose, contracted, group_size)
        && !crate::device::Device::current_is_cpu()
    {
        // the same product of the stored values, through the dequantized
        // matrix (gpu_kernel_wrong says why)
        let w = ops::dequantize(packed, scales, biases, group_size, bits)?;
        let w = if transpose {
            let n = w.ndim() as i32;
            w.swap_axes(n - 2, n - 1)?
        } else {
            w
        };
        return Ok(ops::matmul(x, &w)?);
    }
    Ok(ops::quantized_matmul(
        x, packed, scales, biases, transpose, group_size, bits,
    )?)
}

/// Whether MLX 0.32.2's CUDA `quantized_matmul` is known to give wrong
/// products for this layout: a transposed matrix (`{out, in}`) whose rows
/// are a single group (the contracted axis as long as the group size).
/// On an H200 it did so for every such case of more than one row, and for
/// no other case probed (bench/results/qmm-gpu.md, bench/gpu/qmm_probe.py);
/// such products are multiplied through the dequantized matrix on a GPU,
/// whatever the rows. Language models' rows are many groups.
fn gpu_kernel_wrong(transpose: bool, contracted: i32, group_size: i32) -> bool {
    transpose && contracted == group_size
}

/// `(group_size, bits)` as MLX takes them, if its affine mode packs them.
fn check_format(group_size: i64, bits: i64) -> Result<(i32, i32)> {
    if !BITS.contains(&bits) {
        return Err(Error::arg(
            "bits",
            format!("quantization takes bits of {BITS:?}, got {bits}"),
        ));
    }
    if !GROUP_SIZES.contains(&group_size) {
        return Err(Error::arg(
            "group_size",
            format!("quantization takes group sizes of {GROUP_SIZES:?}, got {group_size}"),
        ));
    }
    Ok((group_size as i32, bits as i32))
}

/// The last axis of `a`, of rank 2 or more.
fn last_axis(name: &'static str, a: &Array, op: &str) -> Result<i32> {
    match a.shape() {
        [.., _, last] => Ok(*last),
        shape => Err(Error::arg(
            name,
            format!(
                "{op} needs a tensor of rank 2 or more, got shape {}",
                display_shape(shape)
            ),
        )),
    }
}

/// Checks that `packed`, `scales` and `biases` make one quantized matrix
/// of the given format.
fn check_triple(
    packed: &Array,
    scales: &Array,
    biases: &Array,
    group_size: i32,
    bits: i32,
    op: &str,
) -> Result<()> {
    if packed.dtype() != Dtype::Uint32 {
        return Err(Error::Type(format!(
            "packed: {op} needs {{:u, 32}} packed values, got {}",
            display(packed.dtype())
        )));
    }
    let words = last_axis("packed", packed, op)?;
    if !scales.dtype().is_float() || biases.dtype() != scales.dtype() {
        return Err(Error::Type(format!(
            "scales: {op} needs floating scales and biases of one type, got {} and {}",
            display(scales.dtype()),
            display(biases.dtype())
        )));
    }
    let values = i64::from(words) * 32 / i64::from(bits);
    let fits =
        (i64::from(words) * 32) % i64::from(bits) == 0 && values % i64::from(group_size) == 0;
    let mut expected = packed.shape().to_vec();
    if let Some(last) = expected.last_mut() {
        *last = (values / i64::from(group_size)) as i32;
    }
    if !fits || scales.shape() != expected.as_slice() || biases.shape() != expected.as_slice() {
        return Err(Error::arg(
            "scales",
            format!(
                "{op} needs scales and biases of shape {} for packed values of shape {} \
                 ({bits} bits, groups of {group_size}), got {} and {}",
                if fits {
                    display_shape(&expected)
                } else {
                    "(none: the packed row is not whole groups)".to_string()
                },
                display_shape(packed.shape()),
                display_shape(scales.shape()),
                display_shape(biases.shape())
            ),
        ));
    }
    Ok(())
}
