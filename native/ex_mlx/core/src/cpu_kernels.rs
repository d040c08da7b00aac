//! The one policy point for ExMLX's own CPU kernels: where, on the CPU
//! device, the host computes a result itself instead of handing the op to
//! MLX. Every such path is asked here first; with the kernels switched off
//! (`config :ex_mlx, cpu_kernels: false`, or `EX_MLX_CPU_KERNELS=false`,
//! read when the NIF loads) every op is the op table's MLX call and every
//! program runs op by op on its worker.
//!
//! What the kernels are, each kept for a measured reason
//! (docs/decisions/0002, 0007; bench/results/numerics-ab.md), and each
//! giving MLX's bits because it computes only exactly rounded operations
//! (docs/numerics.md):
//!
//! - an exactly rounded element-wise op (`add`, `subtract`, `multiply`,
//!   `divide`, `max`, `min`, `negate`, `abs`, `sqrt`, `square`) of float32
//!   arrays that are already computed, at once on the thread that issues it
//!   ([`apply`] on a worker, [`on_calling_thread`] in the `op` NIF):
//!   crate::elementwise_fusion;
//! - in programs: groups of such ops as one pass (`fuse: true`, and ready
//!   groups without it), small tensors known on the host (crate::host_tensor:
//!   integer arithmetic, and float32 copies, selections, comparisons and
//!   exactly rounded arithmetic), straight-line programs of such ops run on
//!   the calling thread (crate::program's `on_caller`) — [`in_programs`];
//! - one row (or a batch of rows) times a float32 matrix in one vectorized
//!   pass (crate::ops::gemv) — [`vector_product`].

use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::Array;

use crate::device::Device;
use crate::elementwise_fusion::{computed_on_host, inputs_ready};
use crate::error::Result;
use crate::ops::computed::elementwise_kind;
use crate::ops::params::Param;
use crate::ops::table::{Op, Outputs};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether ExMLX's CPU kernels run (on unless switched off).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Switches the CPU kernels on or off for the whole process (the NIF's
/// load does, before any op; tests of both paths do).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// `op` of `inputs` with `params` on this thread's stream: an exactly
/// rounded element-wise op of float32 arrays already computed on the CPU
/// (MLX's `is_available`; row-major, each a single value, of the result's
/// shape or a row it repeats; at most `READY_MAX_ELEMENTS` values) is
/// computed at once here, when the kernels are on; any other op is the op
/// table's MLX call ([`Op::apply`]). A result computed here is computed
/// already, so the ready ops after it run here too: a batch of one through
/// an MLP (product by [`vector_product`], bias, ReLU, product...) never
/// waits for MLX's stream thread between its layers. The bits are MLX's
/// either way.
pub fn apply(op: Op, inputs: &[Array], params: Vec<Param>) -> Result<Outputs> {
    apply_as(enabled(), op, inputs, params)
}

/// [`apply`] with the kernels `on` or not.
fn apply_as(on: bool, op: Op, inputs: &[Array], params: Vec<Param>) -> Result<Outputs> {
    if on && elementwise_kind(op).is_some() {
        // (these ops take one or two inputs: no allocation on this path,
        // which many of a program's ops take)
        let (one, two);
        let refs: &[&Array] = match inputs {
            [a] => {
                one = [a];
                &one
            }
            [a, b] => {
                two = [a, b];
                &two
            }
            _ => &[],
        };
        if !refs.is_empty() && inputs_ready(refs) {
            if let Some(out) = exactly_rounded(op, refs, &params)? {
                return Ok(Outputs::One(out));
            }
        }
    }
    op.apply(inputs, params)
}

/// `op` of `inputs` computed here when it is an exactly rounded
/// element-wise op given its inputs and no parameters, else `None`.
fn exactly_rounded(op: Op, inputs: &[&Array], params: &[Param]) -> Result<Option<Array>> {
    match elementwise_kind(op) {
        Some(kind) if params.is_empty() && op.takes_inputs(inputs.len()) => {
            computed_on_host(kind, inputs)
        }
        _ => Ok(None),
    }
}

/// Whether the `op` NIF may try [`on_calling_thread`] for `op` on `device`
/// (checked before it reads its tensors).
pub fn may_compute_on_calling_thread(op: Op, device: Device) -> bool {
    enabled() && device.kind() == crate::device::Kind::Cpu && elementwise_kind(op).is_some()
}

/// `op` of `inputs` (float32 arrays the caller knows are computed, on the
/// CPU device) computed on the calling thread, or `None` where the worker
/// runs it as usual.
pub fn on_calling_thread(op: Op, inputs: &[&Array], params: &[Param]) -> Result<Option<Array>> {
    if !enabled() {
        return Ok(None);
    }
    exactly_rounded(op, inputs, params)
}

/// Whether programs on the CPU use the kernels (fused and ready groups,
/// host tensors, runs on the calling thread).
pub fn in_programs() -> bool {
    enabled()
}

/// `a · b` as one pass over the matrix, for one row (or a batch of rows)
/// times a float32 matrix on a CPU stream (crate::ops::gemv); `None` where
/// MLX's matmul computes it (the kernels off included).
pub fn vector_product(a: &Array, b: &Array) -> Result<Option<Array>> {
    vector_product_as(enabled(), a, b)
}

/// [`vector_product`] with the kernels `on` or not.
fn vector_product_as(on: bool, a: &Array, b: &Array) -> Result<Option<Array>> {
    if !on {
        return Ok(None);
    }
    crate::ops::gemv::vector_product(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_arrays::{bits, computed};

    #[test]
    fn ready_arithmetic_is_computed_at_once_only_while_the_kernels_are_on() {
        let a = computed(&[1.5, -2.0, 0.25], &[3]);
        let b = computed(&[3.0, 0.5, -8.0], &[3]);
        let here = apply_as(true, Op::add, &[a.clone(), b.clone()], vec![])
            .unwrap()
            .into_vec();
        let mlx = apply_as(false, Op::add, &[a, b], vec![])
            .unwrap()
            .into_vec();
        // a result computed here is computed already; MLX's is a lazy node
        assert!(crate::ahead::is_available(&here[0]));
        assert!(!crate::ahead::is_available(&mlx[0]));
        let expected: Vec<u32> = [4.5f32, -1.5, -7.75].iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits(&here[0]), expected);
        assert_eq!(bits(&mlx[0]), expected);
    }

    #[test]
    fn one_row_products_are_mlx_s_while_the_kernels_are_off() {
        let row = computed(&vec![0.5; 64], &[1, 64]);
        let matrix = computed(&vec![0.25; 64 * 128], &[64, 128]);
        assert!(vector_product_as(true, &row, &matrix).unwrap().is_some());
        assert!(vector_product_as(false, &row, &matrix).unwrap().is_none());
    }
}
