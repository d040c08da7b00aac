//! Host tensors against MLX, op by op.

use super::*;
use crate::device::Device;
use crate::ops::COMPARISONS;
use crate::test_arrays::pairs_both_orders;
use crate::worker::run_blocking;

/// Arithmetic of two inputs, checked on integer and float32 tensors alike.
const ARITHMETIC: [Op; 5] = [Op::add, Op::subtract, Op::multiply, Op::min, Op::max];

fn t(dtype: Dtype, shape: &[i32], values: &[i128]) -> HostTensor {
    HostTensor {
        dtype,
        shape: shape.to_vec(),
        values: values.iter().map(|&v| wrap(dtype, v).unwrap()).collect(),
    }
}

#[test]
fn integers_wrap_as_mlx_wraps_them() {
    assert_eq!(wrap(Dtype::Int8, 130), Some(-126));
    assert_eq!(wrap(Dtype::Uint8, -1), Some(255));
    assert_eq!(wrap(Dtype::Int32, 1 << 31), Some(-(1 << 31)));
    assert_eq!(wrap(Dtype::Bool, 7), Some(1));
    assert_eq!(wrap(Dtype::Float16, 1), None);
    // (a float32's bits are kept as they are)
    assert_eq!(wrap(Dtype::Float32, 0x8000_0000), Some(0x8000_0000));
}

/// `op` computed here and by MLX (evaluated), on the same arguments:
/// equal whenever this module computes it; returns whether it did.
fn agrees(op: Op, args: &[HostTensor], params: Vec<Param>) -> Result<bool> {
    let arrays = args
        .iter()
        .map(|a| a.to_array())
        .collect::<Result<Vec<_>>>()?;
    let Ok(mlx) = op.apply(&arrays, params.clone()) else {
        return Ok(false);
    };
    let mlx = mlx.into_vec().remove(0);
    let refs: Vec<&HostTensor> = args.iter().collect();
    let Some(here) = apply(op, &refs, &params) else {
        return Ok(false);
    };
    assert_eq!(
        Some(here),
        HostTensor::read(&mlx),
        "{op:?} on {args:?} {params:?}"
    );
    Ok(true)
}

#[test]
fn element_wise_results_match_mlx() {
    let cases: Vec<(Dtype, i128, i128)> = vec![
        (Dtype::Int32, i32::MAX as i128, 1),
        (Dtype::Int32, -7, 3),
        (Dtype::Uint8, 250, 9),
        (Dtype::Uint32, 0xDEAD_BEEF, 13),
        (Dtype::Uint32, 1, 31),
        (Dtype::Uint64, u64::MAX as i128, 63),
        (Dtype::Int64, i64::MIN as i128, -1),
        (Dtype::Int16, -300, 5),
        (Dtype::Bool, 1, 0),
    ];
    let binary = [
        &ARITHMETIC[..],
        &COMPARISONS,
        &[Op::logical_and, Op::logical_or],
        &[Op::bitwise_and, Op::bitwise_or, Op::bitwise_xor],
        &[Op::left_shift, Op::right_shift, Op::remainder],
    ]
    .concat();
    run_blocking(Device::Cpu, move || {
        let mut computed = 0;
        for &(dtype, x, y) in &cases {
            // scalars, and a vector against a scalar (broadcast)
            let pairs = [
                (t(dtype, &[], &[x]), t(dtype, &[], &[y])),
                (t(dtype, &[2], &[x, y]), t(dtype, &[], &[y])),
            ];
            for (a, b) in &pairs {
                assert_eq!(HostTensor::read(&a.to_array()?).as_ref(), Some(a));
                for &op in &binary {
                    computed += agrees(op, &[a.clone(), b.clone()], vec![])? as usize;
                }
                for op in [Op::logical_not, Op::bitwise_not, Op::negate] {
                    computed += agrees(op, std::slice::from_ref(a), vec![])? as usize;
                }
                for to in [Dtype::Int8, Dtype::Uint16, Dtype::Int64, Dtype::Bool] {
                    computed += agrees(Op::as_type, std::slice::from_ref(a), vec![Param::Type(to)])?
                        as usize;
                }
            }
        }
        assert!(computed > 300, "{computed}");
        Ok(())
    })
    .unwrap();
}

