//! Link settings for the prebuilt MLX runtime (Linux and other non-Apple targets).
//!
//! The `ex_mlx_native` Mix compiler sets `EX_MLX_LIB_DIR` to the folder holding
//! `libmlx.so`. We add it to the link search path and to the rpath of everything
//! we link (the NIF and `cargo test` binaries), so the NIF finds libmlx at run time
//! without `LD_LIBRARY_PATH`. On macOS mlx-sys builds and links MLX itself.

fn main() {
    println!("cargo:rerun-if-env-changed=EX_MLX_LIB_DIR");

    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();

    if target_os == "macos" {
        return;
    }

    match std::env::var("EX_MLX_LIB_DIR") {
        Ok(dir) if !dir.is_empty() => {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
        _ => println!(
            "cargo:warning=EX_MLX_LIB_DIR is not set: build through `mix compile` (or bin/setup) \
             so the MLX runtime is provisioned and found"
        ),
    }
}
