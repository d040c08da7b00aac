//! ExMLX's NIF: Elixir terms in, calls on `ex_mlx_core` (and mlx-rs) on the
//! device's worker thread, Elixir terms out.
//!
//! Modules: [`term`] (decoding arguments, encoding results), [`reply`] (how a
//! call is queued and answered), [`tensor`] (the resource), [`data`] (binaries
//! in and out), [`ops`] (MLX operations by family), [`bench`] (reference
//! measurements for bench/).

pub mod bench;
pub mod data;
pub mod memory;
pub mod ops;
pub mod reply;
pub mod tensor;
pub mod term;
pub mod wire;

#[rustler::nif]
fn mlx_version() -> &'static str {
    ex_mlx_core::MLX_VERSION
}

rustler::init!("Elixir.ExMLX.Native");

/// `panic_for_test(where)`: panics on purpose, on the calling scheduler
/// (`:nif`) or on the CPU worker (`:worker`, replying to `tag`), so the tests
/// can check that a Rust panic becomes an Elixir error and the VM lives on.
#[rustler::nif]
fn panic_for_test<'a>(
    env: rustler::Env<'a>,
    tag: rustler::Term<'a>,
    place: rustler::Atom,
) -> rustler::NifResult<reply::Submitted> {
    if place.to_term(env).atom_to_string().ok().as_deref() == Some("worker") {
        reply::queued(reply::submit(
            env,
            tag,
            ex_mlx_core::device::Device::Cpu,
            || -> ex_mlx_core::Result<bool> { panic!("deliberate test panic on the worker") },
        ))
    } else {
        panic!("deliberate test panic in a NIF")
    }
}