#[test]
fn rearrangements_match_mlx() {
    run_blocking(Device::Cpu, || {
        let a = t(Dtype::Uint32, &[2, 3], &[1, 2, 3, 4, 5, 6]);
        let b = t(Dtype::Uint32, &[2, 3], &[7, 8, 9, 10, 11, 12]);
        let v = t(Dtype::Uint32, &[3], &[7, 8, 9]);
        let two = |x: &HostTensor, y: &HostTensor| vec![x.clone(), y.clone()];
        let checks: Vec<(Op, Vec<HostTensor>, Vec<Param>)> = vec![
            (Op::reshape, vec![a.clone()], vec![Param::Shape(vec![3, 2])]),
            (
                Op::squeeze,
                vec![t(Dtype::Int32, &[1, 3], &[4, 5, 6])],
                vec![Param::OptInts(None)],
            ),
            (
                Op::broadcast_to,
                vec![v.clone()],
                vec![Param::Shape(vec![2, 3])],
            ),
            (Op::concatenate, two(&a, &b), vec![Param::Int(0)]),
            (Op::concatenate, two(&a, &b), vec![Param::Int(1)]),
            (Op::stack, two(&a, &b), vec![Param::Int(0)]),
            (Op::stack, two(&a, &b), vec![Param::Int(2)]),
            (Op::stack, two(&v, &v), vec![Param::Int(-1)]),
            (
                Op::slice,
                vec![a.clone()],
                vec![
                    Param::Ints(vec![1, 0]),
                    Param::Ints(vec![2, 3]),
                    Param::OptInts(Some(vec![1, 2])),
                ],
            ),
            (
                Op::dynamic_slice,
                vec![a.clone(), t(Dtype::Int64, &[2], &[1, 5])],
                vec![Param::Shape(vec![1, 2])],
            ),
            (
                Op::dynamic_slice,
                vec![a.clone(), t(Dtype::Int32, &[2], &[-4, 1])],
                vec![Param::Shape(vec![2, 1])],
            ),
            // a block written at starts clamped to fit, an update of
            // another integer type converted (wrapping) to the tensor's
            (
                Op::put_slice,
                vec![
                    a.clone(),
                    t(Dtype::Int64, &[2], &[1, 2]),
                    t(Dtype::Int32, &[1, 2], &[70, 80]),
                ],
                vec![],
            ),
            (
                Op::put_slice,
                vec![
                    a.clone(),
                    t(Dtype::Int32, &[2], &[-3, 9]),
                    t(Dtype::Int32, &[2, 2], &[1, 2, 3, 4]),
                ],
                vec![],
            ),
            (
                Op::put_slice,
                vec![
                    t(Dtype::Int8, &[1, 4], &[0, 0, 0, 0]),
                    t(Dtype::Int64, &[2], &[0, 1]),
                    t(Dtype::Int32, &[1, 2], &[300, -129]),
                ],
                vec![],
            ),
            (
                Op::logical_and,
                vec![
                    t(Dtype::Int32, &[1, 4], &[0, 3, -1, 2]),
                    t(Dtype::Uint8, &[4], &[1, 1, 0, 7]),
                ],
                vec![],
            ),
            (
                Op::logical_or,
                vec![
                    t(Dtype::Bool, &[2, 1], &[0, 1]),
                    t(Dtype::Int64, &[3], &[0, 5, 0]),
                ],
                vec![],
            ),
            (
                Op::put_slice,
                vec![
                    t(Dtype::Bool, &[1, 4], &[0, 0, 0, 0]),
                    t(Dtype::Int64, &[2], &[0, 2]),
                    t(Dtype::Int32, &[1, 2], &[5, 0]),
                ],
                vec![],
            ),
        ];
        for (op, args, params) in checks {
            assert!(
                agrees(op, &args, params.clone())?,
                "{op:?} {params:?} not computed here"
            );
        }
        Ok(())
    })
    .unwrap();
}

fn f(shape: &[i32], values: &[f32]) -> HostTensor {
    HostTensor::from_floats(shape.to_vec(), values)
}

