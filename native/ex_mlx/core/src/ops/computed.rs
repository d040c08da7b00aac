//! The ops of the table that crate::elementwise_fusion computes with MLX's
//! bits: the exactly rounded element-wise ones (arithmetic, `max`, `min`,
//! `negate`, `abs`, `sqrt`, `square`). Where they are computed so is
//! crate::cpu_kernels's decision.

use super::table::Op;
use crate::elementwise_fusion::Kind;

/// The kind of element-wise pass that computes `op`, if one does (the
/// kinds crate::program fuses, and crate::cpu_kernels computes at once): exactly rounded
/// ops only, whose bits are the same whoever computes them.
pub fn elementwise_kind(op: Op) -> Option<Kind> {
    Some(match op {
        Op::add => Kind::Add,
        Op::subtract => Kind::Subtract,
        Op::multiply => Kind::Multiply,
        Op::divide => Kind::Divide,
        Op::max => Kind::Maximum,
        Op::min => Kind::Minimum,
        Op::negate => Kind::Negate,
        Op::abs => Kind::Abs,
        Op::sqrt => Kind::Sqrt,
        Op::square => Kind::Square,
        _ => return None,
    })
}
