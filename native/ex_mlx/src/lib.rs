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
    ex_mlx_core::mlx_version()
}

#[rustler::nif]
fn cpu_kernels_enabled() -> bool {
    ex_mlx_core::cpu_kernels::enabled()
}

/// Runs when the library is loaded, before any MLX call. `load_info` is
/// `{tf32, tune_malloc, cpu_kernels}` (ExMLX.Native decides them from the
/// application's configuration and the environment):
///
/// - `tf32`: whether float32 matrix products may use TF32 on the GPU. MLX
///   reads `MLX_ENABLE_TF32` once, at its first such product, with the C
///   library's `getenv`; Erlang's `os:putenv` changes only the emulator's own
///   copy of the environment, so the variable is set here.
/// - `tune_malloc`: whether to set glibc's malloc thresholds for MLX's host
///   buffers (`ex_mlx_core::memory::tune_host_malloc` says why).
/// - `cpu_kernels`: whether ExMLX's own CPU kernels run where they apply
///   (`ex_mlx_core::cpu_kernels`); off, every op is MLX's.
///
/// It also sets `MLX_ENABLE_CACHE_THRASHING_CHECK=0` unless the variable is
/// set: MLX's CUDA backend counts every miss of its caches (CUDA graphs,
/// convolutions, attention) over the life of the process and, past twice a
/// cache's capacity (800 distinct graphs by default), throws at every
/// further miss, so a long-lived VM's GPU work failed from then on (the GPU
/// suite did, at 90 tests). Off, the caches evict as before and nothing
/// throws; MLX's own test runner sets the same.
fn load(_env: rustler::Env, load_info: rustler::Term) -> bool {
    let (tf32, tune_malloc, cpu_kernels): (bool, bool, bool) =
        load_info.decode().unwrap_or((false, true, true));
    ex_mlx_core::cpu_kernels::set_enabled(cpu_kernels);
    // (unset or empty, as ExMLX.Native's choice treats it)
    if std::env::var_os("MLX_ENABLE_TF32").is_none_or(|v| v.is_empty()) {
        // (Rust 2021: `set_var` is safe to call; it races only with another
        // thread's getenv, and no thread of this library exists yet)
        std::env::set_var("MLX_ENABLE_TF32", if tf32 { "1" } else { "0" });
    }
    if std::env::var_os("MLX_ENABLE_CACHE_THRASHING_CHECK").is_none_or(|v| v.is_empty()) {
        std::env::set_var("MLX_ENABLE_CACHE_THRASHING_CHECK", "0");
    }
    ex_mlx_core::worker::set_before_sleep(before_sleep);
    if tune_malloc {
        // (false where the C library is not glibc: nothing to tune)
        ex_mlx_core::memory::tune_host_malloc();
    }
    true
}

/// What a worker runs before it sleeps: it drops the tensor references its
/// jobs left, in a batch (tensor::release_later), and the arrays of split
/// products a helper was still reading when they ended
/// (ex_mlx_core::split_work). Whether it dropped tensor references.
fn before_sleep() -> bool {
    ex_mlx_core::split_work::drop_finished();
    tensor::release_batch()
}

rustler::init!("Elixir.ExMLX.Native", load = load);

/// Every Rust allocation of the NIF (not MLX's, which are C++'s): an op's job
/// and its arguments are allocated on a scheduler thread and freed on the
/// device's worker, and glibc's `free` of another thread's block takes that
/// thread's arena lock, contended once per op; mimalloc hands such a block
/// back without a lock (docs/decisions/0005-nif-allocator.md).
/// Built with the local-dynamic TLS model: the BEAM loads the NIF with
/// `dlopen`, where the initial-exec model can run out of static TLS. Built
/// without transparent huge pages (`no_thp`): mimalloc otherwise asks the
/// kernel for huge pages on its memory (`MADV_HUGEPAGE`), and where the
/// kernel compacts memory to find one on a page fault (Debian's `defrag`
/// setting `madvise`), an allocation could stall for milliseconds while it
/// compacted (docs/decisions/0005-nif-allocator.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