/// Float32 values of every kind: signs, zeros, subnormals, large ones,
/// infinities, NaN, and ordinary ones.
fn mixed_floats(n: usize, from: usize) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        1e-40,
        -1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        3e38,
        -2.5,
        87.5,
        -90.0,
    ];
    (from..from + n)
        .map(|i| match i % 17 {
            k if k < special.len() => special[k],
            k => (k as f32 - 13.0) * 0.371 * ((i % 5) as f32 + 0.5),
        })
        .collect()
}

#[test]
fn float32_ops_match_mlx() {
    run_blocking(Device::Cpu, || {
        let a = f(&[2, 17], &mixed_floats(34, 0));
        let b = f(&[2, 17], &mixed_floats(34, 5));
        let row = f(&[17], &mixed_floats(17, 3));
        let column = f(&[2, 1], &[0.5, -3.0]);
        let scalar = f(&[], &[-0.0]);
        let mut computed = 0;
        let pairs = pairs_both_orders(&a, &b, &row)
            .into_iter()
            .chain([(&column, &row), (&a, &scalar)]);
        let binary = [&ARITHMETIC[..], &[Op::divide], &COMPARISONS].concat();
        for (x, y) in pairs {
            for &op in &binary {
                assert!(agrees(op, &[x.clone(), y.clone()], vec![])?, "{op:?}");
                computed += 1;
            }
        }
        let unary = [Op::negate, Op::abs, Op::sqrt, Op::square];
        for op in unary {
            assert!(agrees(op, std::slice::from_ref(&a), vec![])?, "{op:?}");
            computed += 1;
        }
        // powers and transcendental ops are MLX's kernels' alone
        // (docs/numerics.md)
        assert!(!agrees(Op::pow, &[a.clone(), a.clone()], vec![])?);
        for op in [Op::exp, Op::sigmoid, Op::tanh, Op::erf, Op::log] {
            assert!(!agrees(op, std::slice::from_ref(&a), vec![])?, "{op:?}");
        }
        // conditions of every type (a float32 -0.0 is false, NaN true)
        let conditions = [
            t(Dtype::Bool, &[2, 1], &[1, 0]),
            t(
                Dtype::Uint8,
                &[17],
                &[0, 1, 2, 0, 0, 9, 0, 1, 1, 0, 0, 0, 7, 0, 1, 0, 3],
            ),
            f(&[2, 17], &mixed_floats(34, 1)),
        ];
        for c in &conditions {
            assert!(agrees(
                Op::select,
                &[c.clone(), a.clone(), row.clone()],
                vec![]
            )?);
            let ints = t(Dtype::Int32, &[17], &(0..17).collect::<Vec<_>>());
            let zeros = t(Dtype::Int32, &[], &[0]);
            assert!(agrees(Op::select, &[c.clone(), ints, zeros], vec![])?);
            computed += 2;
        }
        // conversions: integers and booleans to float32; float32 to
        // integers that hold the truncated values, and to booleans
        let small = f(&[6], &[0.0, -0.0, 1.9, -1.9, 126.5, -128.0]);
        for to in [
            Dtype::Int8,
            Dtype::Int32,
            Dtype::Int64,
            Dtype::Bool,
            Dtype::Float32,
        ] {
            assert!(
                agrees(
                    Op::as_type,
                    std::slice::from_ref(&small),
                    vec![Param::Type(to)]
                )?,
                "{to:?}"
            );
            computed += 1;
        }
        assert!(agrees(
            Op::as_type,
            std::slice::from_ref(&a),
            vec![Param::Type(Dtype::Bool)]
        )?);
        for from in [
            t(Dtype::Int32, &[3], &[i32::MAX as i128, -7, 16_777_217]),
            t(Dtype::Uint64, &[2], &[u64::MAX as i128, 3]),
            t(Dtype::Bool, &[2], &[1, 0]),
        ] {
            assert!(agrees(
                Op::as_type,
                &[from],
                vec![Param::Type(Dtype::Float32)]
            )?);
            computed += 1;
        }
        assert!(computed >= 90, "{computed}");
        Ok(())
    })
    .unwrap();
}

