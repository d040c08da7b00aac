//! What the tests of a program's passes share: instructions written
//! briefly, a program's one loop and the ops of its body, and a run on the
//! CPU as a GPU run is (no float32 values computed on the host).

use mlx_rs::Array;

use super::run::Run;
use super::{Block, Instruction, Loop, OpCall, Program};
use crate::device::Device;
use crate::error::Result;
use crate::host_tensor::HostTensor;
use crate::ops::params::Param;
use crate::ops::table::Op;
use crate::worker::run_blocking;

/// An op of one result writing the next slot.
pub(super) fn op(op: Op, inputs: &[usize], params: Vec<Param>) -> Instruction {
    Instruction::Op(OpCall::new(op, inputs.to_vec(), params, None, 1))
}

/// The program of 2 inputs, i (slot 0) and a value, and `constants`
/// constants after them, the first of them a bound n (slot 2), that is one
/// loop over i and the value: while i < n, `body`, whose `next` slots are
/// the next i and value; `results` are the loop's. Its state is in the
/// two slots after the constants, its condition in the next.
pub(super) fn counting_loop(
    constants: usize,
    body: Vec<Instruction>,
    next: &[usize],
    results: &[usize],
) -> Program {
    let i = 2 + constants;
    Program::new(
        2,
        constants,
        vec![Instruction::Loop(Loop::new(
            vec![0, 1],
            Block {
                instructions: vec![op(Op::less, &[i, 2], vec![])],
                outputs: vec![i + 2],
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

/// The program's one instruction, a loop.
pub(super) fn the_loop(program: &Program) -> &Loop {
    match &program.main.instructions[..] {
        [Instruction::Loop(l)] => l,
        other => panic!("not one loop: {other:?}"),
    }
}

/// The ops of each instruction of `l`'s body: one for an op, those of a
/// compiled run.
pub(super) fn body_ops(l: &Loop) -> Vec<Vec<Op>> {
    l.body
        .instructions
        .iter()
        .map(|ins| match ins {
            Instruction::Op(call) => vec![call.op],
            Instruction::Compiled(run) => run.ops.iter().map(|c| c.op).collect(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// `program` run on the CPU's worker on `values` (its first slots: inputs,
/// then constants), integer ones known on the host where `known(slot)`;
/// then `then` on the run.
pub(super) fn run_on_cpu<T: Send + 'static>(
    program: Program,
    values: impl FnOnce() -> Vec<Array> + Send + 'static,
    known: impl Fn(usize) -> bool + Send + 'static,
    then: impl FnOnce(&mut Run) -> Result<T> + Send + 'static,
) -> T {
    run_blocking(Device::Cpu, move || {
        let mut run = Run::new(
            vec![None; program.slots],
            vec![None; program.slots],
            &|| false,
            false,
            false,
        );
        for (slot, a) in values().into_iter().enumerate() {
            if known(slot) {
                run.host[slot] = HostTensor::read_integers(&a);
            }
            run.slots[slot] = Some(a);
        }
        run.block(&program.main.instructions)?;
        then(&mut run)
    })
    .unwrap()
}
