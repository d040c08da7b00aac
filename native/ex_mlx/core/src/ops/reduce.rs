//! Reductions over axes.

use mlx_rs::{ops, Array};

use super::{check_axes, check_axis};
use crate::elementwise_fusion::host_array;
use crate::error::{Error, Result};

type MlxResult = mlx_rs::error::Result<Array>;

/// `f(a)`, computed in float32 when `a` is a 16-bit float (f16, bf16) and
/// the result cast back to `a`'s type: MLX 0.32's CPU sums, products, means
/// and scans accumulate in the input's own type, so a sum of 10,000 f16
/// values of 0.1 was 256.0 (bf16: 32.0) where Nx.BinaryBackend, which
/// accumulates in f64 and rounds once, gives 1000.0. For the reductions of
/// the op table that add or multiply (`sum`, `product`, `mean`, the
/// cumulative and window sums and products).
pub fn in_f32_for_halves(a: &Array, f: impl FnOnce(&Array) -> Result<Array>) -> Result<Array> {
    match a.dtype() {
        mlx_rs::Dtype::Float16 | mlx_rs::Dtype::Bfloat16 => {
            let wide = a.as_dtype(mlx_rs::Dtype::Float32)?;
            Ok(f(&wide)?.as_dtype(a.dtype())?)
        }
        _ => f(a),
    }
}

/// The sum over `axes` (all when `None`; f16 and bf16 in float32, as
/// [`in_f32_for_halves`] says). A float32 array that is already computed on
/// the CPU (crate::elementwise_fusion::inputs_ready), summed over all its
/// axes or its last one, is summed here at once ([`sum_on_host`]);
/// otherwise MLX's sum is queued on the stream.
pub fn sum(a: &Array, axes: Option<Vec<i64>>, keep_dims: bool) -> Result<Array> {
    on_host_or(a, axes, keep_dims, sum_on_host, |a, axes, keep| {
        a.sum_axes(axes, keep)
    })
}

/// The mean over `axes`, as [`sum`] (MLX's mean is the sum times `1 / n`
/// rounded to float32: [`mean_on_host`] computes it so for a computed float32
/// CPU array).
pub fn mean(a: &Array, axes: Option<Vec<i64>>, keep_dims: bool) -> Result<Array> {
    on_host_or(a, axes, keep_dims, mean_on_host, |a, axes, keep| {
        a.mean_axes(axes, keep)
    })
}

/// `host` over `axes` when `a` (in float32 for halves) is ready on the CPU
/// and `host` computes it, else `mlx`'s reduction.
fn on_host_or(
    a: &Array,
    axes: Option<Vec<i64>>,
    keep_dims: bool,
    host: fn(&Array, &[i32], bool) -> Result<Option<Array>>,
    mlx: impl FnOnce(&Array, &[i32], bool) -> MlxResult,
) -> Result<Array> {
    in_f32_for_halves(a, |t| {
        let axes = axes_or_all(axes, t.ndim())?;
        if crate::elementwise_fusion::inputs_ready(&[t]) {
            if let Some(out) = host(t, &axes, keep_dims)? {
                return Ok(out);
            }
        }
        Ok(mlx(t, &axes, keep_dims)?)
    })
}

/// [`sum_on_host`] times `1 / n` (`n` the count of values each sum adds,
/// the reciprocal computed in float64 and rounded to float32), as MLX's
/// `mean` computes it: the same bits (tested).
pub fn mean_on_host(a: &Array, axes: &[i32], keep_dims: bool) -> Result<Option<Array>> {
    let Some((mut sums, shape)) = sums_on_host(a, axes, keep_dims)? else {
        return Ok(None);
    };
    let n = a.size() / sums.len().max(1);
    let scale = (1.0f64 / n as f64) as f32;
    sums.iter_mut().for_each(|s| *s *= scale);
    host_array(&sums, &shape).map(Some)
}

