//! Tests of a loop whose attention reads its mask (`attention_admitted`,
//! crate::ops::admitted): the mask's ops stay out of MLX's compile, so the
//! host knows the mask at every step, and a mask read from MLX is read
//! once for all the attentions that take it.

use mlx_rs::Array;

use super::test_programs::{body_ops, counting_loop, op, run_on_cpu, the_loop};
use super::{Block, Branch, Instruction, Program};
use crate::device::Device;
use crate::ops::params::Param;
use crate::ops::table::Op;

const KEYS: usize = 8;
const DIMS: usize = 4;
const STEPS: i32 = 4;

/// A decoding loop of `STEPS` steps over a cache of `KEYS` keys: while
/// i < STEPS { x = attention(attention(tanh(x · c + c) · c, admitted),
/// admitted); i = i + 1 } with admitted = positions ≤ i, computed in the
/// middle of the body's run of element-wise ops. Slots: inputs 0 (i),
/// 1 (x, {1, 1, 1, DIMS}); constants 2 (STEPS), 3 (1), 4 (the positions,
/// {1, 1, 1, KEYS}), 5 (keys) and 6 (values), {1, 1, KEYS, DIMS}, 7 (c);
/// state 8, 9; condition 10; body 11..18; results 19, 20.
fn decoding_loop() -> Program {
    let scale = vec![Param::Float(0.5)];
    decoding(
        vec![
            op(Op::multiply, &[9, 7], vec![]),
            op(Op::add, &[11, 7], vec![]),
            op(Op::less_equal, &[4, 8], vec![]),
            op(Op::tanh, &[12], vec![]),
            op(Op::multiply, &[14, 7], vec![]),
            op(Op::attention_admitted, &[15, 5, 6, 13], scale.clone()),
            op(Op::attention_admitted, &[16, 5, 6, 13], scale),
            op(Op::add, &[8, 3], vec![]),
        ],
        &[18, 17],
        &[19, 20],
    )
}

/// The program of inputs i and x, the constants of [`decoding_loop`], and
/// one loop: while i < STEPS, `body`, whose `next` slots are the next i
/// and x, `results` the loop's.
fn decoding(body: Vec<Instruction>, next: &[usize], results: &[usize]) -> Program {
    counting_loop(6, body, next, results)
}

/// [`decoding_loop`] with one attention, whose result is scaled by c in
/// the first step only: a branch on i < 1 (slot 14, computed among the
/// run of element-wise ops). Slots: as there to 13; 14 the predicate;
/// 15, 16 tanh and its scaling; 17 the attention; the branch's body 18,
/// its result 19; 20 the step's count; results 21, 22.
fn decoding_loop_with_a_branch() -> Program {
    let branch = Branch::new(
        vec![(
            Block {
                instructions: vec![],
                outputs: vec![14],
            },
            Block {
                instructions: vec![op(Op::multiply, &[17, 7], vec![])],
                outputs: vec![18],
            },
        )],
        Block {
            instructions: vec![],
            outputs: vec![17],
        },
    );
    decoding(
        vec![
            op(Op::multiply, &[9, 7], vec![]),
            op(Op::add, &[11, 7], vec![]),
            op(Op::less_equal, &[4, 8], vec![]),
            op(Op::less, &[8, 3], vec![]),
            op(Op::tanh, &[12], vec![]),
            op(Op::multiply, &[15, 7], vec![]),
            op(
                Op::attention_admitted,
                &[16, 5, 6, 13],
                vec![Param::Float(0.5)],
            ),
            Instruction::Branch(branch),
            op(Op::add, &[8, 3], vec![]),
        ],
        &[20, 19],
        &[21, 22],
    )
}

fn ramp(n: usize, from: f32) -> Vec<f32> {
    (0..n).map(|k| from + (k as f32 * 0.37).sin()).collect()
}

