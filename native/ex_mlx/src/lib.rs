//! ExMLX's NIF: Elixir terms in, calls on `ex_mlx_core` (and mlx-rs) on the
//! device's worker thread, Elixir terms out.
//!
//! Modules, each depending only on those listed before it: [`term`]
//! (argument values in, results out), [`tensor`] (the resource), [`args`]
//! (typed NIF arguments), [`reply`] (how a call is queued and answered);
//! then the NIFs: [`op`] (every op of the op table, through one NIF),
//! [`tensor_nifs`] (queries, eval, item), [`device`], [`data`] (binaries in
//! and out), [`wire`], [`memory`], [`distributed`] (MLX's groups and
//! collectives), [`bench`] (reference measurements for
//! bench/), and, with the `test-hooks` feature, [`test_hooks`].
//! docs/architecture.md draws the whole.

pub mod args;
pub mod bench;
pub mod data;
pub mod device;
pub mod distributed;
pub mod memory;
pub mod op;
pub mod program;
pub mod reply;
pub mod tensor;
pub mod tensor_nifs;
pub mod term;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
pub mod wire;

#[rustler::nif]
fn mlx_version() -> &'static str {
    ex_mlx_core::MLX_VERSION
}

rustler::init!("Elixir.ExMLX.Native");
