//! Cumulative sum, product, minimum and maximum.

use mlx_rs::Array;

use super::check_axis;
use crate::error::Result;

/// `f(a, axis, reverse)`, MLX's running reduction along a checked `axis`.
pub fn along(
    a: &Array,
    axis: i64,
    reverse: bool,
    f: impl FnOnce(&Array, i32, bool) -> mlx_rs::error::Result<Array>,
) -> Result<Array> {
    let axis = check_axis("axis", axis, a.ndim())?;
    Ok(f(a, axis, reverse)?)
}
