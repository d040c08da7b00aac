//! Fourier transforms and spectrum shifts, as MLX's `fft` module has them
//! (it follows numpy.fft: backward normalisation, lengths that crop or
//! zero-pad, `irfft`'s default length `2 * (m - 1)`).
//!
//! Every transform is an N-dimensional one over some axes with some lengths.
//! The 1-D ([`fft1`]), 2-D and N-D ([`fftn`]) entry points differ only in
//! their defaults and in the names their errors use; all of them check the
//! input here, resolve every default, and call MLX's N-D transform with
//! explicit lengths and axes.
//!
//! Types: real inputs (bool, integers, f16, bf16, f32) are converted by MLX
//! to f32 or c64; the complex transforms return c64 and `irfft*` returns f32.
//! MLX computes in complex64 only, so float64 input is refused rather than
//! narrowed, and the real transforms (`rfft*`) refuse complex input rather
//! than drop its imaginary part.

use mlx_rs::fft::FftnOptions;
use mlx_rs::{Array, Axes, Dtype};

use super::{check_axes, check_axis};
use crate::dtype::display;
use crate::error::{Error, Result};

/// The four transforms; the 1-, 2- and N-D ops of a family share one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Fft,
    Ifft,
    Rfft,
    Irfft,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Fft => "fft",
            Kind::Ifft => "ifft",
            Kind::Rfft => "rfft",
            Kind::Irfft => "irfft",
        }
    }
}

/// How many axes an N-D entry point transforms: exactly two (`fft2`, ...)
/// or any number (`fftn`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dims {
    Two,
    Any,
}

/// One-dimensional transform `kind` (`fft`, `ifft`, `rfft`, `irfft`) along
/// `axis` with length `n`: the input is cropped or zero-padded to `n` points
/// (to `n / 2 + 1` for `irfft`). `None` means the axis' size, or `2 * (m - 1)`
/// for `irfft` of an axis of size `m`.
pub fn fft1(kind: Kind, a: &Array, n: Option<i64>, axis: i64) -> Result<Array> {
    check_input(kind.name(), kind, a)?;
    let axis = check_axis("axis", axis, a.ndim())?;
    let lengths = match n {
        Some(n) => vec![length("n", n)?],
        None => default_lengths("n", kind, a, &[axis])?,
    };
    run(kind, a, lengths, vec![axis])
}

/// Two- or N-dimensional transform `kind` (`fft2` ... `irfft2` for
/// [`Dims::Two`], `fftn` ... `irfftn` for [`Dims::Any`]) over `axes` with lengths `s` (one per axis). Defaults: the 2-D
/// ops take axes `[-2, -1]`; the N-D ops the last `s.len()` axes when `s` is
/// given, else every axis. `s` defaults as in [`fft1`], the last axis being
/// the one `irfft*`'s default applies to.
pub fn fftn(
    kind: Kind,
    dims: Dims,
    a: &Array,
    s: Option<&[i64]>,
    axes: Option<&[i64]>,
) -> Result<Array> {
    let two_d = dims == Dims::Two;
    let op = &format!("{}{}", kind.name(), if two_d { "2" } else { "n" });
    check_input(op, kind, a)?;
    let rank = a.ndim();

    let axes: Vec<i64> = match (axes, s) {
        (Some(axes), _) => axes.to_vec(),
        (None, _) if two_d => vec![-2, -1],
        (None, Some(s)) => {
            if s.len() > rank {
                return Err(Error::arg(
                    "s",
                    format!(
                        "has {} lengths, more than the tensor's {}",
                        s.len(),
                        count(rank, "axis", "axes")
                    ),
                ));
            }
            (-(s.len() as i64)..0).collect()
        }
        (None, None) => (0..rank as i64).collect(),
    };
    if two_d && axes.len() != 2 {
        return Err(Error::arg(
            "axes",
            format!(
                "{op} transforms exactly two axes, got {} (use {}n for any number)",
                axes.len(),
                &op[..op.len() - 1]
            ),
        ));
    }
    if axes.is_empty() {
        return Err(Error::arg("axes", "needs at least one axis"));
    }
    let axes = check_axes("axes", &axes, rank)?;

    let lengths = match s {
        Some(s) => {
            if s.len() != axes.len() {
                return Err(Error::arg(
                    "s",
                    format!(
                        "has {} for {}; give one length per axis",
                        count(s.len(), "length", "lengths"),
                        count(axes.len(), "axis", "axes")
                    ),
                ));
            }
            s.iter()
                .map(|&n| length("s", n))
                .collect::<Result<Vec<i32>>>()?
        }
        None => default_lengths("s", kind, a, &axes)?,
    };
    run(kind, a, lengths, axes)
}

