//! Small work run on the calling thread instead of a CPU device's worker,
//! when other processes leave too few cores for the hand-off between the
//! two to be spun for (docs/decisions/0010-work-on-the-calling-thread-when-crowded.md).
//!
//! A CPU worker (of an MLX build without a GPU) makes its stream with
//! `mlx_stream_new_thread_unsafe`, whose command encoder is not bound to
//! the worker's thread, and holds [`Shared::running`] whenever it runs MLX
//! work on it. A calling thread that finds no job queued or running takes
//! that lock and runs its work itself ([`run_on_caller`]): the same stream,
//! the same MLX kernels, so the same results; only the thread differs. What
//! is small enough is the NIF's to decide (`ex_mlx::reply::CALLER_WORK`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use once_cell::sync::Lazy;

use super::{default_index, locked, on_worker, run_caught, streams, Worker, WORKERS};
use crate::device::{Device, Kind};
use crate::error::Result;
use crate::exit;

/// A CPU worker's stream and the lock that lets one thread at a time use it
/// ([`run_on_caller`]).
pub(super) struct Shared {
    /// Held by whichever thread runs MLX work on the stream: the worker
    /// while it runs a job (or evaluates ahead, or drops arrays before it
    /// sleeps), or a calling thread in [`run_on_caller`].
    pub(super) running: Mutex<()>,
    /// The worker's stream, made with `mlx_stream_new_thread_unsafe`, whose
    /// command encoder any thread may use (one at a time: `running`).
    pub(super) stream: SharedStream,
    /// The "in MLX" flag of the thread holding `running` off the worker
    /// (crate::exit).
    pub(super) in_mlx: Arc<AtomicBool>,
    /// Whether the worker holds `running` to run a job (set and cleared
    /// while it holds it).
    pub(super) job_running: AtomicBool,
}

/// An MLX stream handle used from several threads.
pub(super) struct SharedStream(pub(super) mlx_rs::Stream);

// SAFETY: the handle points to an `mlx::core::Stream`, a value (an index and
// a device) that is never changed after `worker_stream` made it; threads
// only read it (cloning the handle copies that value). The stream's command
// encoder, which is not thread-safe, is used only under `Shared::running`.
unsafe impl Send for SharedStream {}
// SAFETY: as for `Send`: shared reads of an immutable value.
unsafe impl Sync for SharedStream {}