/// `program` run on the CPU as a GPU run is, the constants and small
/// inputs known on the host unless `positions_known` is false: the final
/// x (slot `x`) and how many values the run read from MLX.
fn run_decoding(program: Program, positions_known: bool, x: usize) -> (Vec<f32>, u64) {
    let values = || {
        let positions: Vec<i32> = (0..KEYS as i32).collect();
        vec![
            Array::from_int(0),
            Array::from_slice(&ramp(DIMS, 0.1), &[1, 1, 1, DIMS as i32]),
            Array::from_int(STEPS),
            Array::from_int(1),
            Array::from_slice(&positions, &[1, 1, 1, KEYS as i32]),
            Array::from_slice(&ramp(KEYS * DIMS, -0.2), &[1, 1, KEYS as i32, DIMS as i32]),
            Array::from_slice(&ramp(KEYS * DIMS, 0.3), &[1, 1, KEYS as i32, DIMS as i32]),
            Array::from_f32(0.75),
        ]
    };
    run_on_cpu(
        program,
        values,
        move |slot| slot != 4 || positions_known,
        move |run| {
            let out = run.read(x)?;
            mlx_rs::transforms::eval([&out])?;
            Ok((out.as_slice::<f32>().to_vec(), run.reads))
        },
    )
}

/// `fused` holds DIMS values, each within 1e-6 of `plain`'s.
fn assert_close(fused: &[f32], plain: &[f32]) {
    assert_eq!(fused.len(), DIMS);
    for (a, b) in fused.iter().zip(plain) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
}

#[test]
fn the_mask_s_ops_stay_out_of_mlx_s_compile() {
    if !crate::cpu_kernels::in_programs() {
        return;
    }
    let plain = decoding_loop();
    let mut compiled = decoding_loop();
    assert!(compiled.fuse_with_mlx_compile(Device::Cpu));
    // the mask's comparison moves ahead of the run of four element-wise
    // ops, which MLX compiles; the attentions and the step's count stay
    let body = &the_loop(&compiled).body.instructions;
    assert!(matches!(&body[0], Instruction::Op(c) if c.op == Op::less_equal));
    assert!(matches!(&body[1], Instruction::Compiled(_)));
    assert_eq!(
        body_ops(the_loop(&compiled)),
        vec![
            vec![Op::less_equal],
            vec![Op::multiply, Op::add, Op::tanh, Op::multiply],
            vec![Op::attention_admitted],
            vec![Op::attention_admitted],
            vec![Op::add],
        ]
    );
    // the host knows the mask at every step: nothing is read from MLX,
    // and the values are the unfused program's
    let (fused_x, fused_reads) = run_decoding(compiled, true, 20);
    let (plain_x, plain_reads) = run_decoding(plain, true, 20);
    assert_eq!((fused_reads, plain_reads), (0, 0));
    assert_close(&fused_x, &plain_x);
}

#[test]
fn a_mask_read_from_mlx_is_read_once_for_every_attention_that_takes_it() {
    // the positions unknown on the host: the mask is MLX's, read once a
    // step for the step's two attentions
    let (unknown_x, reads) = run_decoding(decoding_loop(), false, 20);
    assert_eq!(reads, STEPS as u64);
    let (known_x, _) = run_decoding(decoding_loop(), true, 20);
    assert_eq!(unknown_x, known_x);
}

#[test]
fn a_branch_s_predicate_stays_out_of_mlx_s_compile() {
    if !crate::cpu_kernels::in_programs() {
        return;
    }
    let plain = decoding_loop_with_a_branch();
    let mut compiled = decoding_loop_with_a_branch();
    assert!(compiled.fuse_with_mlx_compile(Device::Cpu));
    let body = &the_loop(&compiled).body.instructions;
    assert!(
        matches!(&body[..2], [Instruction::Op(m), Instruction::Op(p)]
        if m.op == Op::less_equal && p.op == Op::less)
    );
    assert!(matches!(&body[2], Instruction::Compiled(run) if run.ops.len() == 4));
    // the predicate and the mask are known on the host: no read
    let (fused_x, fused_reads) = run_decoding(compiled, true, 22);
    let (plain_x, plain_reads) = run_decoding(plain, true, 22);
    assert_eq!((fused_reads, plain_reads), (0, 0));
    assert_close(&fused_x, &plain_x);
}
