//! Small straight-line CPU programs run on the calling thread.
//!
//! On the worker, a compiled call of a batch-1 MLP is a hand-off to the
//! worker's thread, an MLX array for every op's result (made from the
//! values the host computed: the product of one row, the bias and ReLU
//! pass), and a wait for the reply. When every instruction of a program is
//! one the host computes from computed float32 values (an exactly rounded
//! element-wise op, a group of them made by `Program::group_ready_ops`, a
//! row times a matrix) and the call's inputs are computed, the program runs
//! where it is called instead: the values between its instructions are
//! plain vectors, and only its outputs become arrays. The passes and the
//! product's blocks are those the worker runs (crate::elementwise_fusion's
//! `op_over` and `Kernel::run_over`, crate::ops::gemv's
//! `row_times_matrix`), so the bits are the same.
//!
//! A run on the caller reads and writes at most [`MAX_VALUES`] values, so that the
//! calling thread (a BEAM scheduler) is not held long; a program that needs
//! more, or whose operands turn out unfit (not float32, a view that is not
//! row-major, a product MLX's matmul computes), gives up before computing
//! the instruction that would not fit, and from then on runs on its worker.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mlx_rs::{Array, Dtype};

use super::{Block, Instruction, OpCall, Program};
use crate::device::Device;
use crate::elementwise_fusion::{f32_values, host_array, op_over, Operand};
use crate::error::Result;
use crate::host::HostBuffer;
use crate::ops::computed::elementwise_kind;
use crate::ops::gemv;
use crate::ops::params::Param;
use crate::ops::table::Op;
use crate::split_work::{self, Kept};

/// The most values a run on the caller reads from matrices and writes (4 MiB of
/// float32: a few tens of µs from the cache, well under a scheduler's
/// millisecond from memory).
pub const MAX_VALUES: usize = 1 << 20;

/// What an instruction counts against [`MAX_VALUES`] at least (its fixed
/// cost, about a µs): a program of many tiny instructions stays bounded too.
const INSTRUCTION_VALUES: usize = 1024;

/// Whether every instruction of `block` is one a run on the caller computes: no
/// loops or branches, element-wise ops the host computes exactly as MLX
/// does, their ready groups, and products (checked once, when the program
/// is prepared; a run can still find its operands unfit).
pub(super) fn straight_line_on_host(block: &Block) -> bool {
    block.instructions.iter().all(|ins| match ins {
        Instruction::Op(call) => computed_on_caller(call),
        Instruction::Fused(group) => group.when_ready,
        Instruction::Loop(_) | Instruction::Branch(_) | Instruction::Compiled(_) => false,
    })
}

fn computed_on_caller(call: &OpCall) -> bool {
    let elementwise = elementwise_kind(call.op).is_some();
    call.results == 1
        && matches!(call.cast, None | Some(Dtype::Float32))
        && ((elementwise && call.params.is_empty())
            || call.op == Op::matmul
            || call.op == Op::tensordot)
}

/// Values computed here and their shape.
type Computed = (Vec<f32>, Vec<i32>);

/// [`Computed`] values a product's helper may keep (see `Values::results`).
type Shared = (Arc<Vec<f32>>, Vec<i32>);

/// A run's values: the call's inputs and constants (computed arrays, read
/// in place), then the results of its instructions.
struct Values<'a> {
    arrays: Vec<&'a Array>,
    /// The float32 arrays' buffers, read in place (`None`: another type,
    /// or not row-major).
    buffers: Vec<Option<HostBuffer>>,
    /// (shared, so that a product's helper can keep a row it reads:
    /// crate::split_work's `Kept`)
    results: Vec<Option<Shared>>,
}

