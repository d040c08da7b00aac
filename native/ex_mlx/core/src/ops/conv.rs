//! Convolution.

use mlx_rs::{ops, Array};

use crate::error::{Error, Result};

/// N-d convolution in MLX's layout: `input` is `[batch, spatial..., in_channels]`,
/// `kernel` is `[out_channels, spatial..., in_channels / groups]`. `padding` is
/// `(low, high)` per spatial axis (applied here, so it may be asymmetric).
/// Defaults (`None`): strides and dilations 1, no padding.
pub fn conv_general(
    input: &Array,
    kernel: &Array,
    strides: Option<Vec<i64>>,
    padding: Option<Vec<(i64, i64)>>,
    kernel_dilation: Option<Vec<i64>>,
    input_dilation: Option<Vec<i64>>,
    groups: i64,
) -> Result<Array> {
    let spatial = input.ndim().saturating_sub(2);
    let ones = || super::params::ones(spatial);
    let strides = &strides.unwrap_or_else(ones);
    let padding = &padding.unwrap_or_else(|| vec![(0, 0); spatial]);
    let kernel_dilation = &kernel_dilation.unwrap_or_else(ones);
    let input_dilation = &input_dilation.unwrap_or_else(ones);
    if input.ndim() < 3 || kernel.ndim() != input.ndim() {
        return Err(Error::arg(
            "kernel",
            format!(
                "input and kernel need the same rank, 3 or more (got {} and {})",
                input.ndim(),
                kernel.ndim()
            ),
        ));
    }
    super::check_lengths(
        &[
            ("strides", strides.len()),
            ("padding", padding.len()),
            ("kernel_dilation", kernel_dilation.len()),
            ("input_dilation", input_dilation.len()),
        ],
        spatial,
        "one per spatial axis",
    )?;
    let to_i32 = |name: &'static str, v: &[i64]| -> Result<Vec<i32>> {
        v.iter()
            .map(|&x| {
                if (1..=i32::MAX as i64).contains(&x) {
                    Ok(x as i32)
                } else {
                    Err(Error::arg(name, format!("{x} must be at least 1")))
                }
            })
            .collect()
    };
    let strides = to_i32("strides", strides)?;
    let kernel_dilation = to_i32("kernel_dilation", kernel_dilation)?;
    let input_dilation = to_i32("input_dilation", input_dilation)?;
    let groups = i32::try_from(groups)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| Error::arg("groups", format!("{groups} must be at least 1")))?;
    // Input dilation is interior padding with zeros (d - 1 between elements);
    // then asymmetric (and negative) edge padding; then a plain convolution.
    // Done here so every combination works, in the order Nx defines.
    let zero = Array::from_int(0).as_dtype(input.dtype())?;
    let mut config = vec![(0i64, 0i64, 0i64); input.ndim()];
    for axis in 0..spatial {
        let (lo, hi) = padding[axis];
        config[axis + 1] = (lo, hi, input_dilation[axis] as i64 - 1);
    }
    let prepared = if config.iter().all(|&c| c == (0, 0, 0)) {
        input.clone()
    } else {
        super::shape::pad_general(input, &config, &zero)?
    };
    let zeros = vec![0; spatial];
    let ones = vec![1; spatial];
    Ok(ops::conv_general(
        &prepared,
        kernel,
        &strides[..],
        &zeros[..],
        &kernel_dilation[..],
        &ones[..],
        groups,
        false,
    )?)
}