/// A computed float32 CPU array (the caller knows it is: see
/// crate::elementwise_fusion::computed_on_host) summed here over all its
/// axes or its last one (`axes`, checked), in MLX's order on this CPU: from
/// 0.0, each value added in turn, then 0.0 added (so a sum is never -0.0):
/// the same bits as MLX's sum (tested). `None` for other sums, more than
/// `READY_MAX_ELEMENTS` values, or a view.
pub fn sum_on_host(a: &Array, axes: &[i32], keep_dims: bool) -> Result<Option<Array>> {
    let Some((sums, shape)) = sums_on_host(a, axes, keep_dims)? else {
        return Ok(None);
    };
    host_array(&sums, &shape).map(Some)
}

/// `values` summed as MLX's CPU sum adds those of one result: from 0.0,
/// each value added in turn, then 0.0 added (so a sum is never -0.0).
/// [`sum_on_host`] and a program's small float32 tensors
/// (crate::host_tensor) sum so.
pub fn sum_in_mlx_order(values: impl Iterator<Item = f32>) -> f32 {
    values.fold(0.0f32, |acc, v| v + acc) + 0.0
}

/// The values and shape [`sum_on_host`] gives, or `None`.
fn sums_on_host(a: &Array, axes: &[i32], keep_dims: bool) -> Result<Option<(Vec<f32>, Vec<i32>)>> {
    use crate::elementwise_fusion::{f32_values, in_place, READY_MAX_ELEMENTS};
    let (n, ndim) = (a.size(), a.ndim());
    if a.dtype() != mlx_rs::Dtype::Float32 || n == 0 || n > READY_MAX_ELEMENTS || ndim == 0 {
        return Ok(None);
    }
    let mut sorted = axes.to_vec();
    sorted.sort_unstable();
    let all = sorted.iter().copied().eq(0..ndim as i32);
    let last = sorted == [ndim as i32 - 1];
    if !all && !last {
        return Ok(None);
    }
    let Some(buffers) = in_place(&[a])? else {
        return Ok(None);
    };
    let values = f32_values(buffers[0].bytes())?;
    let row = if all { n } else { a.shape()[ndim - 1] as usize };
    let sums: Vec<f32> = values
        .chunks_exact(row)
        .map(|r| sum_in_mlx_order(r.iter().copied()))
        .collect();
    let mut shape = a.shape().to_vec();
    if all {
        shape = if keep_dims { vec![1; ndim] } else { vec![] };
    } else if keep_dims {
        shape[ndim - 1] = 1;
    } else {
        shape.pop();
    }
    Ok(Some((sums, shape)))
}

/// `f(a, axes, keep_dims)` over `axes` (all axes when `None`), keeping them
/// as size-1 dimensions when `keep_dims`.
pub fn over(
    a: &Array,
    axes: Option<Vec<i64>>,
    keep_dims: bool,
    f: impl FnOnce(&Array, &[i32], bool) -> MlxResult,
) -> Result<Array> {
    let axes = axes_or_all(axes, a.ndim())?;
    Ok(f(a, &axes, keep_dims)?)
}

/// A reduction's `axes` checked against `rank`, or every axis for `None`.
pub fn axes_or_all(axes: Option<Vec<i64>>, rank: usize) -> Result<Vec<i32>> {
    match axes {
        Some(axes) => check_axes("axes", &axes, rank),
        None => Ok((0..rank as i32).collect()),
    }
}

/// A minimum or maximum (`name`) over axes, like [`over`]: of no elements
/// there is none, so an empty tensor is an error.
pub fn extreme(
    name: &str,
    a: &Array,
    axes: Option<Vec<i64>>,
    keep_dims: bool,
    f: impl FnOnce(&Array, &[i32], bool) -> MlxResult,
) -> Result<Array> {
    let reduces = axes.as_ref().map_or(a.ndim() > 0, |axes| !axes.is_empty());
    if a.size() == 0 && reduces {
        return Err(Error::arg(
            "tensor",
            format!("cannot take the {name} of an empty tensor"),
        ));
    }
    over(a, axes, keep_dims, f)
}

