//! Tests of a loop writing a cache at its position (`put_slice`, whose
//! starts are [`Op::bound_inputs`]): the write and the ops computing its
//! starts stay out of MLX's compile, so that the host knows the starts at
//! every step and MLX is given a write of constant bounds.

use mlx_rs::Array;

use super::test_programs::{body_ops, counting_loop, op, run_on_cpu, the_loop};
use super::{Instruction, Program};
use crate::device::Device;
use crate::ops::params::Param;
use crate::ops::table::Op;

const KEYS: usize = 6;
const DIMS: usize = 3;
const STEPS: i64 = 4;

/// while i < STEPS { cache = put_slice(cache, [0, 0, i, 0], tanh(x · c +
/// c) · c); i = i + 1 }. Slots: inputs 0 (i, s64), 1 (the cache,
/// {1, 1, KEYS, DIMS}); constants 2 (STEPS), 3 (1), 4 (0), 5 (c), 6 (x,
/// {1, 1, 1, DIMS}); state 7, 8; condition 9; body 10..16; results 17, 18.
fn writing_loop() -> Program {
    counting_loop(
        5,
        vec![
            op(Op::multiply, &[6, 5], vec![]),
            op(Op::add, &[10, 5], vec![]),
            op(Op::tanh, &[11], vec![]),
            op(Op::multiply, &[12, 5], vec![]),
            op(Op::stack, &[4, 4, 7, 4], vec![Param::Int(0)]),
            op(Op::put_slice, &[8, 14, 13], vec![]),
            op(Op::add, &[7, 3], vec![]),
        ],
        &[16, 15],
        &[17, 18],
    )
}

fn x_values() -> Vec<f32> {
    (0..DIMS).map(|k| 0.2 + (k as f32 * 0.61).sin()).collect()
}

const C: f32 = 0.75;

/// `program` run on the CPU as a GPU run is, its integer constants and i
/// known on the host: the final cache and the MLX graph that computes it,
/// in `print_graph` form.
fn run_writing(program: Program) -> (Vec<f32>, String) {
    let values = || {
        vec![
            Array::from_slice(&[0i64], &[]),
            Array::from_slice(&[0f32; KEYS * DIMS], &[1, 1, KEYS as i32, DIMS as i32]),
            Array::from_slice(&[STEPS], &[]),
            Array::from_slice(&[1i64], &[]),
            Array::from_slice(&[0i64], &[]),
            Array::from_f32(C),
            Array::from_slice(&x_values(), &[1, 1, 1, DIMS as i32]),
        ]
    };
    run_on_cpu(
        program,
        values,
        |_| true,
        |run| {
            let cache = run.read(18)?;
            let path = std::env::temp_dir().join(format!("bound_tests.{}.txt", std::process::id()));
            let path = path.to_string_lossy().into_owned();
            crate::step_graph::write_to(&path, std::slice::from_ref(&cache))
                .map_err(crate::error::Error::Internal)?;
            let graph = std::fs::read_to_string(&path).unwrap_or_default();
            let _ = std::fs::remove_file(&path);
            mlx_rs::transforms::eval([&cache])?;
            Ok((cache.as_slice::<f32>().to_vec(), graph))
        },
    )
}

/// The graph's nodes whose primitive is `name` (a word of a line).
fn nodes(graph: &str, name: &str) -> usize {
    graph
        .lines()
        .filter(|line| line.split_whitespace().any(|w| w == name))
        .count()
}

#[test]
fn a_write_at_the_loop_s_position_has_constant_bounds_under_mlx_s_compile() {
    if !crate::cpu_kernels::in_programs() {
        return;
    }
    let mut compiled = writing_loop();
    assert!(compiled.fuse_with_mlx_compile(Device::Cpu));
    // the starts move ahead of the run of four element-wise ops, which MLX
    // compiles; the write and the step's count stay out of it
    assert!(matches!(
        &the_loop(&compiled).body.instructions[1],
        Instruction::Compiled(_)
    ));
    assert_eq!(
        body_ops(the_loop(&compiled)),
        vec![
            vec![Op::stack],
            vec![Op::multiply, Op::add, Op::tanh, Op::multiply],
            vec![Op::put_slice],
            vec![Op::add],
        ]
    );
    let (fused, graph) = run_writing(compiled);
    // rows 0..STEPS hold tanh(x · c + c) · c, the rest their zeros
    let row: Vec<f32> = x_values().iter().map(|x| (x * C + C).tanh() * C).collect();
    for (k, value) in fused.iter().enumerate() {
        let (position, dim) = (k / DIMS, k % DIMS);
        let expected = if (position as i64) < STEPS {
            row[dim]
        } else {
            0.0
        };
        assert!(
            (value - expected).abs() <= 1e-6,
            "{k}: {value} vs {expected}"
        );
    }
    // each step's write is MLX's SliceUpdate of constant bounds
    assert_eq!(nodes(&graph, "DynamicSliceUpdate"), 0, "{graph}");
    assert!(nodes(&graph, "SliceUpdate") >= 1, "{graph}");
    let (plain, _) = run_writing(writing_loop());
    assert_eq!(fused, plain);
}