thread_local! {
    /// Whether this thread is running a worker's work in [`run_on_caller`].
    static ON_CALLER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The worker's stream: where calling threads may run its work
/// ([`callers_may_run`]), one whose command encoder is not bound to the
/// worker's thread (`mlx_stream_new_thread_unsafe`); otherwise an ordinary
/// stream, bound to the worker's thread (a job evaluated elsewhere by
/// mistake then fails instead of racing).
pub(super) fn worker_stream(device: Device) -> mlx_rs::Stream {
    let stream = mlx_rs::Stream::new_with_device(&device.to_mlx());
    if !callers_may_run(device) {
        return stream;
    }
    // (mlx-rs makes no stream from a raw handle: the new stream's value is
    // replaced in place by the thread-unsafe one's; the first stays
    // registered on this thread, unused)
    // SAFETY: `device` is made, used and freed here; `unbound` is a new
    // handle, freed after its value is copied; `handle` is a copy of
    // `stream`'s handle, so `mlx_stream_set` writes into the
    // `mlx::core::Stream` that `stream` owns (it assigns in place when the
    // handle's context is set, as every stream's is). mlx-c reports C++
    // exceptions as a non-zero status, and then `stream` is left as it was.
    let replaced = unsafe {
        let device = mlx_sys::mlx_device_new_type(device.mlx_type(), 0);
        let unbound = mlx_sys::mlx_stream_new_thread_unsafe(device);
        mlx_sys::mlx_device_free(device);
        let mut handle = stream.as_ptr();
        let status = if unbound.ctx.is_null() {
            1
        } else {
            mlx_sys::mlx_stream_set(&mut handle, unbound)
        };
        mlx_sys::mlx_stream_free(unbound);
        status == 0 && handle.ctx == stream.as_ptr().ctx
    };
    if !replaced {
        // (an ordinary stream: `callers_may_run` is false for it from now)
        UNBOUND_FAILED.store(true, Ordering::Relaxed);
    }
    stream
}

/// Makes `stream` MLX's default stream of its device on this thread (MLX
/// keeps one per thread), which MLX's own `eval` and any op built without
/// a stream use: the nodes a thread builds must be on a stream that every
/// thread running the worker's work can evaluate, not on a stream of its
/// own (MLX's error: "There is no Stream(cpu, n) in current thread").
pub(super) fn set_mlx_default_stream(stream: &mlx_rs::Stream) {
    // SAFETY: `stream` is a live stream handle; MLX copies its value into
    // this thread's default-stream slot. mlx-c reports a C++ exception as a
    // non-zero status, which leaves the default as it was (ops given a
    // stream, as ExMLX's are, do not use it).
    let _ = unsafe { mlx_sys::mlx_set_default_stream(stream.as_ptr()) };
}

/// Set when a thread-unsafe stream could not be made: no caller runs work.
static UNBOUND_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether calling threads may run `device`'s work themselves
/// ([`run_on_caller`]): on the CPU, in an MLX build without a GPU. With a
/// GPU, MLX's default device is the GPU, and an evaluation on a thread that
/// never used MLX makes that thread a GPU stream of its own (MLX's
/// `eval` asks for the default device's default stream).
pub(super) fn callers_may_run(device: Device) -> bool {
    static NO_GPU: Lazy<bool> = Lazy::new(|| !Device::Gpu.is_available());
    device.kind() == Kind::Cpu && *NO_GPU && !UNBOUND_FAILED.load(Ordering::Relaxed)
}

/// Runs `work`, which calls MLX on `device`'s stream, on the calling thread
/// instead of the device's worker, when that is allowed and spares the
/// machine something: fewer than two cores are free of other processes'
/// threads (`crate::wait::crowded`; [`CallersRun`] overrides it for
/// tests), `device` is a CPU device of a build without a GPU
/// ([`callers_may_run`]), and its worker has no job queued or running. The
/// worker is held off until `work` returns. `work`'s result (a panic
/// becomes an [`crate::error::Error::Internal`], as on the worker);
/// `Err(work)`, unused, otherwise: the caller queues it.
///
/// Why: with cores to spare, a hand-off to the worker is spun for and
/// costs little; without, each thread woken waits for a core, and a call
/// through the worker wakes it for every job and wakes the calling thread
/// once more, where Python's mlx wakes only MLX's stream thread
/// (docs/decisions/0010-work-on-the-calling-thread-when-crowded.md). The
/// caller decides whether `work` is short enough for its thread (a NIF on a
/// normal scheduler returns within about a millisecond); results are the
/// same as on the worker: the same stream, the same MLX kernels.
pub fn run_on_caller<T, F>(device: Device, work: F) -> std::result::Result<Result<T>, F>
where
    F: FnOnce() -> Result<T>,
{
    let wanted = match callers_run() {
        CallersRun::WhenCrowded => crate::wait::crowded(),
        CallersRun::Always => true,
        CallersRun::Never => false,
    };
    if !wanted || on_worker() || on_caller() {
        return Err(work);
    }
    match device.stream() {
        0 => match WORKERS[default_index(device)].get() {
            Some(Ok(worker)) => run_holding(worker, work),
            _ => Err(work),
        },
        _ => match streams().get(&device).cloned() {
            Some(worker) => run_holding(&worker, work),
            None => Err(work),
        },
    }
}

/// [`run_on_caller`]'s work, once the worker is known.
fn run_holding<T, F>(worker: &Worker, work: F) -> std::result::Result<Result<T>, F>
where
    F: FnOnce() -> Result<T>,
{
    let Some(shared) = worker.shared.get() else {
        return Err(work);
    };
    // (jobs that only drop released arrays do not count: their order
    // against other work does not matter)
    let queued = || {
        let unstarted = worker.unstarted.load(Ordering::Acquire);
        unstarted.saturating_sub(worker.burials.load(Ordering::Acquire))
    };
    if queued() != 0 {
        return Err(work);
    }
    // The worker holds `running` while it runs a job (which may be long),
    // and briefly when it drops arrays before it sleeps; another caller
    // holds it for small work. A caller that finds it held leaves its work
    // to the worker, unless every small op is to run on callers (tests)
    // and the worker is not running a job.
    let _running = match shared.running.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(std::sync::TryLockError::WouldBlock)
            if callers_run() == CallersRun::Always
                && !shared.job_running.load(Ordering::Acquire) =>
        {
            locked(&shared.running)
        }
        Err(std::sync::TryLockError::WouldBlock) => return Err(work),
    };
    // (a job queued meanwhile runs first: the worker starts it once this
    // thread lets go of `running`)
    if queued() != 0 {
        return Err(work);
    }
    struct OffCaller;
    impl Drop for OffCaller {
        fn drop(&mut self) {
            ON_CALLER.with(|c| c.set(false));
        }
    }
    RUNS_ON_CALLER.fetch_add(1, Ordering::Relaxed);
    Ok(exit::in_mlx(&shared.in_mlx, || {
        ON_CALLER.with(|c| c.set(true));
        let _off = OffCaller;
        set_mlx_default_stream(&shared.stream.0);
        let _busy = crate::wait::Busy::running_mlx_work();
        mlx_rs::with_stream(&shared.stream.0, || run_caught(work))
    }))
}

