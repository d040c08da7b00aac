//! Window reductions (Nx's window_sum / product / max / min): the padded
//! input is viewed as `[positions..., window...]` with strides (no copy) and
//! reduced over the window axes.

use mlx_rs::{ops, Array, Dtype};

use crate::dtype::display_shape;
use crate::error::{Error, Result};

/// The reduction over each window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    Sum,
    Product,
    Max,
    Min,
}

/// The value padding must use so it never changes `op`'s result.
fn identity(op: Reduction, dtype: Dtype) -> Result<Array> {
    let f = |v: f64| Array::from_f64(v).as_dtype(dtype);
    let int_limit = |max: bool| -> Result<Array> {
        Ok(match (dtype, max) {
            (Dtype::Bool, m) => Array::from_bool(m),
            (Dtype::Uint8, m) => Array::from_slice(&[if m { u8::MAX } else { 0 }], &[]),
            (Dtype::Uint16, m) => Array::from_slice(&[if m { u16::MAX } else { 0 }], &[]),
            (Dtype::Uint32, m) => Array::from_slice(&[if m { u32::MAX } else { 0 }], &[]),
            (Dtype::Uint64, m) => Array::from_slice(&[if m { u64::MAX } else { 0 }], &[]),
            (Dtype::Int8, m) => Array::from_slice(&[if m { i8::MAX } else { i8::MIN }], &[]),
            (Dtype::Int16, m) => Array::from_slice(&[if m { i16::MAX } else { i16::MIN }], &[]),
            (Dtype::Int32, m) => Array::from_slice(&[if m { i32::MAX } else { i32::MIN }], &[]),
            (Dtype::Int64, m) => Array::from_slice(&[if m { i64::MAX } else { i64::MIN }], &[]),
            _ => f(if max {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            })?,
        })
    };
    Ok(match op {
        Reduction::Sum => Array::from_int(0).as_dtype(dtype)?,
        Reduction::Product => Array::from_int(1).as_dtype(dtype)?,
        Reduction::Max => int_limit(false)?,
        Reduction::Min => int_limit(true)?,
    })
}

/// `op` over the windows of `window` (one size per axis), with `strides`
/// (default 1), `padding` (`(low, high)` per axis, default none; padded with
/// the reduction's identity) and `dilations` (default 1).
pub fn window(
    op: Reduction,
    a: &Array,
    window: &[i64],
    strides: Option<Vec<i64>>,
    padding: Option<Vec<(i64, i64)>>,
    dilations: Option<Vec<i64>>,
) -> Result<Array> {
    let rank = a.ndim();
    let strides = &strides.unwrap_or_else(|| super::params::ones(rank));
    let padding = &padding.unwrap_or_else(|| vec![(0, 0); rank]);
    let dilations = &dilations.unwrap_or_else(|| super::params::ones(rank));
    super::check_lengths(
        &[
            ("window", window.len()),
            ("strides", strides.len()),
            ("padding", padding.len()),
            ("window_dilations", dilations.len()),
        ],
        rank,
        "one per axis",
    )?;
    if let Some(bad) = window
        .iter()
        .chain(strides)
        .chain(dilations)
        .find(|&&x| x < 1)
    {
        return Err(Error::arg(
            "window",
            format!("sizes, strides and dilations must be at least 1, got {bad}"),
        ));
    }
    let fill = identity(op, a.dtype())?;
    let padded = super::shape::pad(a, padding, &fill)?;
    let p: Vec<i64> = padded.shape().iter().map(|&d| d as i64).collect();
    let mut shape = Vec::with_capacity(2 * rank);
    let mut elem_strides = vec![0i64; rank];
    let mut acc = 1i64;
    for i in (0..rank).rev() {
        elem_strides[i] = acc;
        acc *= p[i];
    }
    for i in 0..rank {
        let span = (window[i] - 1) * dilations[i] + 1;
        if span > p[i] {
            return Err(Error::arg(
                "window",
                format!(
                    "window {} (dilated) does not fit the padded shape {}",
                    display_shape(window),
                    display_shape(&p)
                ),
            ));
        }
        shape.push(((p[i] - span) / strides[i] + 1) as i32);
    }
    shape.extend(window.iter().map(|&w| w as i32));
    let view_strides: Vec<i64> = (0..rank)
        .map(|i| strides[i] * elem_strides[i])
        .chain((0..rank).map(|i| dilations[i] * elem_strides[i]))
        .collect();
    let contiguous = padded.contiguous()?;
    let view = ops::as_strided(&contiguous, &shape[..], &view_strides[..], 0)?;
    let axes: Vec<i32> = (rank as i32..2 * rank as i32).collect();
    let out = match op {
        Reduction::Sum => view.sum_axes(&axes, false)?,
        Reduction::Product => view.prod_axes(&axes, false)?,
        Reduction::Max => view.max_axes(&axes, false)?,
        Reduction::Min => view.min_axes(&axes, false)?,
    };
    Ok(out.as_dtype(a.dtype())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    #[test]
    fn sliding_sums_and_maxima() {
        let (sum, max) = run_blocking(Device::Cpu, || {
            // [1, 2, 3, 4, 5], window 2, stride 1: sums [3, 5, 7, 9]
            let a = Array::from_slice(&[1i32, 2, 3, 4, 5], &[5]);
            let s = window(Reduction::Sum, &a, &[2], None, None, None)?;
            // window 3 stride 2 with one pad each side: [-inf,1,2,3,4,5,-inf] -> max of [.,1,2]=2, [2,3,4]=4, [4,5,.]=5
            let m = window(
                Reduction::Max,
                &a,
                &[3],
                Some(vec![2]),
                Some(vec![(1, 1)]),
                None,
            )?;
            Ok((s.as_slice::<i32>().to_vec(), m.as_slice::<i32>().to_vec()))
        })
        .unwrap();
        assert_eq!(sum, vec![3, 5, 7, 9]);
        assert_eq!(max, vec![2, 4, 5]);
    }
}