#[test]
fn integer_sums_and_extremes_match_mlx() {
    run_blocking(Device::Cpu, || {
        let over =
            |axes: Option<Vec<i64>>, keep: bool| vec![Param::OptInts(axes), Param::Bool(keep)];
        // (values near each type's ends, so that sums wrap)
        for (dtype, values) in [
            (Dtype::Uint8, vec![250, 9, 3, 255, 0, 1]),
            (Dtype::Uint32, vec![0xFFFF_FFFF, 2, 7, 1, 0x8000_0000, 3]),
            (
                Dtype::Int32,
                vec![i32::MAX as i128, 1, -5, i32::MIN as i128, -1, 9],
            ),
            (Dtype::Int64, vec![i64::MAX as i128, 1, -5, 4, -1, 9]),
            (Dtype::Int16, vec![-300, 32_000, 900, -7, 2, 1]),
            (Dtype::Bool, vec![1, 0, 1, 1, 0, 1]),
        ] {
            let a = t(dtype, &[2, 3], &values);
            for params in [
                over(None, false),
                over(None, true),
                over(Some(vec![0]), false),
                over(Some(vec![1]), true),
                over(Some(vec![-1, 0]), false),
            ] {
                for op in [Op::sum, Op::reduce_max, Op::reduce_min] {
                    assert!(
                        agrees(op, std::slice::from_ref(&a), params.clone())?,
                        "{op:?} {dtype:?} {params:?}"
                    );
                }
            }
        }
        // an empty axis: MLX's op decides
        let empty = t(Dtype::Int32, &[2, 0], &[]);
        assert!(!agrees(Op::sum, &[empty], over(Some(vec![1]), false))?);
        Ok(())
    })
    .unwrap();
}

#[test]
fn float32_extremes_match_mlx() {
    run_blocking(Device::Cpu, || {
        // ties, infinities, signed zeros of one sign, subnormals
        let cube = f(
            &[3, 4, 5],
            &(0..60)
                .map(|i| match i % 13 {
                    0 => f32::INFINITY,
                    1 => f32::NEG_INFINITY,
                    2 => 1.0e-40,
                    3 => -0.0,
                    4 => 7.25,
                    _ => ((i * 37 % 29) as f32 - 14.5) * 0.75,
                })
                .collect::<Vec<_>>(),
        );
        let over =
            |axes: Option<Vec<i64>>, keep: bool| vec![Param::OptInts(axes), Param::Bool(keep)];
        for op in [Op::reduce_max, Op::reduce_min] {
            for params in [
                over(None, false),
                over(None, true),
                over(Some(vec![0]), false),
                over(Some(vec![1]), true),
                over(Some(vec![-1]), false),
                over(Some(vec![2, 0, 1]), true),
            ] {
                assert!(
                    agrees(op, std::slice::from_ref(&cube), params.clone())?,
                    "{op:?} {params:?}"
                );
            }
        }
        // a result whose bits depend on MLX's kernel stays with it: a
        // NaN among the values, a zero maximum with both signed zeros
        let nan = f(&[2, 2], &[1.0, f32::NAN, 2.0, 3.0]);
        assert!(!agrees(Op::reduce_max, &[nan], over(Some(vec![1]), false))?);
        let zeros = f(&[3], &[-0.0, 0.0, -1.0]);
        assert!(!agrees(
            Op::reduce_max,
            std::slice::from_ref(&zeros),
            over(None, false)
        )?);
        // (its minimum, -1, is certain: computed here)
        assert!(agrees(Op::reduce_min, &[zeros], over(None, false))?);
        // an empty axis: MLX's error
        let empty = f(&[2, 0], &[]);
        assert!(!agrees(
            Op::reduce_max,
            &[empty],
            over(Some(vec![1]), false)
        )?);
        Ok(())
    })
    .unwrap();
}

