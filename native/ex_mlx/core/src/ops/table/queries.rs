//! What the op table's ops say of themselves beyond their entries: their
//! inputs and parameters checked, found by name, flags, which inputs an op
//! reads the values of, and how an op runs (crate::ops::table).

use mlx_rs::Array;

use super::{Inputs, Op, Outputs};
use crate::error::Result;
use crate::ops::params::Param;

impl Op {
    /// Whether the op reads values of its inputs while it is built (an
    /// evaluation, unless a program knows them): `attention_admitted`,
    /// whose mask decides which keys MLX is given. Such an op never runs
    /// inside an MLX-compiled function (crate::fusion), which traces its
    /// inputs without values.
    pub fn reads_values(self) -> bool {
        !self.value_inputs().is_empty()
    }

    /// The positions of the inputs whose values the op reads while it is
    /// built ([`Op::reads_values`]): `attention_admitted`'s mask.
    pub fn value_inputs(self) -> &'static [usize] {
        match self {
            Op::attention_admitted => &[3],
            _ => &[],
        }
    }

    /// The positions of the inputs whose values, when they are known
    /// without an evaluation, make the op's MLX call one of constant bounds:
    /// the starts of `dynamic_slice` and `put_slice`, which are otherwise
    /// clamped and read by kernels of MLX's (crate::ops::shape). Unlike
    /// [`Op::value_inputs`] they are never read from MLX for it. An op with
    /// such inputs runs outside MLX-compiled functions in a program with
    /// loops, whose tracing would make its bounds the first call's
    /// (crate::program's `compile_runs`).
    pub fn bound_inputs(self) -> &'static [usize] {
        match self {
            Op::dynamic_slice | Op::put_slice => &[1],
            _ => &[],
        }
    }

    /// The positions of the inputs the op reads only as booleans (zero or
    /// not): `select`'s condition, the logical ops' operands, what `all`
    /// and `any` reduce. Such an input gives the same result as MLX's
    /// boolean or as Nx's u8 of it.
    pub fn boolean_inputs(self) -> &'static [usize] {
        match self {
            Op::select | Op::logical_not | Op::all | Op::any => &[0],
            Op::logical_and | Op::logical_or | Op::logical_xor => &[0, 1],
            _ => &[],
        }
    }

    /// Whether the op takes `count` tensor inputs.
    pub fn takes_inputs(self, count: usize) -> bool {
        match self.inputs() {
            Inputs::Fixed(names) => names.len() == count,
            Inputs::List(_) => count > 0,
        }
    }

    /// Whether `params` are as many as the op's parameters, each of its kind.
    pub fn takes_params(self, params: &[Param]) -> bool {
        let specs = self.params();
        specs.len() == params.len() && specs.iter().zip(params).all(|(s, p)| s.kind == p.kind())
    }

    /// The op of this name.
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| op.name() == name)
    }

    pub fn has_flag(self, flag: &str) -> bool {
        self.flags().contains(&flag)
    }

    /// Runs the op: `inputs` as [`Op::inputs`] says, `params` of the kinds
    /// [`Op::params`] says (decoded by the caller). An op MLX runs on the
    /// CPU only (`[cpu]`) runs on a CPU stream of this thread when the
    /// thread's stream is a GPU's ([`crate::worker::on_cpu_stream`]): MLX
    /// orders it after the GPU work it reads, and its result is an array the
    /// GPU reads in turn, so a GPU tensor needs no transfer for it (and a
    /// compiled program on the GPU can hold it).
    pub fn apply(self, inputs: &[Array], params: Vec<Param>) -> Result<Outputs> {
        if self.has_flag("cpu") && !crate::device::Device::current_is_cpu() {
            crate::worker::on_cpu_stream(|| self.apply_on_stream(inputs, params))
        } else {
            self.apply_on_stream(inputs, params)
        }
    }
}
