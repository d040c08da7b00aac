//! Tests of programs' fusion: MLX's compile of runs of ops (GPU and
//! CPU), ExMLX's element-wise groups on the CPU.

use super::*;
use crate::worker::run_blocking;

/// A program of one input, x (slot 0), and one constant, c (slot 1).
fn x_and_c(instructions: Vec<Instruction>, outputs: &[usize]) -> Program {
    Program::new(1, 1, instructions, outputs.to_vec()).unwrap()
}

#[test]
fn mlx_s_compile_gives_the_unfused_results() {
    // tanh(x * c + c) * c, then its sum, fused and not
    let make = || {
        x_and_c(
            vec![
                elementwise(Op::multiply, &[0, 1]),
                elementwise(Op::add, &[2, 1]),
                elementwise(Op::tanh, &[3]),
                elementwise(Op::multiply, &[4, 1]),
                sum_of(5),
            ],
            &[5, 6],
        )
    };
    // (MLX's compile is what `fuse` uses on a GPU; its C++ path on the
    // CPU, where g++ is present, runs the same function)
    let (plain, fused) = plain_and_fused(make, Program::fuse_with_mlx_compile);
    assert!(!plain.fused());
    let (a, b) = run_blocking(Device::Cpu, move || {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 / 1000.0 - 0.5).collect();
        let go = |p: &Program| run_on(p, x.clone(), 0.75);
        // twice: the second call reuses the compiled function
        let f1 = go(&fused)?;
        let f2 = go(&fused)?;
        assert_eq!(f1, f2);
        Ok((go(&plain)?, f1))
    })
    .unwrap();
    assert_eq!(a[0].len(), 1000);
    for (x, y) in a[0].iter().zip(&b[0]) {
        assert!((x - y).abs() <= 1e-6, "{x} vs {y}");
    }
    assert!(
        (a[1][0] - b[1][0]).abs() <= 1e-3,
        "{:?} vs {:?}",
        a[1],
        b[1]
    );
}

/// The program `make` builds, twice: as built, and fused on the CPU by
/// `fuse`, which must fuse it.
fn plain_and_fused(
    make: impl Fn() -> Program,
    fuse: fn(&mut Program, Device) -> bool,
) -> (Program, Program) {
    let mut fused = make();
    assert!(fuse(&mut fused, Device::Cpu));
    (make(), fused)
}

fn elementwise(op: Op, inputs: &[usize]) -> Instruction {
    Instruction::Op(OpCall::new(op, inputs.to_vec(), vec![], None, 1))
}

fn sum_of(slot: usize) -> Instruction {
    Instruction::Op(OpCall::new(
        Op::sum,
        vec![slot],
        vec![Param::OptInts(None), Param::Bool(false)],
        None,
        1,
    ))
}

/// x: slot 0, c: slot 1. A = |x * c + c|; B = A * c - x; outputs
/// B and sum(A). A is read twice, so it ends its group.
fn two_groups() -> Program {
    x_and_c(
        vec![
            elementwise(Op::multiply, &[0, 1]),
            elementwise(Op::add, &[2, 1]),
            elementwise(Op::abs, &[3]),
            elementwise(Op::multiply, &[4, 1]),
            sum_of(4),
            elementwise(Op::subtract, &[5, 0]),
        ],
        &[7, 6],
    )
}

/// The main block's instructions: an op's name, or a group's kind
/// (`fused` for `fuse: true`, `ready` for `Program::group_ready_ops`),
/// its op count and its leaves.
fn instructions(p: &Program) -> Vec<String> {
    p.main
        .instructions
        .iter()
        .map(|ins| match ins {
            Instruction::Op(call) => call.op.name().to_string(),
            Instruction::Fused(g) => format!(
                "{} {} ops of {:?}",
                if g.when_ready { "ready" } else { "fused" },
                g.ops.len(),
                g.kernel.leaves()
            ),
            _ => "other".into(),
        })
        .collect()
}

fn run_on(p: &Program, x: Vec<f32>, c: f32) -> Result<Vec<Vec<f32>>> {
    let n = x.len() as i32;
    let out = p.run(vec![Array::from_slice(&x, &[n])], vec![Array::from_f32(c)])?;
    Ok(out.iter().map(|a| a.as_slice::<f32>().to_vec()).collect())
}

