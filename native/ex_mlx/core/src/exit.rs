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
    /// This thread's own "in MLX" flag when it is a worker (made here), as
    /// an address: [`stop_workers_at_exit`] runs after glibc has destroyed
    /// the exiting thread's thread-locals that have destructors, so this
    /// one has none. The flag itself lives in [`IN_MLX`], which is never
    /// shrunk.
    static OWN_FLAG: std::cell::Cell<*const AtomicBool> =
        const { std::cell::Cell::new(std::ptr::null()) };
}

/// A new worker's "in MLX" flag, watched by [`stop_workers_at_exit`]; made
/// on the worker's own thread.
pub(crate) fn new_worker_flag() -> Arc<AtomicBool> {
    let flag = new_flag();
    OWN_FLAG.with(|own| own.set(Arc::as_ptr(&flag)));
    flag
}

/// A flag for threads that call MLX in turns, holding a lock (calling
/// threads running a worker's work: `crate::worker::run_on_caller`),
/// watched by [`stop_workers_at_exit`] as a worker's is.
pub(crate) fn new_flag() -> Arc<AtomicBool> {
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
/// in MLX (up to [`EXIT_WAIT`]); when a worker exits the process (MLX's
/// reference BLAS ends it that way on bad arguments), it waits for the
/// others, not for itself.
pub extern "C" fn stop_workers_at_exit() {
    EXITING.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + EXIT_WAIT;
    // (the list is locked only while a worker starts, for one push: wait
    // for it rather than miss a worker)
    let flags = loop {
        match IN_MLX.try_lock() {
            Ok(flags) => break flags.clone(),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                break poisoned.into_inner().clone()
            }
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(50))
            }
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    };
    // (`try_with`: a thread-local cannot be read once it is destroyed)
    let own = OWN_FLAG
        .try_with(|own| own.get())
        .unwrap_or(std::ptr::null());
    for flag in flags.iter().filter(|flag| Arc::as_ptr(flag) != own) {
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
