//! Cumulative sum, product, minimum and maximum.

use mlx_rs::Array;

use super::{check_axis, empty_result};
use crate::error::Result;

/// `f(a, axis, reverse)`, MLX's running reduction along a checked `axis`.
///
/// A tensor with no elements gives an empty result without MLX's scan
/// ([`empty_result`]).
pub fn along(
    a: &Array,
    axis: i64,
    reverse: bool,
    f: impl Fn(&Array, i32, bool) -> mlx_rs::error::Result<Array>,
) -> Result<Array> {
    let axis = check_axis("axis", axis, a.ndim())?;
    if a.size() == 0 {
        return empty_result(a, |one| f(one, 0, reverse));
    }
    Ok(f(a, axis, reverse)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;
    use mlx_rs::ops;

    #[test]
    fn scans_of_no_elements_are_empty_of_the_scan_type() {
        let (shape, dtype, values) = run_blocking(Device::Cpu, || {
            let empty = ops::zeros_dtype(&[0, 3], mlx_rs::Dtype::Uint8)?;
            let out = along(&empty, 0, false, |a, axis, rev| a.cumsum(axis, rev, true))?;
            out.eval()?;
            Ok((out.shape().to_vec(), out.dtype(), out.size()))
        })
        .unwrap();
        // the type of MLX's own cumulative sum of u8, from one element
        let one_dtype = run_blocking(Device::Cpu, || {
            let one = ops::zeros_dtype(&[1], mlx_rs::Dtype::Uint8)?;
            Ok(one.cumsum(0, false, true)?.dtype())
        })
        .unwrap();
        assert_eq!((shape, dtype, values), (vec![0, 3], one_dtype, 0));
    }
}