#[test]
fn on_the_cpu_element_wise_ops_read_once_are_grouped() {
    let mut p = two_groups();
    assert!(p.fuse(Device::Cpu));
    assert!(p.fused() && p.fused.is_none());
    assert_eq!(
        instructions(&p),
        ["fused 3 ops of [0, 1]", "sum", "fused 2 ops of [4, 1, 0]"]
    );
    // nothing to group: one element-wise op
    let mut single = Program::new(1, 1, vec![elementwise(Op::add, &[0, 1])], vec![2]).unwrap();
    assert!(!single.fuse(Device::Cpu));
    let mut lone = Program::new(1, 0, vec![elementwise(Op::exp, &[0])], vec![1]).unwrap();
    assert!(!lone.fuse(Device::Cpu));
}

/// x: slot 0, b: slot 1, zero: slot 2 (a constant). max(x + b, 0) * b,
/// then x - that (x is read twice, so the subtract is a group of one).
fn bias_relu() -> Program {
    Program::new(
        2,
        1,
        vec![
            elementwise(Op::add, &[0, 1]),
            elementwise(Op::max, &[3, 2]),
            elementwise(Op::multiply, &[4, 1]),
            elementwise(Op::subtract, &[0, 5]),
        ],
        vec![6],
    )
    .unwrap()
}

#[test]
fn exactly_rounded_chains_are_grouped_to_run_when_ready() {
    let mut p = bias_relu();
    assert_eq!(p.group_ready_ops(), 1);
    // (not `fuse: true`'s fusion)
    assert!(!p.fused());
    assert_eq!(instructions(&p), ["ready 4 ops of [0, 1, 2]"]);
    // a transcendental op is not exactly rounded: no group through it
    let mut with_exp = Program::new(
        1,
        0,
        vec![elementwise(Op::exp, &[0]), elementwise(Op::add, &[1, 0])],
        vec![2],
    )
    .unwrap();
    assert_eq!(with_exp.group_ready_ops(), 0);
    // `fuse: true`'s groups are left as they are
    let mut fused = bias_relu();
    assert!(fused.fuse(Device::Cpu));
    assert_eq!(fused.group_ready_ops(), 0);
}

#[test]
fn ready_groups_give_the_bits_of_their_ops_one_by_one() {
    // signed zeros, infinities, NaN, ties of max, sums that round
    let mut x: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0e-45,
        -1.0e-45,
        3.4e38,
        -3.4e38,
        1.0,
        -1.0,
    ];
    x.extend((0..501).map(|i| ((i * 7919) % 1001) as f32 / 37.0 - 13.5));
    let b: Vec<f32> = (0..x.len())
        .map(|i| match i % 5 {
            0 => -0.0,
            1 => 0.1,
            2 => f32::NAN,
            3 => 3.4e38,
            _ => (i as f32).sqrt() - 10.0,
        })
        .collect();
    let n = x.len() as i32;
    let plain = bias_relu();
    let mut ready = bias_relu();
    assert_eq!(ready.group_ready_ops(), 1);
    let (one_by_one, grouped, grouped_lazy, direct) = run_blocking(Device::Cpu, move || {
        let inputs = || {
            vec![
                crate::test_arrays::computed(&x, &[n]),
                crate::test_arrays::computed(&b, &[n]),
            ]
        };
        let zero = || vec![crate::test_arrays::computed(&[0.0], &[])];
        let run = |p: &Program, inputs: Vec<Array>| -> Result<Vec<u32>> {
            let out = p.run(inputs, zero())?;
            mlx_rs::transforms::eval(&out)?;
            Ok(crate::test_arrays::bits(&out[0]))
        };
        // an input still being computed: the group runs op by op
        let lazy = || -> Result<Vec<Array>> {
            let [x, b]: [Array; 2] = inputs().try_into().unwrap();
            Ok(vec![mlx_rs::ops::multiply(&x, Array::from_f32(1.0))?, b])
        };
        // the kernel itself, on computed inputs and on a lazy one
        let Instruction::Fused(group) = &ready.main.instructions[0] else {
            unreachable!()
        };
        let mut leaves = inputs();
        leaves.extend(zero());
        let direct = group
            .kernel
            .run_ready(&leaves)?
            .map(|a| crate::test_arrays::bits(&a));
        let mut lazy_leaves = lazy()?;
        lazy_leaves.extend(zero());
        assert!(group.kernel.run_ready(&lazy_leaves)?.is_none());
        Ok((
            run(&plain, inputs())?,
            run(&ready, inputs())?,
            run(&ready, lazy()?)?,
            direct,
        ))
    })
    .unwrap();
    assert_eq!(one_by_one.len(), 512);
    assert_eq!(grouped, one_by_one);
    assert_eq!(grouped_lazy, one_by_one);
    assert_eq!(direct, Some(one_by_one));
}

