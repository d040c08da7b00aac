//! NIFs that exist for ExMLX's own tests, compiled only with the cargo
//! feature `test-hooks` (the Mix build turns it on in the `test`
//! environment; a release build has none of them): a deliberate panic, and a gate that
//! holds the CPU worker busy until the test lets it go (so a test can observe
//! a caller waiting for the worker without depending on how long real work
//! takes).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use ex_mlx_core::device::Device;
use rustler::Env;

use crate::args::Tag;

use crate::reply;

/// The gate: `true` while a hold is in force.
static HELD: Mutex<bool> = Mutex::new(false);
static RELEASED: Condvar = Condvar::new();

/// A held worker lets go on its own after this long, so a failing test
/// cannot leave the CPU worker stuck for the rest of the run.
const MAX_HOLD: Duration = Duration::from_secs(30);

/// `panic_for_test(where)`: panics on purpose, on the calling scheduler
/// (`:nif`) or on the CPU worker (`:worker`, replying to `tag`), so the tests
/// can check that a Rust panic becomes an Elixir error and the VM lives on.
#[rustler::nif]
fn panic_for_test<'a>(env: Env<'a>, tag: Tag<'a>, place: rustler::Atom) -> reply::AsyncResult {
    if place.to_term(env).atom_to_string().ok().as_deref() == Some("worker") {
        reply::submit(env, tag, Device::Cpu, || -> ex_mlx_core::Result<bool> {
            panic!("deliberate test panic on the worker")
        })
    } else {
        panic!("deliberate test panic in a NIF")
    }
}

/// `hold_worker_for_test(tag)`: queues a job that keeps the CPU worker busy
/// until `release_worker_for_test/0` (or [`MAX_HOLD`]); it replies `true` if
/// it was released, `false` if it gave up waiting.
#[rustler::nif]
fn hold_worker_for_test<'a>(env: Env<'a>, tag: Tag<'a>) -> reply::AsyncResult {
    *lock() = true;
    reply::submit(env, tag, Device::Cpu, || -> ex_mlx_core::Result<bool> {
        let deadline = Instant::now() + MAX_HOLD;
        let mut held = lock();
        while *held {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                *held = false;
                return Ok(false);
            }
            held = match RELEASED.wait_timeout(held, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        Ok(true)
    })
}

/// `release_worker_for_test()`: lets a held worker go.
#[rustler::nif]
fn release_worker_for_test() -> rustler::Atom {
    *lock() = false;
    RELEASED.notify_all();
    rustler::types::atom::ok()
}

/// `set_callers_run_for_test(mode)`: when calling threads run a worker's
/// small work themselves (`ex_mlx_core::worker::run_on_caller`):
/// `:when_crowded` (the default), `:always` or `:never`.
#[rustler::nif]
fn set_callers_run_for_test(env: Env, mode: rustler::Atom) -> rustler::NifResult<rustler::Atom> {
    use ex_mlx_core::worker::{set_callers_run, CallersRun};
    let name = mode.to_term(env).atom_to_string().unwrap_or_default();
    let mode = match name.as_str() {
        "when_crowded" => CallersRun::WhenCrowded,
        "always" => CallersRun::Always,
        "never" => CallersRun::Never,
        _ => return Err(rustler::Error::BadArg),
    };
    set_callers_run(mode);
    Ok(rustler::types::atom::ok())
}

/// `runs_on_caller_for_test()`: how many times a calling thread ran a
/// worker's work so far.
#[rustler::nif]
fn runs_on_caller_for_test() -> usize {
    ex_mlx_core::worker::runs_on_caller()
}

fn lock() -> std::sync::MutexGuard<'static, bool> {
    // The flag stays meaningful even if a holder panicked.
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
