//! Ops of the table that can be computed at once on the host from float32
//! arrays that are already computed, with MLX's bits: the element-wise ones
//! crate::elementwise_fusion computes (arithmetic, `max`, `min`, `negate`,
//! `abs`, `sqrt`, `square`) and `sum` and `mean` over all axes or the last
//! one (super::reduce). A CPU worker takes this path inside the op table's
//! entries when an op's inputs are ready; the `op` NIF takes it on the
//! calling thread when the tensors it is given are known to be computed
//! (ExMLX's `native/ex_mlx/src/op.rs`), so such an op needs no worker at all.

use mlx_rs::Array;

use super::params::Param;
use super::table::Op;
use crate::elementwise_fusion::{computed_on_host, Kind};
use crate::error::Result;

/// The kind of element-wise pass that computes `op`, if one does (the
/// kinds crate::program fuses, and [`on_host`] computes): exactly rounded
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

/// Whether [`on_host`] may compute `op` (a check before reading tensors).
pub fn has_host_path(op: Op) -> bool {
    op == Op::sum || op == Op::mean || elementwise_kind(op).is_some()
}

/// `op` of `inputs` (computed CPU arrays, as the caller knows) with its
/// checked `params`, computed here on the calling thread; `None` where this
/// path does not apply (then the op is queued on the worker as usual).
pub fn on_host(op: Op, inputs: &[&Array], params: &[Param]) -> Result<Option<Array>> {
    if op == Op::sum || op == Op::mean {
        return match (inputs, params) {
            ([a], [Param::OptInts(axes), Param::Bool(keep)]) => {
                let axes = super::reduce::axes_or_all(axes.clone(), a.ndim())?;
                if op == Op::sum {
                    super::reduce::sum_on_host(a, &axes, *keep)
                } else {
                    super::reduce::mean_on_host(a, &axes, *keep)
                }
            }
            _ => Ok(None),
        };
    }
    match elementwise_kind(op) {
        Some(kind) if params.is_empty() => computed_on_host(kind, inputs),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_arrays::{bits, computed};

    #[test]
    fn the_table_s_ops_with_their_params() {
        let values: Vec<f32> = (0..24).map(|i| (i as f32 - 11.5) / 3.0).collect();
        let a = computed(&values, &[2, 3, 4]);
        let row = computed(&[1.0, -2.0, f32::NAN, 0.25], &[4]);
        let sum = on_host(
            Op::sum,
            &[&a],
            &[Param::OptInts(Some(vec![-1])), Param::Bool(true)],
        )
        .unwrap()
        .unwrap();
        assert_eq!(sum.shape(), &[2, 3, 1]);
        assert_eq!(bits(&sum), bits(&a.sum_axes(&[2], true).unwrap()));
        let all = on_host(Op::sum, &[&a], &[Param::OptInts(None), Param::Bool(false)])
            .unwrap()
            .unwrap();
        assert_eq!(bits(&all), bits(&a.sum(false).unwrap()));
        let mean = on_host(
            Op::mean,
            &[&a],
            &[Param::OptInts(Some(vec![2])), Param::Bool(false)],
        )
        .unwrap()
        .unwrap();
        assert_eq!(bits(&mean), bits(&a.mean_axes(&[2], false).unwrap()));
        let max = on_host(Op::max, &[&a, &row], &[]).unwrap().unwrap();
        assert_eq!(bits(&max), bits(&mlx_rs::ops::maximum(&a, &row).unwrap()));
        // a sum over a middle axis, a transcendental op (MLX's kernels
        // compute those) and a bad axis are not this path's
        let middle = [Param::OptInts(Some(vec![1])), Param::Bool(false)];
        assert!(on_host(Op::sum, &[&a], &middle).unwrap().is_none());
        for op in [Op::erf, Op::exp, Op::tanh, Op::sigmoid] {
            assert!(on_host(op, &[&a], &[]).unwrap().is_none(), "{op:?}");
        }
        let bad = [Param::OptInts(Some(vec![3])), Param::Bool(false)];
        assert!(on_host(Op::sum, &[&a], &bad).is_err());
        assert!(has_host_path(Op::add) && has_host_path(Op::sum));
        assert!(!has_host_path(Op::exp) && !has_host_path(Op::matmul));
    }
}