#[test]
fn cpu_fused_groups_give_the_unfused_results() {
    let (plain, fused) = plain_and_fused(two_groups, Program::fuse);
    let (big_plain, big_fused, small_plain, small_fused) = run_blocking(Device::Cpu, move || {
        let big: Vec<f32> = (0..20_000)
            .map(|i| (i as f32 - 10_000.0) / 2_500.0)
            .collect();
        let small: Vec<f32> = big[..100].to_vec();
        Ok((
            run_on(&plain, big.clone(), 0.75)?,
            run_on(&fused, big, 0.75)?,
            run_on(&plain, small.clone(), 0.75)?,
            run_on(&fused, small, 0.75)?,
        ))
    })
    .unwrap();
    // fused (20,000 elements): exactly rounded ops, so MLX's bits
    assert_eq!(big_fused[0].len(), 20_000);
    assert_eq!(big_plain, big_fused);
    // too small to fuse: the same ops one by one, the same bits
    assert_eq!(small_plain, small_fused);
}

#[test]
fn a_group_runs_fused_on_float32_inputs_whose_shapes_broadcast() {
    let mut p = two_groups();
    p.fuse(Device::Cpu);
    let Instruction::Fused(group) = p.main.instructions[0].clone() else {
        panic!("no fused group first");
    };
    let outcomes = run_blocking(Device::Cpu, move || {
        let x = |n: usize| Array::from_slice(&vec![0.5f32; n], &[n as i32]);
        let c = Array::from_f32(2.0);
        let fused = |leaves: &[Array]| -> Result<Option<Vec<i32>>> {
            Ok(group.kernel.run(leaves)?.map(|a| a.shape().to_vec()))
        };
        let rows = Array::from_slice(&vec![0.5f32; 8192], &[2, 4096]);
        let one_by_one = Array::from_slice(&[2.0f32], &[1, 1]);
        let more_axes = Array::from_slice(&[2.0f32], &[1, 1, 1]);
        let wide = Array::from_slice(&vec![2.0f32; 4096], &[4096]);
        let column = Array::from_slice(&[2.0f32, 3.0], &[2, 1]);
        let three = Array::from_slice(&[2.0f32; 3], &[3]);
        Ok(vec![
            fused(&[x(8192), c.clone()])?,
            fused(&[x(100), c.clone()])?,
            fused(&[x(8192).as_dtype(Dtype::Float64)?, c.clone()])?,
            fused(&[x(8192), c.as_dtype(Dtype::Int32)?])?,
            fused(&[rows.clone(), one_by_one])?,
            fused(&[rows.clone(), more_axes])?,
            fused(&[rows.clone(), wide.clone()])?,
            fused(&[wide, column])?,
            fused(&[rows, three])?,
        ])
    })
    .unwrap();
    assert_eq!(
        outcomes,
        [
            Some(vec![8192]),
            None,
            None,
            None,
            Some(vec![2, 4096]),
            Some(vec![1, 2, 4096]),
            Some(vec![2, 4096]),
            Some(vec![2, 4096]),
            None
        ]
    );
}

