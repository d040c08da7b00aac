//! Helpers for the crate's tests that compare float32 arrays bit for bit.

use mlx_rs::Array;

/// A computed (evaluated) float32 array of `values` in `shape`.
pub fn computed(values: &[f32], shape: &[i32]) -> Array {
    let a = Array::from_slice(values, shape);
    a.eval().unwrap();
    a
}

/// The bits of a float32 array's values, evaluating it first.
pub fn bits(a: &Array) -> Vec<u32> {
    a.eval().unwrap();
    a.as_slice::<f32>().iter().map(|x| x.to_bits()).collect()
}

/// The operand pairs an element-wise op's tests go through: two operands
/// of one shape, and one with a row it broadcasts, each in both orders.
pub fn pairs_both_orders<'a, T>(a: &'a T, b: &'a T, row: &'a T) -> [(&'a T, &'a T); 4] {
    [(a, b), (b, a), (a, row), (row, a)]
}
