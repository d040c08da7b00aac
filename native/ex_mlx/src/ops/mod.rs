//! NIFs for MLX operations, grouped by family.

pub mod elementwise;
pub mod eval;
