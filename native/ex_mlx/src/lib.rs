//! ExMLX's NIF: Elixir terms in, calls on `ex_mlx_core` (and mlx-rs) on the
//! device's worker thread, Elixir terms out.
//!
//! Modules: [`term`] (decoding arguments, encoding results), [`reply`] (how a
//! call is queued and answered), [`tensor`] (the resource), [`data`] (binaries
//! in and out), [`ops`] (MLX operations by family), [`bench`] (reference
//! measurements for bench/), [`test_hooks`] (NIFs for ExMLX's own tests).

pub mod bench;
pub mod data;
pub mod memory;
pub mod ops;
pub mod reply;
pub mod tensor;
pub mod term;
pub mod test_hooks;
pub mod wire;

#[rustler::nif]
fn mlx_version() -> &'static str {
    ex_mlx_core::MLX_VERSION
}

rustler::init!("Elixir.ExMLX.Native");
