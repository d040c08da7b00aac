//! A pipelined loop (`program::run`'s `pipelined_steps`, as on a GPU) that
//! writes a large state at every step writes it in place: the memory the
//! run takes above its start stays within one state. Alone in its test
//! executable and without libtest's harness (Cargo.toml): MLX's memory
//! counters are global to the process, so nothing else may allocate while
//! it measures.

use ex_mlx_core::device::Device;
use ex_mlx_core::memory;
use ex_mlx_core::ops::params::Param;
use ex_mlx_core::ops::table::Op;
use ex_mlx_core::program::{Block, Instruction, Loop, OpCall, Program};
use ex_mlx_core::worker::run_blocking;
use mlx_rs::Array;

/// Elements of the state the loop writes: 16 MiB of float32.
const STATE: usize = 4 << 20;
/// Elements of the counter, more than a CPU run reads into its host values
/// (`host_tensor`), so that the loop's condition is MLX's and the loop is
/// pipelined.
const COUNTER: usize = 4096;
/// Steps the loop runs, well past the steps it runs before it pipelines.
const STEPS: usize = 40;

fn main() {
    let (values, extra) = run_blocking(Device::Cpu, run).expect("the program runs");
    // every element of the state was 1 and gained 1 at each step
    assert!(
        values.iter().all(|&v| v == 1.0 + STEPS as f32),
        "the state's values: {:?}",
        &values[..4]
    );
    // the state once (its buffer taken over by every step's write) and a
    // step's small arrays, under 1 MiB with an allocator's rounding; a
    // step queued while the step before it runs copies the state (2 to 3
    // states)
    let state = STATE * 4;
    assert!(
        extra <= state + (1 << 20),
        "the run took {extra} bytes above its start, the state is {state}"
    );
    println!("pipelined_writes: ok ({extra} bytes above the start, the state {state})");
}

fn op(op: Op, inputs: &[usize], params: Vec<Param>) -> Instruction {
    Instruction::Op(OpCall::new(op, inputs.to_vec(), params, None, 1))
}

/// While sum(k) < COUNTER · STEPS: x = x + 1, k = k + 1. Slots: 0 x, 1 k,
/// constants 2 (1.0), 3 (the limit); the loop's state 4, 5; its condition
/// 6, 7; its body 8, 9; its results 10, 11, the program's outputs.
fn program() -> Program {
    let sum_all = vec![Param::OptInts(None), Param::Bool(false)];
    let condition = Block {
        instructions: vec![op(Op::sum, &[5], sum_all), op(Op::less, &[6, 3], vec![])],
        outputs: vec![7],
    };
    let body = Block {
        instructions: vec![op(Op::add, &[4, 2], vec![]), op(Op::add, &[5, 2], vec![])],
        outputs: vec![8, 9],
    };
    let instructions = vec![Instruction::Loop(Loop::new(vec![0, 1], condition, body))];
    Program::new(2, 2, instructions, vec![10, 11]).expect("a valid program")
}

/// The state's values after the loop, and the peak memory above the
/// start while the program ran.
fn run() -> ex_mlx_core::error::Result<(Vec<f32>, usize)> {
    let program = program();
    let fresh = || -> ex_mlx_core::error::Result<Array> {
        let x = Array::from_slice(&vec![1.0f32; STATE], &[STATE as i32]);
        x.eval()?;
        Ok(x)
    };
    let run = |x: Array| {
        program.run_pipelined(
            vec![x, Array::from_slice(&[0.0f32; COUNTER], &[COUNTER as i32])],
            vec![
                Array::from_f32(1.0),
                Array::from_f32((COUNTER * STEPS) as f32),
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