impl Values<'_> {
    fn operand(&self, slot: usize) -> Result<Option<Operand<'_>>> {
        if let Some(array) = self.arrays.get(slot) {
            return match &self.buffers[slot] {
                Some(buffer) => Ok(Some(Operand {
                    values: f32_values(buffer.bytes())?,
                    shape: array.shape(),
                })),
                None => Ok(None),
            };
        }
        Ok(self
            .results
            .get(slot)
            .and_then(Option::as_ref)
            .map(|(values, shape)| Operand {
                values: values.as_slice(),
                shape,
            }))
    }

    fn operands(&self, slots: &[usize]) -> Result<Option<Vec<Operand<'_>>>> {
        let mut operands = Vec::with_capacity(slots.len());
        for &slot in slots {
            match self.operand(slot)? {
                Some(o) => operands.push(o),
                None => return Ok(None),
            }
        }
        Ok(Some(operands))
    }

    /// One instruction's result, or `None` where it is not computed here
    /// or would pass what is left of the run's `budget`.
    fn instruction(
        &self,
        ins: &Instruction,
        budget: &mut usize,
    ) -> Result<Option<(usize, Computed)>> {
        let (slot, result) = match ins {
            Instruction::Op(call) if call.op == Op::matmul || call.op == Op::tensordot => {
                (call.first, self.product(call, budget)?)
            }
            Instruction::Op(call) => {
                let kind = elementwise_kind(call.op);
                let result = match (kind, self.operands(&call.inputs)?) {
                    (Some(kind), Some(operands)) => op_over(kind, &operands),
                    _ => None,
                };
                (call.first, result)
            }
            Instruction::Fused(group) if group.when_ready => {
                let result = match self.operands(group.kernel.leaves())? {
                    Some(leaves) => group.kernel.run_over(&leaves),
                    None => None,
                };
                (group.kernel.output(), result)
            }
            _ => return Ok(None),
        };
        let Some(result) = result else {
            return Ok(None);
        };
        let cost = result.0.len().max(INSTRUCTION_VALUES);
        if cost > *budget {
            return Ok(None);
        }
        *budget -= cost;
        Ok(Some((slot, result)))
    }

    /// A row (any value) times a matrix (an input or constant array) of a
    /// `matmul` or a one-axis `tensordot` that contracts the row's last
    /// axis: crate::ops::gemv's `row_times_matrix`.
    fn product(&self, call: &OpCall, budget: &mut usize) -> Result<Option<Computed>> {
        let &[a, b] = call.inputs.as_slice() else {
            return Ok(None);
        };
        let Some(x) = self.operand(a)? else {
            return Ok(None);
        };
        let Some(&matrix) = self.arrays.get(b) else {
            return Ok(None);
        };
        let transposed = match (call.op, call.params.as_slice()) {
            (Op::matmul, []) => false,
            (Op::tensordot, [Param::Ints(i), Param::Ints(j)]) => {
                let last = x.shape.len() as i64 - 1;
                match (i.as_slice(), j.as_slice()) {
                    (&[i], &[j]) if i == last && matrix.ndim() == 2 && (j == 0 || j == 1) => j == 1,
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        // (checked before the pass over the matrix, which is most of the cost)
        if matrix.size() > *budget {
            return Ok(None);
        }
        *budget -= matrix.size();
        let keep_x = || -> Kept {
            match (self.arrays.get(a), self.results.get(a)) {
                (Some(&array), _) => Box::new(array.clone()),
                (None, Some(Some((values, _)))) => Box::new(values.clone()),
                _ => Box::new(()),
            }
        };
        gemv::row_times_matrix(x, matrix, transposed, keep_x)
    }
}

impl Program {
    /// Whether calls may try [`Program::run_on_caller`]: set by
    /// [`Program::prepare`] for a CPU program whose every instruction is
    /// one computed on_caller, cleared when a run gives up.
    pub fn runs_on_caller(&self) -> bool {
        self.on_caller.load(Ordering::Relaxed)
    }

    /// Calls run on the worker from now on (the caller found the results
    /// of a run on the caller unfit).
    pub fn stop_running_on_caller(&self) {
        self.on_caller.store(false, Ordering::Relaxed);
    }

    /// Runs the program on the calling thread (see the module
    /// documentation): its outputs, computed arrays, when
    /// [`Program::runs_on_caller`] and every instruction is computed here from
    /// `inputs` and `constants`, which the caller knows are computed CPU
    /// arrays (they are read in place, never evaluated). `None` where a run
    /// gives up (nothing is left behind; later calls then run on the
    /// worker). `device`'s worker helps with large products
    /// (crate::split_work's `worker_helps`).
    pub fn run_on_caller(
        &self,
        device: Device,
        inputs: &[Array],
        constants: &[Array],
    ) -> Result<Option<Vec<Array>>> {
        if !self.runs_on_caller()
            || inputs.len() != self.inputs
            || constants.len() != self.constants
        {
            return Ok(None);
        }
        let arrays: Vec<&Array> = inputs.iter().chain(constants).collect();
        let buffers = arrays
            .iter()
            .map(|a| {
                if a.dtype() == Dtype::Float32 {
                    HostBuffer::in_place(a)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let mut values = Values {
            arrays,
            buffers,
            results: vec![None; self.slots],
        };
        // a product in blocks (crate::ops::gemv) shares them with the
        // worker, as the caller's thread shares the worker's
        let _help = values
            .arrays
            .iter()
            .any(|a| a.size() >= gemv::SPLIT_MIN_ELEMENTS)
            .then(|| split_work::worker_helps(device))
            .flatten();
        let mut budget = MAX_VALUES;
        for ins in &self.main.instructions {
            match values.instruction(ins, &mut budget)? {
                Some((slot, (v, shape))) => values.results[slot] = Some((Arc::new(v), shape)),
                None => {
                    self.stop_running_on_caller();
                    return Ok(None);
                }
            }
        }
        let mut outputs = Vec::with_capacity(self.main.outputs.len());
        for &slot in &self.main.outputs {
            if let Some(&array) = values.arrays.get(slot) {
                outputs.push(array.clone());
                continue;
            }
            match &values.results[slot] {
                Some((v, shape)) => outputs.push(host_array(v, shape)?),
                None => {
                    self.stop_running_on_caller();
                    return Ok(None);
                }
            }
        }
        Ok(Some(outputs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_arrays::{bits, computed};
    use crate::worker::run_blocking;

    fn op(op: Op, inputs: &[usize], params: Vec<Param>) -> Instruction {
        Instruction::Op(OpCall::new(op, inputs.to_vec(), params, None, 1))
    }

    fn contract(a: i64, b: i64) -> Vec<Param> {
        vec![Param::Ints(vec![a]), Param::Ints(vec![b])]
    }

    /// `n` values in [-0.5, 0.5), some negative, none repeating soon.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 2003.0 - 0.5)
            .collect()
    }

    /// The inputs of [`mlp`], as (values, shape): x [1, 600]; w1 [600, 512]
    /// (large enough for blocks that a helper may share); b1 [512]; w2
    /// stored [64, 512] and read transposed; b2 [64]; w3 [64, 80]; b3 [80].
    fn mlp_inputs() -> Vec<(Vec<f32>, Vec<i32>)> {
        [
            vec![1, 600],
            vec![600, 512],
            vec![512],
            vec![64, 512],
            vec![64],
            vec![64, 80],
            vec![80],
        ]
        .into_iter()
        .enumerate()
        .map(|(k, shape)| {
            let n = shape.iter().product::<i32>() as usize;
            (values(n, k + 1), shape)
        })
        .collect()
    }

    /// relu(relu(x · w1 + b1) · w2ᵀ + b2) then `matmul` by w3, + b3; slot 7
    /// is the constant 0, prepared for the CPU (its bias and ReLU grouped).
    fn mlp() -> Program {
        let mut p = Program::new(
            7,
            1,
            vec![
                op(Op::tensordot, &[0, 1], contract(1, 0)),
                op(Op::add, &[8, 2], vec![]),
                op(Op::max, &[9, 7], vec![]),
                op(Op::tensordot, &[10, 3], contract(1, 1)),
                op(Op::add, &[11, 4], vec![]),
                op(Op::max, &[12, 7], vec![]),
                op(Op::matmul, &[13, 5], vec![]),
                op(Op::add, &[14, 6], vec![]),
            ],
            vec![15, 10],
        )
        .unwrap();
        p.prepare(Device::Cpu, false);
        p
    }

    /// The same MLP in float64 on the host, straight from its definition.
    fn mlp_reference(inputs: &[(Vec<f32>, Vec<i32>)]) -> Vec<f64> {
        let v = |k: usize| inputs[k].0.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let (x, w1, b1, w2, b2, w3, b3) = (v(0), v(1), v(2), v(3), v(4), v(5), v(6));
        let h1: Vec<f64> = (0..512)
            .map(|j| ((0..600).map(|i| x[i] * w1[i * 512 + j]).sum::<f64>() + b1[j]).max(0.0))
            .collect();
        let h2: Vec<f64> = (0..64)
            .map(|j| ((0..512).map(|i| h1[i] * w2[j * 512 + i]).sum::<f64>() + b2[j]).max(0.0))
            .collect();
        (0..80)
            .map(|j| (0..64).map(|i| h2[i] * w3[i * 80 + j]).sum::<f64>() + b3[j])
            .collect()
    }

    /// `program` run on the CPU's worker with `inputs` and scalar
    /// `constants`: each output's bits and shape.
    fn on_the_worker(
        program: &Arc<Program>,
        inputs: &[(Vec<f32>, Vec<i32>)],
        constants: Vec<f32>,
    ) -> Vec<(Vec<u32>, Vec<i32>)> {
        let (program, inputs) = (program.clone(), inputs.to_vec());
        run_blocking(Device::Cpu, move || {
            let arrays = inputs.iter().map(|(v, s)| computed(v, s)).collect();
            let constants = constants.iter().map(|&c| computed(&[c], &[])).collect();
            let out = program.run(arrays, constants)?;
            Ok(out
                .iter()
                .map(|a| (bits(a), a.shape().to_vec()))
                .collect::<Vec<_>>())
        })
        .unwrap()
    }

    #[test]
    fn a_batch_1_mlp_runs_on_the_caller_with_the_bits_it_has_on_the_worker() {
        let _one = split_work::one_test_at_a_time();
        let program = Arc::new(mlp());
        assert!(program.runs_on_caller());
        let inputs = mlp_inputs();
        let on_worker = on_the_worker(&program, &inputs, vec![0.0]);
        let arrays: Vec<Array> = inputs.iter().map(|(v, s)| computed(v, s)).collect();
        let on_caller = program
            .run_on_caller(Device::Cpu, &arrays, &[computed(&[0.0], &[])])
            .unwrap()
            .expect("runs on the caller");
        assert!(program.runs_on_caller());
        let on_caller: Vec<(Vec<u32>, Vec<i32>)> = on_caller
            .iter()
            .map(|a| {
                assert!(crate::ahead::is_available(a), "an output is not computed");
                (bits(a), a.shape().to_vec())
            })
            .collect();
        assert_eq!(on_caller, on_worker);
        assert_eq!(on_caller[0].1, vec![1, 80]);
        // the second output is the first layer's activation: 512 values
        assert_eq!(on_caller[1].1, vec![1, 512]);
        let reference = mlp_reference(&inputs);
        for (got, want) in on_caller[0].0.iter().zip(&reference) {
            let got = f32::from_bits(*got) as f64;
            assert!(
                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "{got} against {want}"
            );
        }
    }

    #[test]
    fn programs_the_host_does_not_compute_run_on_the_worker() {
        let prepared = |instructions: Vec<Instruction>, fuse: bool| {
            let mut p = Program::new(2, 0, instructions, vec![2]).unwrap();
            p.prepare(Device::Cpu, fuse);
            p
        };
        // transcendental ops are MLX's kernels' alone (docs/numerics.md);
        // `fuse: true` groups are not ready groups
        for f in [Op::erf, Op::exp, Op::tanh, Op::sigmoid] {
            assert!(
                !prepared(vec![op(f, &[0], vec![])], false).runs_on_caller(),
                "{f:?}"
            );
        }
        assert!(prepared(vec![op(Op::add, &[0, 1], vec![])], false).runs_on_caller());
        assert!(!prepared(
            vec![
                op(Op::add, &[0, 1], vec![]),
                op(Op::multiply, &[2, 1], vec![])
            ],
            true
        )
        .runs_on_caller());
        let gives_up = |p: &Program, inputs: &[Array]| {
            assert!(p.runs_on_caller());
            assert!(p.run_on_caller(Device::Cpu, inputs, &[]).unwrap().is_none());
            assert!(
                !p.runs_on_caller(),
                "a program that gave up runs on the worker"
            );
        };
        let x = computed(&values(64, 1), &[1, 64]);
        let w = computed(&values(64 * 64, 2), &[64, 64]);
        // an integer input
        let ints = Array::from_slice(&[1i32, 2], &[2]);
        ints.eval().unwrap();
        let add = || prepared(vec![op(Op::add, &[0, 1], vec![])], false);
        gives_up(&add(), &[ints.clone(), ints]);
        // a matrix computed by the program itself
        let square_then_product = Program::new(
            2,
            0,
            vec![
                op(Op::add, &[1, 1], vec![]),
                op(Op::tensordot, &[0, 2], contract(1, 0)),
            ],
            vec![3],
        );
        let mut p = square_then_product.unwrap();
        p.prepare(Device::Cpu, false);
        gives_up(&p, &[x.clone(), w]);
        // a product of more than MAX_VALUES matrix values
        let rows = MAX_VALUES / 64 + 1;
        let big = computed(&values(rows * 64, 3), &[rows as i32, 64]);
        let row = computed(&values(rows, 4), &[1, rows as i32]);
        let product = || prepared(vec![op(Op::tensordot, &[0, 1], contract(1, 0))], false);
        gives_up(&product(), &[row, big]);
        // a small matrix, which MLX's matmul computes
        let small = computed(&values(64 * 8, 5), &[64, 8]);
        gives_up(&product(), &[x, small]);
    }
}
