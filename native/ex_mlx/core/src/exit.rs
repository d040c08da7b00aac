//! What the workers do when the process exits: they stop calling MLX before
//! MLX's own static objects are destroyed.
//!
//! `exit(3)` (how the BEAM ends: `System.halt/1`, the end of `mix run`, a
//! test run's end) runs the handlers registered with `atexit`, newest first,
//! and libmlx's C++ static objects are among them: its CPU allocator, whose
//! buffer cache every freed array goes back to, is one. Other threads keep
//! running meanwhile. A worker that was still freeing arrays then wrote into
//! a cache being destroyed: a segfault in `std::_Rb_tree_insert_and_rebalance`
//! on the worker, glibc's "malloc_consolidate(): unaligned fastbin chunk
//! detected", or a fault in the allocator's destructor (seen here at the end
//! of `mix run` scripts; `tests/exit_while_busy.rs` made it happen in 4 exits
//! of 30).
//!
//! So every worker (each device's, and the communication thread of
//! `crate::distributed`) marks the time it spends in MLX ([`in_mlx`]) and
//! registers [`stop_workers_at_exit`] with `atexit` once it has made its
//! stream (a device's worker also makes and evaluates a first array, so
//! that MLX has made its allocator, scheduler and stream objects by then):
//! the handler runs before the destructors of everything MLX made until
//! then. It raises [`exiting`], waits (up to
//! [`EXIT_WAIT`]) for every worker to leave MLX, and from then on a worker
//! that would enter MLX parks instead, and arrays released on other threads
//! are left to the process's end instead of freed ([`forget_if_exiting`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set once the process has begun to exit.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Each worker's "in MLX now" flag.
static IN_MLX: Mutex<Vec<Arc<AtomicBool>>> = Mutex::new(Vec::new());

/// The longest [`stop_workers_at_exit`] waits for the workers together (a
/// job that never ends, such as a collective waiting for a peer that is
/// gone, must not keep the process from exiting).
pub const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Whether the process has begun to exit.
pub fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

thread_local! {
    /// Whether this thread is a worker (it made its flag here).
    static A_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A new worker's "in MLX" flag, watched by [`stop_workers_at_exit`]; made
/// on the worker's own thread.
pub(crate) fn new_worker_flag() -> Arc<AtomicBool> {
    A_WORKER.with(|w| w.set(true));
    let flag = Arc::new(AtomicBool::new(false));
    IN_MLX
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(flag.clone());
    flag
}

/// Runs `work` (which calls MLX) with the worker's `flag` raised; if the
/// process is exiting, parks the thread for good instead.
pub(crate) fn in_mlx<T>(flag: &AtomicBool, work: impl FnOnce() -> T) -> T {
    struct Lowered<'a>(&'a AtomicBool);
    impl Drop for Lowered<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::SeqCst);
        }
    }
    // (raised before the check, and both sequentially consistent: either the
    // exit handler sees the flag raised and waits, or this sees `EXITING`)
    flag.store(true, Ordering::SeqCst);
    let lowered = Lowered(flag);
    if exiting() {
        drop(lowered);
        park_for_good();
    }
    work()
}

fn park_for_good() -> ! {
    loop {
        std::thread::park();
    }
}

/// Registers [`stop_workers_at_exit`] with `atexit` (called by each worker
/// once MLX has made its objects; registering it again is harmless).
pub(crate) fn register() {
    // SAFETY: `stop_workers_at_exit` is a plain `extern "C"` function with no
    // arguments, as `atexit` requires; it lives as long as the process.
    unsafe {
        libc::atexit(stop_workers_at_exit);
    }
}

/// The `atexit` handler: raises [`exiting`], then waits until no worker is
/// in MLX (up to [`EXIT_WAIT`]). Not on a worker that is itself exiting the
/// process (it would wait for itself).
pub extern "C" fn stop_workers_at_exit() {
    EXITING.store(true, Ordering::SeqCst);
    if A_WORKER.with(|w| w.get()) {
        return;
    }
    let flags = match IN_MLX.try_lock() {
        Ok(flags) => flags.clone(),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner().clone(),
        // (held only while a worker starts: that one has not entered MLX)
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    let deadline = Instant::now() + EXIT_WAIT;
    for flag in flags {
        while flag.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Drops `value` (which frees MLX memory when it is the last reference),
/// unless the process is exiting: then it is left for the process's end.
pub fn forget_if_exiting<T>(value: T) {
    if exiting() {
        std::mem::forget(value);
    } else {
        drop(value);
    }
}
