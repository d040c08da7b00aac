//! Fourier transforms.

use mlx_rs::Array;

use super::check_axis;
use crate::error::{Error, Result};

/// One-dimensional transforms along `axis` with length `n` (the axis'
/// size when `None`: inputs are cropped or zero-padded to `n`).
pub fn fft1(op: &str, a: &Array, n: Option<i64>, axis: i64) -> Result<Array> {
    let axis = check_axis("axis", axis, a.ndim())?;
    let n = match n {
        Some(n) if n >= 1 && n <= i32::MAX as i64 => Some(n as i32),
        Some(n) => return Err(Error::arg("n", format!("length {n} must be at least 1"))),
        None => None,
    };
    let out = match op {
        "fft" => mlx_rs::fft::fft(a, n, axis),
        "ifft" => mlx_rs::fft::ifft(a, n, axis),
        "rfft" => mlx_rs::fft::rfft(a, n, axis),
        "irfft" => mlx_rs::fft::irfft(a, n, axis),
        _ => {
            return Err(super::unknown_op(
                "transform",
                op,
                &["fft", "ifft", "rfft", "irfft"],
            ))
        }
    };
    Ok(out?)
}

/// Two-dimensional transforms over `axes` with lengths `s`.
pub fn fft2(op: &str, a: &Array, s: Option<&[i64]>, axes: &[i64]) -> Result<Array> {
    if axes.len() != 2 {
        return Err(Error::arg(
            "axes",
            format!("needs two axes, got {}", axes.len()),
        ));
    }
    let axes: Vec<i32> = axes
        .iter()
        .map(|&x| check_axis("axes", x, a.ndim()))
        .collect::<Result<_>>()?;
    let s: Option<Vec<i32>> = match s {
        Some(s) if s.len() == 2 && s.iter().all(|&n| n >= 1 && n <= i32::MAX as i64) => {
            Some(s.iter().map(|&n| n as i32).collect())
        }
        Some(s) => {
            return Err(Error::arg(
                "lengths",
                format!("needs two lengths of at least 1, got {s:?}"),
            ))
        }
        None => None,
    };
    let out = match op {
        "fft2" => mlx_rs::fft::fft2(a, s.as_deref(), &axes[..]),
        "ifft2" => mlx_rs::fft::ifft2(a, s.as_deref(), &axes[..]),
        _ => return Err(super::unknown_op("transform", op, &["fft2", "ifft2"])),
    };
    Ok(out?)
}