/// When calling threads run a worker's work themselves
/// ([`run_on_caller`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallersRun {
    /// When fewer than two cores are free of other processes' threads
    /// (`crate::wait::crowded`): the default.
    WhenCrowded,
    /// Whenever the worker is idle (for tests: every small op and read of
    /// a run takes the calling thread's path).
    Always,
    /// Never (for tests: every op takes the worker's path).
    Never,
}

static CALLERS_RUN: AtomicU32 = AtomicU32::new(0);

/// Sets when calling threads run a worker's work themselves (for every
/// device).
pub fn set_callers_run(mode: CallersRun) {
    let code = match mode {
        CallersRun::WhenCrowded => 0,
        CallersRun::Always => 1,
        CallersRun::Never => 2,
    };
    CALLERS_RUN.store(code, Ordering::Relaxed);
}

/// When calling threads run a worker's work themselves.
pub fn callers_run() -> CallersRun {
    match CALLERS_RUN.load(Ordering::Relaxed) {
        1 => CallersRun::Always,
        2 => CallersRun::Never,
        _ => CallersRun::WhenCrowded,
    }
}

/// How many times [`run_on_caller`] ran work on a calling thread (for tests).
pub fn runs_on_caller() -> usize {
    RUNS_ON_CALLER.load(Ordering::Relaxed)
}

static RUNS_ON_CALLER: AtomicUsize = AtomicUsize::new(0);

/// Whether this thread is running a worker's work in [`run_on_caller`].
pub fn on_caller() -> bool {
    ON_CALLER.with(|c| c.get())
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;
    use crate::worker::{new_stream, run_blocking};

    #[test]
    fn a_caller_runs_work_on_its_own_thread_only_while_the_worker_has_none() {
        let stream = new_stream(Device::Cpu).unwrap();
        if !callers_may_run(stream) {
            eprintln!("callers do not run a worker's work in an MLX build with a GPU: not checked");
            return;
        }
        // (a graph built on the worker, not evaluated)
        let sum = run_blocking(stream, || {
            let a = mlx_rs::Array::from_slice(&[1.0f32, 2.0], &[2]);
            Ok(mlx_rs::ops::add(&a, &a)?)
        })
        .unwrap();
        let was = callers_run();
        set_callers_run(CallersRun::Always);
        let here = thread::current().id();
        let mut work = move || {
            sum.eval()?;
            Ok((thread::current().id(), sum.as_slice::<f32>().to_vec()))
        };
        // (the worker may still be finishing the job that built `sum`: the
        // work comes back until it has)
        let mut ran = None;
        for _ in 0..10_000 {
            match run_on_caller(stream, work) {
                Ok(result) => {
                    ran = Some(result);
                    break;
                }
                Err(back) => {
                    work = back;
                    thread::sleep(std::time::Duration::from_micros(100));
                }
            }
        }
        let (thread, values) = ran.expect("ran on the caller").unwrap();
        assert_eq!((thread, values), (here, vec![2.0, 4.0]));
        // a job queued or running: the work is handed back, not run
        let go = crate::worker::hold(stream);
        assert!(run_on_caller(stream, || Ok(())).is_err());
        go.send(()).unwrap();
        run_blocking(stream, || Ok(())).unwrap();
        set_callers_run(CallersRun::Never);
        assert!(run_on_caller(stream, || Ok(())).is_err());
        set_callers_run(was);
    }
}