#[test]
fn broadcast_inputs_give_the_unfused_results() {
    // x {4096} against c {2, 1}, and x {2, 4096} against c {4096}
    let (plain, fused) = plain_and_fused(two_groups, Program::fuse);
    let (a, b) = run_blocking(Device::Cpu, move || {
        let xs: Vec<f32> = (0..8192).map(|i| (i as f32 - 4096.0) / 1024.0).collect();
        let cases = || {
            vec![
                (
                    Array::from_slice(&xs[..4096], &[4096]),
                    Array::from_slice(&[0.5f32, -1.5], &[2, 1]),
                ),
                (
                    Array::from_slice(&xs, &[2, 4096]),
                    Array::from_slice(&xs[2048..6144], &[4096]),
                ),
            ]
        };
        let go = |p: &Program| -> Result<Vec<(Vec<i32>, Vec<f32>)>> {
            let mut out = Vec::new();
            for (x, c) in cases() {
                let r = p.run(vec![x], vec![c])?;
                out.push((r[0].shape().to_vec(), r[0].as_slice::<f32>().to_vec()));
            }
            Ok(out)
        };
        Ok((go(&plain)?, go(&fused)?))
    })
    .unwrap();
    for ((sp, vp), (sf, vf)) in a.iter().zip(&b) {
        assert_eq!(sp, sf);
        assert_eq!(sp, &vec![2, 4096]);
        for (p, f) in vp.iter().zip(vf) {
            assert!(
                (p - f).abs() <= 4.0 * f32::EPSILON * p.abs().max(1.0),
                "{p} vs {f}"
            );
        }
    }
}

/// A program of `inputs` inputs and `constants` constants that is one
/// loop over all the inputs: while `condition` (writing `test`), `body`
/// gives `next`; the outputs are the loop's `results`.
fn one_loop(
    (inputs, constants): (usize, usize),
    (condition, test): (Vec<Instruction>, usize),
    (body, next): (Vec<Instruction>, &[usize]),
    results: &[usize],
) -> Program {
    Program::new(
        inputs,
        constants,
        vec![Instruction::Loop(Loop::new(
            (0..inputs).collect(),
            Block {
                instructions: condition,
                outputs: vec![test],
            },
            Block {
                instructions: body,
                outputs: next.to_vec(),
            },
        ))],
        results.to_vec(),
    )
    .unwrap()
}

#[test]
fn groups_inside_loops_are_fused_too() {
    // while i < 3: x = tanh(x * c + c); i = i + 1
    let make = || {
        one_loop(
            (2, 2),
            (vec![elementwise(Op::less, &[5, 3])], 6),
            (
                vec![
                    elementwise(Op::multiply, &[4, 2]),
                    elementwise(Op::add, &[7, 2]),
                    elementwise(Op::tanh, &[8]),
                    elementwise(Op::add, &[5, 3]),
                ],
                &[9, 10],
            ),
            &[11],
        )
    };
    // (the loop counts with the constant 3 as its bound and its step:
    // i + 3 reaches 3 after one step; so one step, checked below)
    let (plain, fused) = plain_and_fused(make, Program::fuse);
    let (a, b) = run_blocking(Device::Cpu, move || {
        let x: Vec<f32> = (0..8192).map(|i| i as f32 / 4096.0 - 1.0).collect();
        let go = |p: &Program| -> Result<Vec<f32>> {
            let out = p.run(
                vec![Array::from_slice(&x, &[8192]), Array::from_f32(0.0)],
                vec![Array::from_f32(0.5), Array::from_f32(3.0)],
            )?;
            Ok(out[0].as_slice::<f32>().to_vec())
        };
        Ok((go(&plain)?, go(&fused)?))
    })
    .unwrap();
    let want = |x: f32| ((x as f64 * 0.5 + 0.5).tanh()) as f32;
    for (k, (p, f)) in a.iter().zip(&b).enumerate() {
        let x = k as f32 / 4096.0 - 1.0;
        assert_eq!(p.to_bits(), f.to_bits(), "{p} vs {f}");
        assert!((want(x) - f).abs() <= 2.0 * f32::EPSILON, "{x}: {f}");
    }
}

