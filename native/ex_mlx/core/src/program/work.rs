//! How much MLX computes in a run of a program, for runs on the calling
//! thread (`ex_mlx_core::worker::run_on_caller`; the NIF decides how much
//! is small enough).
//!
//! A program qualifies when it is straight-line (no loop, branch or
//! compiled run) and each of its ops has a linear cost (crate::ops's `linear_cost`):
//! then a run's cost is bounded by the elements its instructions read and
//! write, and those follow from the inputs' shapes alone (MLX infers every
//! result's shape from its inputs' shapes and the op's parameters). The
//! first run on the worker counts them ([`Program::record_work`]); a later
//! call with inputs of the same shapes has the same count
//! ([`Program::work_for`]).

use super::run::Run;
use super::{Block, Instruction, Program};
use crate::ops::linear_cost;

/// Whether `block` is straight-line and every op of it has a linear cost.
pub(super) fn linear_straight_line(block: &Block) -> bool {
    block.instructions.iter().all(|ins| match ins {
        Instruction::Op(call) => linear_cost(call.op),
        Instruction::Fused(group) => group.ops.iter().all(|c| linear_cost(c.op)),
        Instruction::Loop(_) | Instruction::Branch(_) | Instruction::Compiled(_) => false,
    })
}

/// The work a run counted: its inputs' shapes, and the elements its
/// instructions read and write.
#[derive(Debug)]
pub(super) struct Measured {
    shapes: Vec<Vec<i32>>,
    elements: u64,
}

impl Program {
    /// Whether runs measure the program's work: it is straight-line ops of
    /// linear cost, not compiled by MLX (see the module documentation).
    pub fn measures_work(&self) -> bool {
        self.linear && self.fused.is_none()
    }

    /// After a run of a linear straight-line program (see the module
    /// documentation) that finished with `run`'s slots, records what it
    /// computed, once.
    pub(super) fn record_work(&self, run: &Run) {
        if !self.measures_work() || self.work.get().is_some() {
            return;
        }
        let shapes: Option<Vec<Vec<i32>>> = (0..self.inputs).map(|s| run.shape(s)).collect();
        let elements = self.main.instructions.iter().try_fold(0u64, |total, ins| {
            total.checked_add(instruction_elements(ins, run)?)
        });
        if let (Some(shapes), Some(elements)) = (shapes, elements) {
            let _ = self.work.set(Measured { shapes, elements });
        }
    }

    /// At most how many elements MLX reads and writes in a run of the
    /// program on inputs of `shapes`, its inputs and constants computed:
    /// `None` unless it is a linear straight-line program that already ran
    /// on inputs of those shapes (see the module documentation).
    pub fn work_for(&self, shapes: &[&[i64]]) -> Option<u64> {
        let measured = self.work.get()?;
        let same = measured.shapes.len() == shapes.len()
            && measured.shapes.iter().zip(shapes).all(|(m, s)| {
                m.len() == s.len() && m.iter().zip(s.iter()).all(|(&a, &b)| i64::from(a) == b)
            });
        same.then_some(measured.elements)
    }
}

/// The elements `ins` read and wrote in a run that left `run`'s slots (a
/// fused group's intermediate values, never stored, are each at most as
/// large as its result: element-wise broadcasting only grows shapes).
fn instruction_elements(ins: &Instruction, run: &Run) -> Option<u64> {
    let (reads, writes, times): (&[usize], std::ops::Range<usize>, u64) = match ins {
        Instruction::Op(call) => (&call.inputs, call.first()..call.first() + call.results, 1),
        Instruction::Fused(group) => {
            let out = group.kernel.output();
            (group.kernel.leaves(), out..out + 1, group.ops.len() as u64)
        }
        Instruction::Loop(_) | Instruction::Branch(_) | Instruction::Compiled(_) => return None,
    };
    let read = reads
        .iter()
        .try_fold(0u64, |n, &s| n.checked_add(run.elements(s)?))?;
    let written = writes
        .into_iter()
        .try_fold(0u64, |n, s| n.checked_add(run.elements(s)?))?;
    read.checked_add(written.checked_mul(times)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mlx_rs::Array;

    use super::super::{Instruction, OpCall, Program};
    use crate::device::Device;
    use crate::ops::params::Param;
    use crate::ops::table::Op;
    use crate::worker::run_blocking;

    fn op(op: Op, inputs: &[usize], params: Vec<Param>) -> Instruction {
        Instruction::Op(OpCall::new(op, inputs.to_vec(), params, None, 1))
    }

    /// `program` run once on the worker with an input of `n` int32 values.
    fn run_once(program: &Arc<Program>, n: i32) {
        let program = program.clone();
        run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&vec![1i32; n as usize], &[n]);
            let out = program.run(vec![x], vec![])?;
            mlx_rs::transforms::eval(&out)?;
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn a_run_of_linear_ops_measures_the_elements_they_read_and_write() {
        // sum(x + x): slots 0 (x), 1, 2
        let sum_all = vec![Param::OptInts(None), Param::Bool(false)];
        let program = Arc::new(
            Program::new(
                1,
                0,
                vec![op(Op::add, &[0, 0], vec![]), op(Op::sum, &[1], sum_all)],
                vec![2],
            )
            .unwrap(),
        );
        assert!(program.measures_work());
        assert_eq!(program.work_for(&[&[3]]), None);
        run_once(&program, 3);
        // add: reads 3 + 3, writes 3; sum: reads 3, writes 1
        assert_eq!(program.work_for(&[&[3]]), Some(13));
        assert_eq!(program.work_for(&[&[4]]), None);
        assert_eq!(program.work_for(&[&[3, 1]]), None);
        // the first run's count stays
        run_once(&program, 5);
        assert_eq!(program.work_for(&[&[3]]), Some(13));
    }

    #[test]
    fn a_program_with_a_product_measures_nothing() {
        // x·x: its cost grows faster than the elements it reads
        let program =
            Arc::new(Program::new(1, 0, vec![op(Op::matmul, &[0, 0], vec![])], vec![1]).unwrap());
        assert!(!program.measures_work());
        run_once(&program, 3);
        assert_eq!(program.work_for(&[&[3]]), None);
    }
}