#[test]
fn float32_writes_match_mlx() {
    run_blocking(Device::Cpu, || {
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 2003.0 - 0.5) * 37.0)
                .collect()
        };
        // sums and products of float32 are MLX's kernels' (their order
        // of additions is theirs: docs/numerics.md)
        let cube = f(&[3, 4, 5], &values(60, 1));
        let over =
            |axes: Option<Vec<i64>>, keep: bool| vec![Param::OptInts(axes), Param::Bool(keep)];
        for params in [over(None, false), over(Some(vec![-1]), true)] {
            assert!(!agrees(Op::sum, std::slice::from_ref(&cube), params)?);
        }
        let contract = vec![Param::Ints(vec![1]), Param::Ints(vec![0])];
        let (x, y) = (f(&[2, 8], &values(16, 3)), f(&[8, 5], &values(40, 4)));
        assert!(!agrees(Op::tensordot, &[x, y], contract)?);
        // writes: clamped starts, float32 and integer tensors
        let target = f(&[2, 16, 5], &values(160, 5));
        let update = f(&[2, 1, 5], &values(10, 6));
        for starts in [[0, 3, 0], [0, 15, 0], [1, 40, -2]] {
            let starts = t(Dtype::Int64, &[3], &starts.map(|s| s as i128));
            assert!(agrees(
                Op::put_slice,
                &[target.clone(), starts, update.clone()],
                vec![]
            )?);
        }
        let ints = t(Dtype::Int32, &[4], &[1, 2, 3, 4]);
        let two = t(Dtype::Int32, &[2], &[8, 9]);
        assert!(agrees(
            Op::put_slice,
            &[ints, t(Dtype::Int32, &[1], &[1]), two],
            vec![]
        )?);
        let zero = f(&[], &[0.0]);
        for config in [
            vec![(0, 0, 0), (0, 0, 0), (0, 0, 0)],
            vec![(1, 0, 0), (0, 2, 0), (3, 1, 0)],
        ] {
            assert!(agrees(
                Op::pad,
                &[update.clone(), zero.clone()],
                vec![Param::PadConfig(config.clone())]
            )?);
        }
        // scatters: the last write to a repeated position stays;
        // float32 additions to distinct positions are computed here,
        // repeated ones (a sum in some order) are MLX's; integers
        // accumulate exactly
        let grads = f(&[2, 8], &values(16, 8));
        let rows = t(Dtype::Int32, &[5, 1], &[1, 0, 1, 1, 0]);
        let updates = f(&[5, 8], &values(40, 9));
        let adding = |add: bool| vec![Param::OptInts(Some(vec![0])), Param::Bool(add)];
        let args = [grads.clone(), rows.clone(), updates.clone()];
        assert!(agrees(Op::scatter, &args, adding(false))?);
        assert!(!agrees(Op::scatter, &args, adding(true))?);
        let distinct = t(Dtype::Int32, &[2, 1], &[1, 0]);
        let two_rows = f(&[2, 8], &values(16, 11));
        assert!(agrees(
            Op::scatter,
            &[grads.clone(), distinct, two_rows],
            adding(true)
        )?);
        let counts = t(Dtype::Int32, &[3], &[0, 0, 0]);
        let spots = t(Dtype::Uint8, &[3, 1], &[0, 2, 2]);
        let ones = t(Dtype::Int32, &[3], &[1, 1, 1]);
        let all = vec![Param::OptInts(None), Param::Bool(true)];
        assert!(agrees(Op::scatter, &[counts, spots, ones], all)?);
        let grid = f(&[3, 4], &values(12, 10));
        let cells = t(Dtype::Int64, &[2, 2], &[2, 3, 0, 1]);
        let two = f(&[2], &[0.5, -1.5]);
        let both = vec![Param::OptInts(Some(vec![0, 1])), Param::Bool(false)];
        assert!(agrees(Op::scatter, &[grid, cells, two], both)?);
        // gathers and bit casts
        let table = f(&[3, 4], &values(12, 7));
        let at = t(Dtype::Int32, &[2, 2], &[2, 0, 1, 2]);
        assert!(agrees(
            Op::take,
            &[table.clone(), at.clone()],
            vec![Param::Int(0)]
        )?);
        assert!(agrees(Op::take, &[table.clone(), at], vec![Param::Int(1)])?);
        let words = t(
            Dtype::Uint32,
            &[3],
            &[0x3f80_0000, 0x8000_0000, 0xffff_ffff],
        );
        for to in [Dtype::Float32, Dtype::Int32] {
            assert!(agrees(
                Op::bitcast,
                std::slice::from_ref(&words),
                vec![Param::Type(to)]
            )?);
        }
        assert!(agrees(
            Op::bitcast,
            &[table],
            vec![Param::Type(Dtype::Uint32)]
        )?);
        // rearrangements move float32 values as they are
        let a = f(&[2, 3], &mixed_floats(6, 2));
        let checks: Vec<(Op, Vec<HostTensor>, Vec<Param>)> = vec![
            (Op::reshape, vec![a.clone()], vec![Param::Shape(vec![3, 2])]),
            (
                Op::broadcast_to,
                vec![f(&[3], &[1.0, -0.0, 2.5])],
                vec![Param::Shape(vec![2, 3])],
            ),
            (Op::stack, vec![a.clone(), a.clone()], vec![Param::Int(1)]),
            (
                Op::concatenate,
                vec![a.clone(), a.clone()],
                vec![Param::Int(0)],
            ),
            (
                Op::dynamic_slice,
                vec![a.clone(), t(Dtype::Int64, &[2], &[1, 2])],
                vec![Param::Shape(vec![1, 2])],
            ),
        ];
        for (op, args, params) in checks {
            assert!(agrees(op, &args, params.clone())?, "{op:?}");
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn float32_ops_not_computed_here_stay_with_mlx() {
    run_blocking(Device::Cpu, || {
        let a = f(&[3], &[1.5, -2.0, 300.0]);
        // a float32 too large for a type, a transcendental op MLX's
        // kernel computes otherwise (erf), mixed types, interior padding
        assert!(!agrees(
            Op::as_type,
            std::slice::from_ref(&a),
            vec![Param::Type(Dtype::Uint8)]
        )?);
        // (2^31 for int32: that bound rounded to float32 is 2^31 too)
        let int32 = || vec![Param::Type(Dtype::Int32)];
        let edge = f(&[2], &[2_147_483_648.0, -2_147_483_648.0]);
        assert!(!agrees(Op::as_type, std::slice::from_ref(&edge), int32())?);
        let inside = f(&[2], &[2_147_483_520.0, -2_147_483_648.0]);
        assert!(agrees(Op::as_type, std::slice::from_ref(&inside), int32())?);
        assert!(!agrees(Op::erf, std::slice::from_ref(&a), vec![])?);
        assert!(!agrees(
            Op::add,
            &[a.clone(), t(Dtype::Int32, &[], &[1])],
            vec![]
        )?);
        let zero = f(&[], &[0.0]);
        assert!(!agrees(
            Op::pad,
            &[a.clone(), zero],
            vec![Param::PadConfig(vec![(0, 0, 1)])]
        )?);
        // more values than are kept here
        let big = f(
            &[MAX_FLOAT_ELEMENTS as i32 + 1],
            &vec![1.0; MAX_FLOAT_ELEMENTS + 1],
        );
        assert!(!agrees(Op::add, &[big.clone(), big], vec![])?);
        let large = Array::from_slice(
            &vec![1.0f32; MAX_FLOAT_ELEMENTS + 1],
            &[MAX_FLOAT_ELEMENTS as i32 + 1],
        );
        assert_eq!(HostTensor::read(&large), None);
        Ok(())
    })
    .unwrap();
}

#[test]
fn other_types_mixed_types_and_big_tensors_stay_with_mlx() {
    run_blocking(Device::Cpu, || {
        let a = t(Dtype::Int32, &[], &[1]);
        let b = t(Dtype::Int64, &[], &[1]);
        assert!(!agrees(Op::add, &[a.clone(), b], vec![])?);
        assert!(!agrees(Op::quotient, &[a.clone(), a.clone()], vec![])?);
        let f = t(Dtype::Int32, &[2], &[1, 2]);
        let g = t(Dtype::Int32, &[3], &[1, 2, 3]);
        assert_eq!(apply(Op::add, &[&f, &g], &[]), None);
        let n = MAX_ELEMENTS + 1;
        let big = t(Dtype::Int32, &[n as i32], &vec![0; n]);
        assert!(!agrees(Op::add, &[big.clone(), big], vec![])?);
        Ok(())
    })
    .unwrap();
}
