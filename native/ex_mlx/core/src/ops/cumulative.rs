//! Cumulative sum, product, minimum and maximum.

use mlx_rs::Array;

use super::check_axis;
use crate::error::Result;

pub fn cumulative(op: &str, a: &Array, axis: i64, reverse: bool) -> Result<Array> {
    let axis = check_axis("axis", axis, a.ndim())?;
    let out = match op {
        "cumulative_sum" => a.cumsum(axis, reverse, true),
        "cumulative_product" => a.cumprod(axis, reverse, true),
        "cumulative_min" => a.cummin(axis, reverse, true),
        "cumulative_max" => a.cummax(axis, reverse, true),
        _ => {
            return Err(super::unknown_op(
                "cumulative op",
                op,
                &[
                    "cumulative_sum",
                    "cumulative_product",
                    "cumulative_min",
                    "cumulative_max",
                ],
            ))
        }
    };
    Ok(out?)
}