/// `fftshift` (`inverse` false: moves the zero-frequency term to the centre: each axis of
/// size `m` is rolled by `m / 2`) or `ifftshift` (`inverse` true: its inverse, rolling by
/// `-(m / 2)`; the two differ for odd sizes) over `axes`, every axis by
/// default. Any type; a rank-0 tensor has no axes and comes back unchanged.
pub fn shift(inverse: bool, a: &Array, axes: Option<&[i64]>) -> Result<Array> {
    let rank = a.ndim();
    let axes = match axes {
        Some(axes) => check_axes("axes", axes, rank)?,
        None => (0..rank as i32).collect(),
    };
    if axes.is_empty() {
        return Ok(a.clone());
    }
    let out = if inverse {
        mlx_rs::fft::ifftshift(a, &axes[..])
    } else {
        mlx_rs::fft::fftshift(a, &axes[..])
    };
    Ok(out?)
}

/// Refuses what MLX would silently convert with a loss: float64 (MLX has no
/// complex128) and complex input to a real transform. Rank 0 has no axis.
fn check_input(op: &str, kind: Kind, a: &Array) -> Result<()> {
    match a.dtype() {
        Dtype::Float64 => {
            return Err(Error::Type(format!(
                "{op}: {{:f, 64}} input is not supported: MLX computes Fourier transforms \
                 in complex64 (it has no complex128), which would narrow it; \
                 convert it to {{:f, 32}} first"
            )))
        }
        Dtype::Complex64 if kind == Kind::Rfft => {
            return Err(Error::Type(format!(
                "{op}: takes real input, got {}; use {} for complex input",
                display(a.dtype()),
                op.strip_prefix('r').unwrap_or(op)
            )))
        }
        _ => {}
    }
    if a.ndim() == 0 {
        return Err(Error::arg(
            "tensor",
            format!("{op} needs a tensor of rank 1 or more, got a scalar"),
        ));
    }
    Ok(())
}

/// "1 axis", "2 axes".
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A transform length given by the caller: 1 to `i32::MAX`.
fn length(name: &'static str, n: i64) -> Result<i32> {
    if n < 1 {
        return Err(Error::arg(name, format!("length {n} must be at least 1")));
    }
    i32::try_from(n).map_err(|_| Error::arg(name, format!("length {n} is too large")))
}

/// The lengths used when none are given: each axis' size, except the last
/// axis of an inverse real transform, whose output has `2 * (m - 1)` points.
/// A resulting length of 0 (an empty axis, or `irfft` of a single point) is
/// an error that says which length to give.
fn default_lengths(name: &'static str, kind: Kind, a: &Array, axes: &[i32]) -> Result<Vec<i32>> {
    let shape = a.shape();
    let last = axes.len() - 1;
    axes.iter()
        .enumerate()
        .map(|(i, &axis)| {
            let m = i64::from(shape[axis as usize]);
            if kind == Kind::Irfft && i == last {
                let n = 2 * (m - 1);
                if n < 1 {
                    return Err(Error::arg(
                        name,
                        format!(
                            "the default output length 2 * (m - 1) is {n} for axis {axis} of \
                             size {m}; give the length"
                        ),
                    ));
                }
                i32::try_from(n).map_err(|_| {
                    Error::arg(
                        name,
                        format!("the default output length {n} of axis {axis} is too large"),
                    )
                })
            } else if m == 0 {
                Err(Error::arg(
                    name,
                    format!(
                        "axis {axis} has size 0 and a transform needs at least one point; \
                         give a length to zero-pad it"
                    ),
                ))
            } else {
                // (an axis size is an i32 already)
                Ok(shape[axis as usize])
            }
        })
        .collect()
}

