//! MLX operations, one small function per op, grouped by family.

pub mod elementwise;
pub mod eval;
