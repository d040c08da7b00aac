//! The memory a loop on its pipelined path (`program::run`'s
//! `pipelined_steps`, as on a GPU) holds while it writes its state at
//! every step, large or not. A step is queued while the step before it
//! runs, whose kernels still read the state: MLX then writes the next
//! state into a buffer of its own, two states above the one the loop
//! started with at most (the running step's and the queued step's),
//! however many steps the loop runs (docs/decisions/0026-pipelined-steps-queued-ahead.md).
//! A body with a branch that reads the write while the step is built
//! leaves the pipelined path after its first step (the step reads the
//! device while it is built) and writes the state in place. Alone in its
//! test executable and without libtest's harness (Cargo.toml): MLX's
//! memory counters are global to the process, so nothing else may
//! allocate while it measures.

use ex_mlx_core::device::Device;
use ex_mlx_core::memory;
use ex_mlx_core::ops::params::Param;
use ex_mlx_core::ops::table::Op;
use ex_mlx_core::program::{Block, Branch, Instruction, Loop, OpCall, Program};
use ex_mlx_core::worker::run_blocking;
use mlx_rs::Array;

/// Elements of the states the loops write: 16 MiB of float32, and 512 KiB
/// (under the 1 MiB from which a loop's state counts as large and is
/// evaluated at every step: `program::run`'s `EVAL_STATE_BYTES`).
const STATES: [usize; 2] = [4 << 20, 128 << 10];
/// Elements of the counter, more than a CPU run reads into its host values
/// (`host_tensor`), so that the loop's condition is MLX's and the loop is
/// pipelined.
const COUNTER: usize = 4096;
/// Steps the loop runs, well past the steps it runs before it pipelines.
const STEPS: usize = 40;

fn main() {
    for state in STATES {
        let bytes = state * 4;
        // a step's small arrays (the counter's, 16 KiB each) with an
        // allocator's rounding: under a quarter of the small state
        let small = (bytes / 4).min(1 << 20);
        // the plain loop: the states written by the running step and by
        // the step queued after it, while the state before is still read
        // (a copy kept by each step would be STEPS states); the loop with
        // a branch: the state's buffer, made before the start, taken over
        // by every step's write
        for (name, program, bound) in [
            ("plain", plain(), 2 * bytes + small),
            ("with a branch", with_branch(), small),
        ] {
            let (values, extra) = run_blocking(Device::Cpu, move || run(&program, state))
                .unwrap_or_else(|e| panic!("{name}: the program runs: {e}"));
            // every element of the state was 1 and gained 1 at each step
            assert!(
                values.iter().all(|&v| v == 1.0 + STEPS as f32),
                "{name}: the state's values: {:?}",
                &values[..4]
            );
            assert!(
                extra <= bound,
                "{name}: the run took {extra} bytes above its start, the state is {bytes}"
            );
            println!(
                "pipelined_writes, {name}: ok ({extra} bytes above the start, the state {bytes})"
            );
        }
    }
}

fn op(op: Op, inputs: &[usize], params: Vec<Param>) -> Instruction {
    Instruction::Op(OpCall::new(op, inputs.to_vec(), params, None, 1))
}

/// `sum`'s parameters for a sum of every element.
fn sum_all() -> Vec<Param> {
    vec![Param::OptInts(None), Param::Bool(false)]
}

/// While sum(k) < COUNTER · STEPS: x = x + 1, k = k + 1. Slots: 0 x, 1 k,
/// constants 2 (1.0), 3 (the limit), 4 (0.0); the loop's state 5, 6; its
/// condition 7, 8; its body from 9; its results the program's outputs.
fn looping(body: Block, results: usize) -> Program {
    let condition = Block {
        instructions: vec![op(Op::sum, &[6], sum_all()), op(Op::less, &[7, 3], vec![])],
        outputs: vec![8],
    };
    let instructions = vec![Instruction::Loop(Loop::new(vec![0, 1], condition, body))];
    Program::new(2, 3, instructions, vec![results, results + 1]).expect("a valid program")
}

/// The loop's body: x + 1 (slot 9), k + 1 (10).
fn plain() -> Program {
    let body = Block {
        instructions: vec![op(Op::add, &[5, 2], vec![]), op(Op::add, &[6, 2], vec![])],
        outputs: vec![9, 10],
    };
    looping(body, 11)
}

/// The loop's body: x + 1 (slot 9), k + 1 (10), then a branch on the sum
/// of x + 1 (11, 12: read from MLX while the step is built) giving k + 1
/// plus 0 (13) or k + 1: its result 14.
fn with_branch() -> Program {
    let branch = Branch::new(
        vec![(
            Block {
                instructions: vec![
                    op(Op::sum, &[9], sum_all()),
                    op(Op::greater, &[11, 4], vec![]),
                ],
                outputs: vec![12],
            },
            Block {
                instructions: vec![op(Op::add, &[10, 4], vec![])],
                outputs: vec![13],
            },
        )],
        Block {
            instructions: vec![],
            outputs: vec![10],
        },
    );
    let body = Block {
        instructions: vec![
            op(Op::add, &[5, 2], vec![]),
            op(Op::add, &[6, 2], vec![]),
            Instruction::Branch(branch),
        ],
        outputs: vec![9, 14],
    };
    looping(body, 15)
}

/// The state's values after the loop, and the peak memory above the
/// start while the program ran.
fn run(program: &Program, state: usize) -> ex_mlx_core::error::Result<(Vec<f32>, usize)> {
    let fresh = || -> ex_mlx_core::error::Result<Array> {
        let x = Array::from_slice(&vec![1.0f32; state], &[state as i32]);
        x.eval()?;
        Ok(x)
    };
    let run = |x: Array| {
        program.run_pipelined(
            vec![x, Array::from_slice(&[0.0f32; COUNTER], &[COUNTER as i32])],
            vec![
                Array::from_f32(1.0),
                Array::from_f32((COUNTER * STEPS) as f32),
                Array::from_f32(0.0),
            ],
        )
    };
    // (a first run: what MLX makes once is not counted)
    let first = run(fresh()?)?;
    first[0].eval()?;
    drop(first);
    let x = fresh()?;
    memory::clear_cache()?;
    let start = memory::stats()?.active;
    memory::reset_peak()?;
    let out = run(x)?;
    out[0].eval()?;
    let extra = memory::stats()?.peak.saturating_sub(start);
    Ok((out[0].as_slice::<f32>().to_vec(), extra))
}
