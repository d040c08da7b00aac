//! Tests of the op table (`super`, ops/table.rs): ops run and follow their
//! type rules.

use super::*;
use crate::device::Device;
use crate::worker::run_blocking;

#[test]
fn float32_transcendentals_on_the_cpu_are_mlx_s_kernels_at_every_size() {
    // the op table's tanh, exp, sigmoid and erf of float32 give MLX's
    // kernels' bits (erf with +0 kept: super::elementwise::erf), and a
    // value's result is the same in an array of 8,192 values and of 7
    let xs: Vec<f32> = (0..8192).map(|i| (i as f32 - 4096.0) / 256.0).collect();
    let checked = run_blocking(Device::Cpu, move || {
        let apply = |op: Op, a: &Array| -> Result<Vec<u32>> {
            let out = op
                .apply(std::slice::from_ref(a), vec![])?
                .into_vec()
                .remove(0);
            out.eval()?;
            Ok(out.as_slice::<f32>().iter().map(|v| v.to_bits()).collect())
        };
        type Kernel = fn(&Array) -> mlx_rs::error::Result<Array>;
        let mlx: [(Op, Kernel); 4] = [
            (Op::tanh, |a| ops::tanh(a)),
            (Op::exp, |a| ops::exp(a)),
            (Op::sigmoid, |a| ops::sigmoid(a)),
            (Op::erf, elementwise::erf),
        ];
        let large = Array::from_slice(&xs, &[8192]);
        for (op, kernel) in mlx {
            let table = apply(op, &large)?;
            let theirs = kernel(&large)?;
            theirs.eval()?;
            let theirs: Vec<u32> = theirs
                .as_slice::<f32>()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            assert_eq!(table, theirs, "{op:?}");
            for start in [0, 100, 4089] {
                let small = Array::from_slice(&xs[start..start + 7], &[7]);
                assert_eq!(
                    apply(op, &small)?,
                    table[start..start + 7],
                    "{op:?} at {start}"
                );
            }
        }
        Ok(true)
    })
    .unwrap();
    assert!(checked);
}

#[test]
fn names_are_unique_and_round_trip() {
    for op in Op::ALL {
        assert_eq!(Op::from_name(op.name()), Some(*op), "{}", op.name());
    }
    let mut names: Vec<_> = Op::ALL.iter().map(|op| op.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Op::ALL.len());
    assert_eq!(Op::from_name("frobnicate"), None);
}

#[test]
fn declared_signatures_are_consistent() {
    for op in Op::ALL {
        let params = op.params();
        // an op without inputs says where it runs
        if op.inputs() == Inputs::Fixed(&[]) {
            assert!(params.iter().any(|p| p.kind == ParamKind::Device), "{op:?}");
        }
        // the typed rule needs a type parameter
        if op.results().contains(&DtypeRule::Typed) {
            assert!(params.iter().any(|p| p.kind == ParamKind::Type), "{op:?}");
        }
        assert!(!op.results().is_empty());
    }
}

#[test]
fn a_wrong_signature_is_an_internal_error_not_a_panic() {
    let e = run_blocking(Device::Cpu, || {
        let a = Array::from_f32(1.0);
        Ok(Op::add.apply(&[a], vec![]).unwrap_err())
    })
    .unwrap();
    assert_eq!(e.kind(), "internal");
    let e = run_blocking(Device::Cpu, || {
        let a = Array::from_f32(1.0);
        Ok(Op::sum
            .apply(&[a], vec![Param::Int(1), Param::Bool(true)])
            .unwrap_err())
    })
    .unwrap();
    assert!(e.to_string().contains("sum"), "{e}");
}

/// Runs every element-wise op on a sample input, and checks its result
/// type against its rule where the rule fixes it.
#[test]
fn every_elementwise_op_runs_and_follows_its_type_rule() {
    run_blocking(Device::Cpu, || {
        let float = Array::from_slice(&[0.5f32, 0.25], &[2]);
        let int = Array::from_slice(&[5i32, 3], &[2]);
        for op in Op::ALL {
            let family = op.family();
            if family != "unary" && family != "binary" {
                continue;
            }
            let bitwise = op.name().contains("bit")
                || op.name().contains("shift")
                || op.name().contains("count");
            let input = if bitwise { &int } else { &float };
            let inputs: Vec<Array> = match op.inputs() {
                Inputs::Fixed(names) => names.iter().map(|_| input.clone()).collect(),
                Inputs::List(_) => vec![input.clone()],
            };
            let out = op
                .apply(&inputs, vec![])
                .map_err(|e| Error::Internal(format!("{}: {e}", op.name())))?
                .into_vec();
            if let Some(expected) = op.results()[0].result(&[input.dtype()], &[]) {
                assert_eq!(out[0].dtype(), expected, "{}", op.name());
            }
        }
        Ok(())
    })
    .unwrap();
}
