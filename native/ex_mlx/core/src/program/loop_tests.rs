//! Tests of loops whose steps are pipelined (crate's `program::run`:
//! `Run::pipelined_steps`, on a GPU run), here forced on the CPU.

use mlx_rs::Array;

use super::{Block, Instruction, Loop, OpCall, Program};
use crate::device::Device;
use crate::ops::params::Param;
use crate::ops::table::Op;
use crate::worker::run_blocking;

fn op(op: Op, inputs: &[usize], params: Vec<Param>) -> Instruction {
    Instruction::Op(OpCall::new(op, inputs.to_vec(), params, None, 1))
}

/// While sum(x) < limit: x = x · 2, k = k + 1. Slots: 0 x (float32),
/// 1 k, constants 2 (2.0), 3 (1.0), 4 (the limit); the loop's state 5, 6;
/// its condition 7, 8; its body 9, 10; its results 11, 12, the program's
/// outputs.
fn doubling() -> Program {
    doubling_to(vec![11, 12], Vec::new())
}

/// [`doubling`] with the program's outputs `outputs`, and the
/// instructions `after` after its loop (from slot 13).
fn doubling_to(outputs: Vec<usize>, after: Vec<Instruction>) -> Program {
    let sum_all = vec![Param::OptInts(None), Param::Bool(false)];
    let condition = Block {
        instructions: vec![op(Op::sum, &[5], sum_all), op(Op::less, &[7, 4], vec![])],
        outputs: vec![8],
    };
    let body = Block {
        instructions: vec![
            op(Op::multiply, &[5, 2], vec![]),
            op(Op::add, &[6, 3], vec![]),
        ],
        outputs: vec![9, 10],
    };
    let mut instructions = vec![Instruction::Loop(Loop::new(vec![0, 1], condition, body))];
    instructions.extend(after);
    Program::new(2, 3, instructions, outputs).unwrap()
}

/// As many ones as x starts with: more than a CPU run reads into its
/// host values (crate::host_tensor), so that the condition is MLX's.
const X: usize = 4096;

/// The loop's outputs from x = [1; X], k = 0, pipelined or not, checking
/// `stop` before each step.
fn doubling_until(
    limit: f32,
    stop: &dyn Fn() -> bool,
    pipelined: bool,
) -> crate::error::Result<Vec<Array>> {
    doubling_in(doubling(), limit, stop, pipelined)
}

/// [`doubling_until`] for `program`, a [`doubling_to`].
fn doubling_in(
    program: Program,
    limit: f32,
    stop: &dyn Fn() -> bool,
    pipelined: bool,
) -> crate::error::Result<Vec<Array>> {
    program.run_with(
        vec![
            Array::from_slice(&[1.0f32; X], &[X as i32]),
            Array::from_f32(0.0),
        ],
        vec![
            Array::from_f32(2.0),
            Array::from_f32(1.0),
            Array::from_f32(limit),
        ],
        stop,
        pipelined,
    )
}

/// The loop's results, pipelined or not.
fn run(limit: f32, pipelined: bool) -> (Vec<f32>, f32) {
    run_blocking(Device::Cpu, move || {
        let out = doubling_until(limit, &|| false, pipelined)?;
        Ok((
            out[0].as_slice::<f32>().to_vec(),
            out[1].as_slice::<f32>()[0],
        ))
    })
    .unwrap()
}

#[test]
fn a_pipelined_loop_gives_the_results_of_one_built_step_by_step() {
    // m steps double sum(x) = X to X · 2^m: the loop stops at the first m
    // with X · 2^m >= limit; below, m = 0, 1, the pipeline's threshold
    // (super::run::PIPELINE_AFTER = 4) and its next step, and far past it
    let x = X as f32;
    for (limit, m) in [
        (x / 2.0, 0),
        (x * 1.5, 1),
        (x * 16.0, 4),
        (x * 20.0, 5),
        (x * 500.0, 9),
        (x * 2500.0, 12),
    ] {
        let want = (vec![2f32.powi(m); X], m as f32);
        assert_eq!(run(limit, true), want, "limit {limit}, pipelined");
        assert_eq!(run(limit, false), want, "limit {limit}");
    }
}

