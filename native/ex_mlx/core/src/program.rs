//! Programs: a list of op-table instructions over numbered slots, run by a
//! device's worker in one go (for `ExMLX.Compiler`, which records them from
//! a `defn` graph).
//!
//! Slots `0..inputs` hold the call's inputs, the next `constants.len()` the
//! program's constant arrays, and each instruction writes its results to the
//! slots after those, in order. The program's outputs name slots.

use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};
use crate::ops::params::Param;
use crate::ops::table::Op;

/// One op: its input slots, parameters, the type each result is cast to (if
/// any) and how many results it has.
#[derive(Clone, Debug)]
pub struct Instruction {
    pub op: Op,
    pub inputs: Vec<usize>,
    pub params: Vec<Param>,
    pub cast: Option<Dtype>,
    pub results: usize,
}

/// A checked program (see the module documentation).
#[derive(Debug)]
pub struct Program {
    inputs: usize,
    constants: usize,
    instructions: Vec<Instruction>,
    outputs: Vec<usize>,
}

impl Program {
    /// Checks that every instruction reads slots written before it, with as
    /// many inputs and parameters (of the right kinds) as its op takes, and
    /// that the outputs name written slots.
    pub fn new(
        inputs: usize,
        constants: usize,
        instructions: Vec<Instruction>,
        outputs: Vec<usize>,
    ) -> Result<Program> {
        let mut written = inputs + constants;
        for (i, ins) in instructions.iter().enumerate() {
            let bad = |message: String| {
                Error::arg(
                    "program",
                    format!("instruction {i} ({}): {message}", ins.op.name()),
                )
            };
            if let Some(&slot) = ins.inputs.iter().find(|&&s| s >= written) {
                return Err(bad(format!(
                    "reads slot {slot}, which is not written before it"
                )));
            }
            if !ins.op.takes_inputs(ins.inputs.len()) {
                return Err(bad(format!("{} inputs", ins.inputs.len())));
            }
            if !ins.op.takes_params(&ins.params) {
                return Err(bad("parameters of the wrong number or kinds".into()));
            }
            if ins.results != ins.op.results().len() {
                return Err(bad(format!(
                    "{} results declared, the op has {}",
                    ins.results,
                    ins.op.results().len()
                )));
            }
            written += ins.results;
        }
        if let Some(&slot) = outputs.iter().find(|&&s| s >= written) {
            return Err(Error::arg(
                "program",
                format!("output slot {slot} is never written"),
            ));
        }
        Ok(Program {
            inputs,
            constants,
            instructions,
            outputs,
        })
    }

    /// How many inputs a call takes.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// How many outputs a call gives.
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }

    /// Runs the program on `inputs` and `constants` (on the worker of the
    /// device they are on): the output arrays, lazy.
    pub fn run(&self, inputs: Vec<Array>, constants: Vec<Array>) -> Result<Vec<Array>> {
        if inputs.len() != self.inputs || constants.len() != self.constants {
            return Err(Error::arg(
                "inputs",
                format!(
                    "the program takes {} inputs, got {}",
                    self.inputs,
                    inputs.len()
                ),
            ));
        }
        let mut slots: Vec<Array> = inputs;
        slots.extend(constants);
        for ins in &self.instructions {
            let args: Vec<Array> = ins.inputs.iter().map(|&s| slots[s].clone()).collect();
            for out in ins.op.apply(&args, ins.params.clone())?.into_vec() {
                slots.push(match ins.cast {
                    Some(dtype) if out.dtype() != dtype => out.as_dtype(dtype)?,
                    _ => out,
                });
            }
        }
        Ok(self.outputs.iter().map(|&s| slots[s].clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    fn ins(op: Op, inputs: &[usize], params: Vec<Param>, cast: Option<Dtype>) -> Instruction {
        Instruction {
            op,
            inputs: inputs.to_vec(),
            params,
            cast,
            results: op.results().len(),
        }
    }

    #[test]
    fn runs_instructions_over_slots() {
        // out = sum((x + c) * x) as f32, and x + c: slots 0 (x), 1 (c), 2, 3, 4
        let program = Program::new(
            1,
            1,
            vec![
                ins(Op::add, &[0, 1], vec![], None),
                ins(Op::multiply, &[2, 0], vec![], None),
                ins(
                    Op::sum,
                    &[3],
                    vec![Param::OptInts(None), Param::Bool(false)],
                    Some(Dtype::Float32),
                ),
            ],
            vec![4, 2],
        )
        .unwrap();
        let (sum, plus) = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&[1i32, 2, 3], &[3]);
            let c = Array::from_int(10);
            let out = program.run(vec![x], vec![c])?;
            Ok((
                out[0].as_slice::<f32>().to_vec(),
                out[1].as_slice::<i32>().to_vec(),
            ))
        })
        .unwrap();
        // (1+10)*1 + (2+10)*2 + (3+10)*3 = 11 + 24 + 39
        assert_eq!(sum, vec![74.0]);
        assert_eq!(plus, vec![11, 12, 13]);
    }

    #[test]
    fn malformed_programs_are_refused_with_the_reason() {
        let e = Program::new(1, 0, vec![ins(Op::add, &[0, 1], vec![], None)], vec![1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "program: instruction 0 (add): reads slot 1, which is not written before it"
        );
        let e = Program::new(1, 0, vec![ins(Op::add, &[0], vec![], None)], vec![1]).unwrap_err();
        assert_eq!(e.to_string(), "program: instruction 0 (add): 1 inputs");
        let e = Program::new(1, 0, vec![ins(Op::sum, &[0], vec![], None)], vec![1]).unwrap_err();
        assert!(e.to_string().contains("parameters"), "{e}");
        let e = Program::new(1, 0, vec![], vec![3]).unwrap_err();
        assert_eq!(e.to_string(), "program: output slot 3 is never written");
    }
}