/// MLX's N-D transform with explicit, checked lengths and axes.
fn run(kind: Kind, a: &Array, lengths: Vec<i32>, axes: Vec<i32>) -> Result<Array> {
    // (booleans through f32: MLX's CUDA backend casts true to 1 + 1i when
    // it promotes them to complex64 itself, see convert::as_type)
    let a = &if a.dtype() == Dtype::Bool {
        a.as_dtype(Dtype::Float32)?
    } else {
        a.clone()
    };
    let options = FftnOptions {
        lengths: Some(lengths),
        axes: Axes::Axes(axes),
    };
    let out = match kind {
        Kind::Fft => mlx_rs::fft::fftn(a, options),
        Kind::Ifft => mlx_rs::fft::ifftn(a, options),
        Kind::Rfft => mlx_rs::fft::rfftn(a, options),
        Kind::Irfft => mlx_rs::fft::irfftn(a, options),
    };
    Ok(out?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;
    use mlx_rs::complex64;

    fn c64(a: &Array) -> Vec<(f32, f32)> {
        a.as_slice::<complex64>()
            .iter()
            .map(|c| (c.re, c.im))
            .collect()
    }

    #[test]
    fn transforms_of_known_signals() {
        run_blocking(Device::Cpu, || {
            // [1, 1, 0, 0] padded from [1, 1]: [2, 1 - i, 0, 1 + i]
            let a = Array::from_slice(&[1.0f32, 1.0], &[2]);
            let f = fft1(Kind::Fft, &a, Some(4), -1)?;
            assert_eq!(
                c64(&f),
                vec![(2.0, 0.0), (1.0, -1.0), (0.0, 0.0), (1.0, 1.0)]
            );
            // truncation to 1 point keeps the first: [1]
            let f = fft1(Kind::Fft, &a, Some(1), 0)?;
            assert_eq!(c64(&f), vec![(1.0, 0.0)]);
            // irfft's default length for 3 bins is 4; of [4, 0, 0] it is [1, 1, 1, 1]
            let r = Array::from_slice(&[4.0f32, 0.0, 0.0], &[3]);
            let back = fft1(Kind::Irfft, &r, None, -1)?;
            assert_eq!(back.shape(), &[4]);
            assert_eq!(back.as_slice::<f32>(), &[1.0, 1.0, 1.0, 1.0]);
            // fft2 of [[1, 2], [3, 4]]: [[10, -2], [-4, 0]]
            let m = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
            let f = fftn(Kind::Fft, Dims::Two, &m, None, None)?;
            assert_eq!(
                c64(&f),
                vec![(10.0, 0.0), (-2.0, 0.0), (-4.0, 0.0), (0.0, 0.0)]
            );
            // fftn with s only transforms the last s.len() axes: rfftn over axis 1
            // of [[1, 2], [3, 4]] gives [[3, -1], [7, -1]]
            let f = fftn(Kind::Rfft, Dims::Any, &m, Some(&[2]), None)?;
            assert_eq!(
                c64(&f),
                vec![(3.0, 0.0), (-1.0, 0.0), (7.0, 0.0), (-1.0, 0.0)]
            );
            // zero-padding an empty axis gives zeros
            let empty = Array::from_slice::<f32>(&[], &[0]);
            let f = fft1(Kind::Fft, &empty, Some(3), 0)?;
            assert_eq!(c64(&f), vec![(0.0, 0.0); 3]);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn shifts_roll_by_half() {
        run_blocking(Device::Cpu, || {
            let odd = Array::from_slice(&[0i32, 1, 2, 3, 4], &[5]);
            assert_eq!(
                shift(false, &odd, None)?.as_slice::<i32>(),
                &[3, 4, 0, 1, 2]
            );
            assert_eq!(shift(true, &odd, None)?.as_slice::<i32>(), &[2, 3, 4, 0, 1]);
            let m = Array::from_slice(&[0i32, 1, 2, 3, 4, 5], &[2, 3]);
            assert_eq!(
                shift(false, &m, Some(&[-1]))?.as_slice::<i32>(),
                &[2, 0, 1, 5, 3, 4]
            );
            let scalar = Array::from_int(7);
            assert_eq!(shift(false, &scalar, None)?.as_slice::<i32>(), &[7]);
            Ok(())
        })
        .unwrap();
    }

    fn error(result: Result<Array>) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(e) => format!("{}: {e}", e.kind()),
        }
    }

    #[test]
    fn bad_arguments_are_named() {
        let errors = run_blocking(Device::Cpu, || {
            let v = Array::from_slice(&[1.0f32, 2.0], &[2]);
            let m = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
            let one = Array::from_slice(&[1.0f32], &[1]);
            let empty = Array::from_slice::<f32>(&[], &[0]);
            let f64 = v.as_dtype(Dtype::Float64)?;
            let c = fft1(Kind::Fft, &v, None, 0)?;
            Ok(vec![
                error(fft1(Kind::Fft, &v, Some(0), 0)),
                error(fft1(Kind::Fft, &v, Some(1 << 40), 0)),
                error(fft1(Kind::Fft, &v, None, 1)),
                error(fft1(Kind::Irfft, &one, None, 0)),
                error(fft1(Kind::Fft, &empty, None, 0)),
                error(fft1(Kind::Fft, &f64, None, 0)),
                error(fft1(Kind::Rfft, &c, None, 0)),
                error(fft1(Kind::Fft, &Array::from_f32(1.0), None, 0)),
                error(fftn(Kind::Fft, Dims::Two, &v, None, None)),
                error(fftn(Kind::Fft, Dims::Two, &m, None, Some(&[0]))),
                error(fftn(Kind::Fft, Dims::Any, &m, Some(&[2, 2]), Some(&[0]))),
                error(fftn(Kind::Fft, Dims::Any, &m, Some(&[2, 2, 2]), None)),
                error(fftn(Kind::Fft, Dims::Any, &m, None, Some(&[1, -1]))),
                error(fftn(Kind::Fft, Dims::Any, &m, None, Some(&[]))),
                error(fftn(Kind::Rfft, Dims::Any, &m, Some(&[2, -1]), None)),
                error(shift(false, &m, Some(&[0, 2]))),
            ])
        })
        .unwrap();
        let expected = [
            "argument: n: length 0 must be at least 1",
            "argument: n: length 1099511627776 is too large",
            "argument: axis: axis 1 is out of range for a tensor of rank 1",
            "argument: n: the default output length 2 * (m - 1) is 0 for axis 0 of size 1; \
             give the length",
            "argument: n: axis 0 has size 0 and a transform needs at least one point; \
             give a length to zero-pad it",
            "type: fft: {:f, 64} input is not supported: MLX computes Fourier transforms in \
             complex64 (it has no complex128), which would narrow it; convert it to {:f, 32} first",
            "type: rfft: takes real input, got {:c, 64}; use fft for complex input",
            "argument: tensor: fft needs a tensor of rank 1 or more, got a scalar",
            "argument: axes: axis -2 is out of range for a tensor of rank 1",
            "argument: axes: fft2 transforms exactly two axes, got 1 (use fftn for any number)",
            "argument: s: has 2 lengths for 1 axis; give one length per axis",
            "argument: s: has 3 lengths, more than the tensor's 2 axes",
            "argument: axes: axis -1 appears twice",
            "argument: axes: needs at least one axis",
            "argument: s: length -1 must be at least 1",
            "argument: axes: axis 2 is out of range for a tensor of rank 2",
        ];
        for (got, want) in errors.iter().zip(expected) {
            assert_eq!(got, want);
        }
        assert_eq!(errors.len(), expected.len());
    }
}