#[test]
fn a_program_mlx_s_compile_cannot_trace_runs_unfused() {
    // exp of float64 on the CPU reads its values on the host
    // (ops::precise), which MLX's compile cannot trace
    let make = || {
        Program::new(
            1,
            0,
            vec![elementwise(Op::exp, &[0]), elementwise(Op::add, &[1, 1])],
            vec![2],
        )
        .unwrap()
    };
    let (plain, fused) = plain_and_fused(make, Program::fuse_with_mlx_compile);
    let (a, b) = run_blocking(Device::Cpu, move || {
        let go = |p: &Program| -> Result<Vec<f64>> {
            let x = Array::from_slice(&[0.5f32, -1.0, 2.0], &[3]).as_dtype(Dtype::Float64)?;
            let out = p.run(vec![x], vec![])?.remove(0);
            assert_eq!(out.dtype(), Dtype::Float64);
            Ok(out.as_slice::<f64>().to_vec())
        };
        // twice: the second call knows to run unfused
        let first = go(&fused)?;
        assert_eq!(first, go(&fused)?);
        Ok((go(&plain)?, first))
    })
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(a[0], 2.0 * 0.5f64.exp());
}

// while i < 5 { i += 1; x = tanh(x * c + c) * c }: slots 0 (i), 1 (x),
// 2 (5), 3 (1), 4 (c); state 5, 6; condition 7; body 8..12; results 13, 14.
fn tanh_loop() -> Program {
    one_loop(
        (2, 3),
        (vec![elementwise(Op::less, &[5, 2])], 7),
        (
            vec![
                elementwise(Op::add, &[5, 3]),
                elementwise(Op::multiply, &[6, 4]),
                elementwise(Op::add, &[9, 4]),
                elementwise(Op::tanh, &[10]),
                elementwise(Op::multiply, &[11, 4]),
            ],
            &[8, 12],
        ),
        &[13, 14],
    )
}

#[test]
fn a_loop_s_body_is_compiled_by_mlx_with_the_unfused_results() {
    let plain = tanh_loop();
    let mut fused = tanh_loop();
    assert!(fused.fuse_with_mlx_compile(Device::Cpu));
    assert!(fused.fused() && !plain.fused());
    // the body's five ops are one compiled run; the condition's one op
    // stays as it is
    let Instruction::Loop(l) = &fused.main.instructions[0] else {
        panic!("not a loop")
    };
    assert!(matches!(&l.body.instructions[..], [Instruction::Compiled(run)] if run.ops.len() == 5));
    assert!(matches!(
        &l.condition.instructions[..],
        [Instruction::Op(_)]
    ));
    let (a, b) = run_blocking(Device::Cpu, move || {
        let go = |p: &Program| -> Result<(Vec<i32>, Vec<f32>)> {
            let x: Vec<f32> = (0..1000).map(|i| i as f32 / 1000.0 - 0.5).collect();
            let inputs = vec![Array::from_int(0), Array::from_slice(&x, &[1000])];
            let constants = vec![
                Array::from_int(5),
                Array::from_int(1),
                Array::from_f32(0.75),
            ];
            let out = p.run(inputs, constants)?;
            mlx_rs::transforms::eval(out.iter().collect::<Vec<_>>())?;
            Ok((
                out[0].as_slice::<i32>().to_vec(),
                out[1].as_slice::<f32>().to_vec(),
            ))
        };
        Ok((go(&plain)?, go(&fused)?))
    })
    .unwrap();
    assert_eq!((a.0.clone(), b.0.clone()), (vec![5], vec![5]));
    for (x, y) in a.1.iter().zip(&b.1) {
        assert!((x - y).abs() <= 1e-6, "{x} vs {y}");
    }
}

#[test]
fn runs_of_fewer_ops_than_a_compiled_run_stay_as_they_are() {
    let mut p = one_loop((1, 0), (vec![], 1), (vec![], &[1]), &[2]);
    assert!(!p.fuse_with_mlx_compile(Device::Cpu));
    // a body of two ops: while i < 5 { i += 1; x = x * c }
    let mut p = one_loop(
        (2, 2),
        (vec![elementwise(Op::less, &[4, 2])], 6),
        (
            vec![
                elementwise(Op::add, &[4, 3]),
                elementwise(Op::multiply, &[5, 3]),
            ],
            &[7, 8],
        ),
        &[9, 10],
    );
    assert!(!p.fuse_with_mlx_compile(Device::Cpu));
    assert!(!p.fused());
}
