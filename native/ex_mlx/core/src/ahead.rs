//! Evaluation ahead of reads: a worker starts evaluating the results of the
//! deferred ops it has built before anything reads them, so that the device
//! computes while the caller goes on building (or does other work) instead
//! of only once a result is read.
//!
//! A deferred op (every `ExMLX.Backend` op) returns before the worker has built
//! its node; MLX evaluates nothing until a result is read. A caller that builds
//! a graph of 1,000 small ops and then reads the last one pays for building all
//! of them, then for evaluating all of them: on a GPU, launching a kernel costs
//! microseconds of the worker's time, which overlapped nothing. Here the worker
//! records the last result it built ([`note`]) and, every [`BATCH`] results
//! and whenever it is about to sleep, hands it to MLX's `async_eval`
//! ([`evaluate`]): the kernels of everything it depends on are launched (on
//! the CPU, queued to MLX's stream thread), and the worker returns to its
//! queue without waiting for them.
//!
//! What it does not change: results (MLX evaluates each node once, whoever
//! asks first), errors (MLX 0.32 leaves an array whose evaluation threw
//! unevaluated, so the read that needs it evaluates it again and gets the
//! error; the early attempt's error is dropped), memory (only nodes a result
//! depends on are evaluated, which a read of it would evaluate too; the one
//! extra reference held is to the newest result, which its tensor holds
//! anyway). The cost: a result nobody reads is computed all the same.
//!
//! Only the newest result is kept: the graph it depends on holds the
//! older ones. A result built beside it and not among its inputs is evaluated
//! when it is read, as before.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::Array;

use crate::device::Kind;

/// Whether workers of each device kind evaluate ahead (index 0: CPU, 1: GPU).
static ENABLED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(true)];

/// How many results a worker builds before it evaluates ahead, whether jobs
/// are queued or not (a caller can issue ops as fast as the worker builds
/// them: waiting for an empty queue would wait for the last); it also
/// evaluates ahead whenever it is about to sleep, however few. One
/// `async_eval` has a fixed cost (a synchronizer node, an event per stream),
/// so small batches cost chains of tiny ops more than they save; 64 keeps
/// those at their speed without evaluation ahead and still overlaps large
/// ops with their building (docs/decisions/0004-evaluation-ahead-on-gpu-only.md).
pub const BATCH: usize = 64;

/// Turns evaluation ahead on or off for every worker of `kind`.
pub fn set_enabled(kind: Kind, on: bool) {
    ENABLED[index(kind)].store(on, Ordering::Relaxed);
}

/// Whether workers of `kind` evaluate ahead.
pub fn enabled(kind: Kind) -> bool {
    ENABLED[index(kind)].load(Ordering::Relaxed)
}

fn index(kind: Kind) -> usize {
    match kind {
        Kind::Cpu => 0,
        Kind::Gpu => 1,
    }
}

struct Pending {
    /// The newest result built on this thread and not yet handed to MLX.
    newest: Option<Array>,
    /// Results built since the last evaluation ahead.
    built: usize,
    /// The device kind of this thread's worker (`None`: not a worker).
    kind: Option<Kind>,
}

thread_local! {
    static PENDING: RefCell<Pending> = const {
        RefCell::new(Pending { newest: None, built: 0, kind: None })
    };
}

/// On a worker's thread, once: the kind of device it works for (whose
/// setting [`note`] follows).
pub fn bind(kind: Kind) {
    PENDING.with(|p| p.borrow_mut().kind = Some(kind));
}

/// On a worker's thread: records `array`, a deferred op's result just built
/// there, as the newest (when its device evaluates ahead).
pub fn note(array: &Array) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if p.kind.is_some_and(enabled) {
            p.newest = Some(array.clone());
            p.built += 1;
        } else if p.newest.is_some() {
            p.newest = None;
            p.built = 0;
        }
    });
}

/// On a worker's thread, between jobs: when at least `min` results were
/// built since the last time, hands the newest to MLX's `async_eval`, unless
/// it is already computed. Returns whether it did.
pub fn evaluate(min: usize) -> bool {
    let newest = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if p.built < min.max(1) {
            return None;
        }
        p.built = 0;
        p.newest.take()
    });
    match newest {
        Some(array) if !is_available(&array) => {
            // (an error here is the read's to report: see the module
            // documentation; a panic must not end the worker)
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                mlx_rs::transforms::async_eval([&array])
            }));
            true
        }
        _ => false,
    }
}

/// Whether `a` is computed (MLX's `is_available`: evaluated, and its work
/// done; an array whose evaluation was started and not finished is not).
pub fn is_available(a: &Array) -> bool {
    let mut available = false;
    // SAFETY: `a` is a live array for the call, which writes one bool.
    let status = unsafe { mlx_sys::_mlx_array_is_available(&mut available, a.as_ptr()) };
    status == 0 && available
}
