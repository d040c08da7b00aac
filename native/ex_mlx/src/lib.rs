//! ExMLX's native side: a rustler NIF over mlx-rs.
//!
//! Modules, one concern each: [`error`] (the error enum), [`dtype`] (the type
//! table), [`device`], [`worker`] (the thread model), [`tensor`] (the resource),
//! [`host`] (binaries in and out), [`ops`] (MLX operations), [`nif`] (glue).

pub mod device;
pub mod dtype;
pub mod error;
pub mod host;
pub mod nif;
pub mod ops;
pub mod tensor;
pub mod worker;

/// The MLX version this crate is built against (mlx-c 0.7.0 pins it).
pub const MLX_VERSION: &str = "0.32.2";

#[rustler::nif]
fn mlx_version() -> &'static str {
    MLX_VERSION
}

rustler::init!("Elixir.ExMLX.Native");