#[test]
fn a_pipelined_loop_whose_result_is_unread_gives_the_others() {
    // the program's one output is k: x, unread after the loop (the op that
    // reads it is read by nothing, and dropped), is not kept for the step
    // built ahead (super::run's `pipelined_steps`)
    let dead_read = || vec![op(Op::negate, &[11], vec![])];
    assert_eq!(
        doubling_to(vec![12], dead_read()).last_reads()[0].unread,
        vec![true, false]
    );
    assert_eq!(
        doubling_to(vec![12, 13], dead_read()).last_reads()[0].unread,
        vec![false, false]
    );
    let x = X as f32;
    for (limit, m) in [(x * 20.0, 5), (x * 500.0, 9)] {
        let counted = |pipelined: bool| {
            run_blocking(Device::Cpu, move || {
                let out = doubling_in(
                    doubling_to(vec![12], dead_read()),
                    limit,
                    &|| false,
                    pipelined,
                )?;
                Ok(out
                    .iter()
                    .map(|a| a.as_slice::<f32>()[0])
                    .collect::<Vec<_>>())
            })
            .unwrap()
        };
        assert_eq!(counted(true), vec![m as f32], "limit {limit}, pipelined");
        assert_eq!(counted(false), vec![m as f32], "limit {limit}");
    }
}

#[test]
fn a_pipelined_loop_stops_when_its_caller_is_gone() {
    let result = run_blocking(Device::Cpu, || {
        let steps = std::sync::atomic::AtomicUsize::new(0);
        // the stop check runs once before each step: gone after 8
        let stop = || steps.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 8;
        doubling_until(f32::INFINITY, &stop, true)
    });
    match result {
        Err(crate::error::Error::Cancelled(message)) => assert_eq!(
            message,
            "the program's caller is gone; its while loop was stopped"
        ),
        other => panic!("expected the loop to be cancelled, got {other:?}"),
    }
}

#[test]
fn a_small_integer_state_is_read_once_when_its_loop_starts() {
    // i = sum(ones(100)) (computed by MLX: 100 values are more than a run
    // reads into its host values), then while i < 110: i = i + 1. Slots:
    // 0 the ones (int32), constants 1 (1), 2 (110); 3 the sum; the loop's
    // state 4, its condition 5, its body 6, its result 7.
    if !crate::cpu_kernels::in_programs() {
        return;
    }
    let sum_all = vec![Param::OptInts(None), Param::Bool(false)];
    let program = Program::new(
        1,
        2,
        vec![
            op(Op::sum, &[0], sum_all),
            Instruction::Loop(Loop::new(
                vec![3],
                Block {
                    instructions: vec![op(Op::less, &[4, 2], vec![])],
                    outputs: vec![5],
                },
                Block {
                    instructions: vec![op(Op::add, &[4, 1], vec![])],
                    outputs: vec![6],
                },
            )),
        ],
        vec![7],
    )
    .unwrap();
    let (result, reads) = run_blocking(Device::Cpu, move || {
        let mut run = super::run::Run::new(
            vec![None; program.slots],
            vec![None; program.slots],
            &|| false,
            true,
            false,
        );
        run.slots[0] = Some(Array::from_slice(&[1i32; 100], &[100]));
        // (constants are known here, as `Program::run` reads them)
        for (slot, value) in [(1, 1), (2, 110)] {
            let a = Array::from_int(value);
            run.host[slot] = crate::host_tensor::HostTensor::read_integers(&a);
            run.slots[slot] = Some(a);
        }
        run.block(&program.main.instructions)?;
        let out = run.read(7)?;
        Ok((out.as_slice::<i32>()[0], run.reads))
    })
    .unwrap();
    assert_eq!(result, 110);
    // the condition is known here at every step: no read of the device
    assert_eq!(reads, 0);
}