/// The index `f` (argmax or argmin, `name`) finds along `axis` (of the
/// flattened tensor when `None`); ties go to the lowest index.
pub fn arg(
    name: &str,
    a: &Array,
    axis: Option<i64>,
    keep_dims: bool,
    f: impl FnOnce(&Array, i32, bool) -> MlxResult,
) -> Result<Array> {
    if a.size() == 0 {
        return Err(Error::arg(
            "tensor",
            format!("cannot take the {name} of an empty tensor"),
        ));
    }
    let flattened = axis.is_none();
    let (input, axis) = match axis {
        Some(axis) => (a.clone(), check_axis("axis", axis, a.ndim())?),
        None => (ops::reshape(a, &[-1])?, 0),
    };
    let out = f(&input, axis, keep_dims && !flattened)?;
    if flattened && keep_dims {
        // One element, with every axis of the input kept at size 1.
        return Ok(ops::reshape(&out, &vec![1; a.ndim()])?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise_fusion::READY_MAX_ELEMENTS;
    use crate::test_arrays::{bits, computed};

    /// Values of every magnitude and sign, so that the order of the
    /// additions shows in the last bits.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let mantissa = (state % 10_000) as f32 / 997.0 - 5.0;
                mantissa * 10f32.powi((state >> 20) as i32 % 9 - 4)
            })
            .collect()
    }

    #[test]
    fn ready_sums_give_mlx_s_bits() {
        let cases: [(&[i32], Option<Vec<i64>>); 7] = [
            (&[1000], None),
            (&[7, 300], None),
            (&[7, 300], Some(vec![1])),
            (&[7, 300], Some(vec![-1])),
            (&[4, 5, 6], Some(vec![2, 0, 1])),
            (&[4, 5, 6], Some(vec![2])),
            (&[READY_MAX_ELEMENTS as i32], None),
        ];
        for (seed, (shape, axes)) in cases.into_iter().enumerate() {
            let n = shape.iter().product::<i32>() as usize;
            let a = computed(&values(n, seed as u32), shape);
            for keep in [false, true] {
                let ours = mean(&a, axes.clone(), keep).unwrap();
                assert!(crate::ahead::is_available(&ours), "mean {shape:?} {axes:?}");
                let theirs = over(&a, axes.clone(), keep, |a, axes, keep| {
                    a.mean_axes(axes, keep)
                })
                .unwrap();
                assert_eq!(bits(&ours), bits(&theirs), "mean {shape:?} {axes:?} {keep}");
                let ours = sum(&a, axes.clone(), keep).unwrap();
                assert!(
                    crate::ahead::is_available(&ours),
                    "{shape:?} {axes:?}: not here"
                );
                let theirs = over(&a, axes.clone(), keep, |a, axes, keep| {
                    a.sum_axes(axes, keep)
                })
                .unwrap();
                assert_eq!(ours.shape(), theirs.shape(), "{shape:?} {axes:?} {keep}");
                assert_eq!(bits(&ours), bits(&theirs), "{shape:?} {axes:?} {keep}");
            }
        }
        // special values: -0.0 sums to 0.0, NaN and infinities propagate
        for row in [
            vec![-0.0f32, -0.0],
            vec![1.0, f32::NAN, 2.0],
            vec![f32::INFINITY, f32::NEG_INFINITY],
            vec![f32::MAX, f32::MAX, -f32::MAX],
            vec![1e-45, -1e-45, 1e-45],
        ] {
            let a = computed(&row, &[row.len() as i32]);
            let ours = sum(&a, None, false).unwrap();
            assert!(crate::ahead::is_available(&ours));
            assert_eq!(
                bits(&ours),
                bits(&a.sum_axes(&[0], false).unwrap()),
                "{row:?}"
            );
        }
    }

    #[test]
    fn other_sums_are_mlx_s() {
        let a = computed(&values(60, 9), &[3, 4, 5]);
        // a middle axis, and an input not computed yet: queued on the stream
        for (input, axes) in [
            (a.clone(), vec![1i64]),
            (mlx_rs::ops::multiply(&a, &a).unwrap(), vec![2]),
        ] {
            let ours = sum(&input, Some(axes.clone()), false).unwrap();
            assert!(!crate::ahead::is_available(&ours));
            let axes32: Vec<i32> = axes.iter().map(|&x| x as i32).collect();
            assert_eq!(bits(&ours), bits(&input.sum_axes(&axes32, false).unwrap()));
        }
    }
}
