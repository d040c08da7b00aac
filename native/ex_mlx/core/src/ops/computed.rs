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
/// kinds crate::program fuses, and [`on_host`] computes).
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
        Op::tanh => Kind::Tanh,
        Op::exp => Kind::Exp,
        Op::sigmoid => Kind::Sigmoid,
        Op::erf => Kind::Erf,
        _ => return None,
    })
}

/// The kind of pass that computes `op` with the op table's bits for
/// results below crate::elementwise_fusion's `MIN_ELEMENTS` values: the
/// exactly rounded element-wise ops, and `exp`, `sigmoid` and `tanh` as
/// MLX's CPU kernels compute them (the MLX kinds, which a pass computes
/// only for results that small).
pub fn exact_kind(op: Op) -> Option<Kind> {
    match op {
        Op::exp => Some(Kind::MlxExp),
        Op::sigmoid => Some(Kind::MlxSigmoid),
        Op::tanh => Some(Kind::MlxTanh),
        _ => elementwise_kind(op).filter(|k| k.exactly_mlx()),
    }
}

/// Whether [`on_host`] may compute `op` (a check before reading tensors).
pub fn has_host_path(op: Op) -> bool {
    op == Op::sum || op == Op::mean || exact_kind(op).is_some()
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
    match exact_kind(op) {
        Some(kind) if params.is_empty() => computed_on_host(kind, inputs),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise_fusion::MIN_ELEMENTS;
    use crate::test_arrays::{bits, computed};
    use mlx_rs::Array;

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
        // exp, sigmoid and tanh with MLX's bits, below MIN_ELEMENTS values
        for (op, mlx) in MLX_TRANSCENDENTALS {
            let ours = on_host(op, &[&a], &[]).unwrap().unwrap();
            assert!(crate::ahead::is_available(&ours), "{op:?}");
            assert_eq!(bits(&ours), bits(&mlx(&a).unwrap()), "{op:?}");
        }
        let large = computed(&vec![0.5; MIN_ELEMENTS], &[MIN_ELEMENTS as i32]);
        assert!(on_host(Op::exp, &[&large], &[]).unwrap().is_none());
        // a sum over a middle axis, a transcendental op MLX's kernel does not
        // compute (erf) and a bad axis are not this path's
        let middle = [Param::OptInts(Some(vec![1])), Param::Bool(false)];
        assert!(on_host(Op::sum, &[&a], &middle).unwrap().is_none());
        assert!(on_host(Op::erf, &[&a], &[]).unwrap().is_none());
        let bad = [Param::OptInts(Some(vec![3])), Param::Bool(false)];
        assert!(on_host(Op::sum, &[&a], &bad).is_err());
        assert!(has_host_path(Op::add) && has_host_path(Op::sum) && has_host_path(Op::exp));
        assert!(!has_host_path(Op::erf) && !has_host_path(Op::matmul));
    }

    type MlxUnary = fn(&Array) -> std::result::Result<Array, mlx_rs::error::Exception>;

    /// The table's ops computed with MLX's kinds, and MLX's own kernels.
    const MLX_TRANSCENDENTALS: [(Op, MlxUnary); 3] = [
        (Op::exp, |a| mlx_rs::ops::exp(a)),
        (Op::sigmoid, |a| mlx_rs::ops::sigmoid(a)),
        (Op::tanh, |a| mlx_rs::ops::tanh(a)),
    ];

    /// The op table's `exp`, `sigmoid` and `tanh` of a computed float32
    /// array on the worker's stream: below MIN_ELEMENTS values computed at
    /// once with MLX's bits (the MLX kinds); from MIN_ELEMENTS on, the
    /// table's own pass, as before.
    #[test]
    fn the_table_s_transcendentals_are_computed_at_once_with_mlx_s_bits() {
        let values: Vec<f32> = (0..3000).map(|i| (i as f32 - 1500.0) / 97.0).collect();
        let a = computed(&values, &[30, 100]);
        for (op, mlx) in MLX_TRANSCENDENTALS {
            let ours = op
                .apply(std::slice::from_ref(&a), vec![])
                .unwrap()
                .into_vec()
                .remove(0);
            assert!(
                crate::ahead::is_available(&ours),
                "{op:?}: not computed at once"
            );
            assert_eq!(bits(&ours), bits(&mlx(&a).unwrap()), "{op:?}");
            // an input still to be computed takes MLX's op
            let pending = mlx_rs::ops::add(&a, &a).unwrap();
            let queued = op
                .apply(std::slice::from_ref(&pending), vec![])
                .unwrap()
                .into_vec()
                .remove(0);
            assert!(!crate::ahead::is_available(&queued), "{op:?}");
            assert_eq!(bits(&queued), bits(&mlx(&pending).unwrap()), "{op:?}");
        }
    }
}
