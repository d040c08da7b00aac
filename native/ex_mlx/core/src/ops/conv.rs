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
    let convolve = |input: &Array, kernel: &Array, groups: i32| -> Result<Array> {
        let out = ops::conv_general(
            input,
            kernel,
            &strides[..],
            &zeros[..],
            &kernel_dilation[..],
            &ones[..],
            groups,
            false,
        )?;
        // An input or kernel with no elements makes every output a sum
        // over nothing: zeros, made here. MLX 0.32's CPU kernel divides by
        // the channel count (SIGFPE: the VM ended) or hands BLAS a leading
        // dimension of 0, which the reference BLAS of MLX's CUDA build
        // answers by ending the process.
        if input.size() == 0 || kernel.size() == 0 {
            return Ok(ops::zeros_dtype(out.shape(), out.dtype())?);
        }
        Ok(out)
    };
    if groups == 1 || spatial <= 2 {
        return convolve(&prepared, kernel, groups);
    }
    // MLX takes groups only in 1-D and 2-D convolutions: a grouped one of
    // more spatial axes is one convolution per group (its input channels
    // with its output channels' kernels), concatenated over the channels.
    let in_channels = prepared.shape()[input.ndim() - 1];
    let out_channels = kernel.shape()[0];
    let kernel_channels = kernel.shape()[kernel.ndim() - 1];
    if in_channels % groups != 0
        || out_channels % groups != 0
        || kernel_channels * groups != in_channels
    {
        return Err(Error::arg(
            "groups",
            format!(
                "{groups} groups need input channels ({in_channels}) and output channels \
                 ({out_channels}) divisible by the groups, and kernel input channels \
                 ({kernel_channels}) equal to input channels / groups"
            ),
        ));
    }
    let inputs = prepared.split_equal(groups, -1)?;
    let kernels = kernel.split_equal(groups, 0)?;
    let parts = inputs
        .iter()
        .zip(&kernels)
        .map(|(input, kernel)| convolve(input, kernel, 1))
        .collect::<Result<Vec<_>>>()?;
    Ok(ops::concatenate(&parts, -1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grouped 3-D convolution equals, group by group, the plain
    /// convolutions of each group's channels (computed here by hand as
    /// sums over the kernel window), concatenated over the channels.
    #[test]
    fn grouped_convolutions_of_three_spatial_axes_split_by_group() {
        // input [1, 2, 2, 2, 4]: 4 channels; kernel [2, 1, 1, 2, 2]: 2 groups
        // of 1 output channel, 2 input channels each, window 1×1×2
        let x: Vec<f32> = (0..32).map(|v| v as f32).collect();
        let k: Vec<f32> = (1..=8).map(|v| v as f32).collect();
        let input = Array::from_slice(&x, &[1, 2, 2, 2, 4]);
        let kernel = Array::from_slice(&k, &[2, 1, 1, 2, 2]);
        let out = conv_general(&input, &kernel, None, None, None, None, 2).unwrap();
        assert_eq!(out.shape(), &[1, 2, 2, 1, 2]);
        let at = |d: usize, h: usize, w: usize, c: usize| x[((d * 2 + h) * 2 + w) * 4 + c];
        let mut expected = vec![];
        for d in 0..2 {
            for h in 0..2 {
                for g in 0..2 {
                    let mut sum = 0.0;
                    for w in 0..2 {
                        for c in 0..2 {
                            sum += at(d, h, w, g * 2 + c) * k[g * 4 + w * 2 + c];
                        }
                    }
                    expected.push(sum);
                }
            }
        }
        out.eval().unwrap();
        assert_eq!(out.as_slice::<f32>(), &expected[..]);
    }

    /// Inputs or kernels without elements: every output is a sum over no
    /// terms (0), or the output has no elements itself. Before, no input
    /// channels ended the process (SIGFPE in MLX's CPU kernel).
    #[test]
    fn convolutions_with_nothing_to_sum_give_zeros() {
        let empty = |shape: &[i32]| Array::from_slice::<f32>(&[], shape);
        let ramp = |shape: &[i32]| {
            let n: i32 = shape.iter().product();
            let v: Vec<f32> = (1..=n).map(|v| v as f32).collect();
            Array::from_slice(&v, shape)
        };
        let cases = [
            // no input channels: [1, 5, 0] by [4, 2, 0] gives [1, 4, 4]
            (empty(&[1, 5, 0]), empty(&[4, 2, 0]), None, vec![1, 4, 4]),
            // a 2-D one: [1, 5, 5, 0] by [3, 2, 2, 0] gives [1, 4, 4, 3]
            (
                empty(&[1, 5, 5, 0]),
                empty(&[3, 2, 2, 0]),
                None,
                vec![1, 4, 4, 3],
            ),
            // an empty signal and window: [2, 0, 3] by [2, 0, 3] gives [2, 1, 2]
            (empty(&[2, 0, 3]), empty(&[2, 0, 3]), None, vec![2, 1, 2]),
            // a window of width 0 over a padded signal
            (
                ramp(&[1, 3, 2]),
                empty(&[2, 0, 2]),
                Some(vec![(1, 1)]),
                vec![1, 6, 2],
            ),
            // no batch: no outputs
            (empty(&[0, 5, 2]), ramp(&[3, 2, 2]), None, vec![0, 4, 3]),
        ];
        for (input, kernel, padding, shape) in cases {
            let out = conv_general(&input, &kernel, None, padding, None, None, 1).unwrap();
            out.eval().unwrap();
            assert_eq!(out.shape(), &shape[..]);
            assert_eq!(out.dtype(), mlx_rs::Dtype::Float32);
            assert_eq!(out.size(), shape.iter().product::<i32>() as usize);
            if out.size() > 0 {
                assert!(out.as_slice::<f32>().iter().all(|&v| v == 0.0));
            }
        }
    }

    #[test]
    fn groups_that_do_not_divide_the_channels_are_an_argument_error() {
        let input = Array::from_slice(&[0.0f32; 24], &[1, 2, 2, 2, 3]);
        let kernel = Array::from_slice(&[0.0f32; 4], &[2, 1, 1, 1, 2]);
        let err = conv_general(&input, &kernel, None, None, None, None, 2).unwrap_err();
        assert!(
            err.to_string().contains("2 groups need input channels (3)"),
            "{err}"
        );
    }
}
