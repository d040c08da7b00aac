//! The thread model: one worker thread per device owns that device's MLX stream
//! and runs every MLX call for tensors on it.
//!
//! Why: MLX 0.32 binds a stream to the thread that created it. A graph built on
//! one thread and evaluated on another fails with "There is no Stream(cpu, 0) in
//! current thread" (an mlx-rs `Exception`). BEAM processes migrate between
//! scheduler threads, and dirty NIFs run on yet other threads, so no NIF may
//! touch an MLX array on the thread it happens to run on. Instead:
//!
//! 1. The NIF (a normal, short NIF) checks its arguments, packs the work into a
//!    closure that owns what it needs (resources are reference counted, so no
//!    tensor can be freed while an op uses it) and queues it to the device's
//!    worker. It returns `:ok` at once, or `{:error, reason}` for bad arguments.
//! 2. The worker runs the closure inside `mlx_rs::with_stream(worker's stream)`,
//!    catching panics, and sends `{tag, {:ok, value} | {:error, reason}}` to the
//!    calling process, `tag` being a reference the caller made.
//! 3. The caller waits in a `receive` on that reference: a waiting process
//!    costs no scheduler time, so nothing blocks a normal scheduler however long
//!    MLX takes (a large matmul, an eval). (Before returning, the NIF polls
//!    for up to 60 µs whether an idle worker is already done; if so it returns
//!    the result itself and no message is sent: see `ex_mlx::reply`.)
//!
//! The price is one cross-thread hand-off per call (queue, wake the worker,
//! `enif_send`, wake the caller); `bench/` measures it. Workers start on first
//! use; a device MLX cannot run on gives an error naming it instead of a worker.
//!
//! One exception: when other processes leave too few cores for hand-offs to
//! be spun for, a CPU worker's small work runs on the calling thread, on the
//! worker's stream, while the worker is idle and held off ([`on_caller`]:
//! its stream is one MLX lets any thread use, one at a time).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use once_cell::sync::{Lazy, OnceCell};

use crate::ahead;
use crate::device::{Device, Kind};
use crate::error::{Error, Result};
use crate::exit;

mod on_caller;

use on_caller::{callers_may_run, set_mlx_default_stream, worker_stream, Shared, SharedStream};
pub use on_caller::{
    callers_run, on_caller, run_on_caller, runs_on_caller, set_callers_run, CallersRun,
};

/// Work for a worker: runs on its thread, inside its stream.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

struct Worker {
    queue: mpsc::Sender<Job>,
    /// Jobs queued or running.
    backlog: Arc<AtomicUsize>,
    /// Arrays released on other threads, for this worker to drop ([`release`]).
    graveyard: Arc<Mutex<Vec<mlx_rs::Array>>>,
    /// Jobs queued and not yet started (the worker counts a job started
    /// once it holds `Shared::running` to run it).
    unstarted: Arc<AtomicUsize>,
    /// Jobs that drop the graveyard's arrays, queued and not yet started
    /// (counted in `backlog` and `unstarted` too).
    burials: Arc<AtomicUsize>,
    /// What a calling thread needs to run this worker's work itself
    /// ([`run_on_caller`]); set by the worker once it made its stream, and
    /// only where calling threads may (see [`callers_may_run`]).
    shared: Arc<OnceCell<Shared>>,
}

thread_local! {
    /// Whether this thread is a worker (see [`release`]).
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// A CPU stream of this thread, for a GPU worker's CPU-only ops
    /// ([`on_cpu_stream`]), made on first use.
    static CPU_STREAM: std::cell::OnceCell<mlx_rs::Stream> = const { std::cell::OnceCell::new() };
}

/// Runs `work` with a CPU stream of this thread as the default stream: for
/// the ops MLX runs on the CPU only, on a GPU's worker. The stream is this
/// thread's own (MLX binds a stream to the thread that made it, so the
/// worker evaluates its work as it evaluates the rest), made once.
pub fn on_cpu_stream<T>(work: impl FnOnce() -> T) -> T {
    CPU_STREAM.with(|stream| {
        let stream = stream.get_or_init(|| mlx_rs::Stream::new_with_device(&mlx_rs::Device::cpu()));
        mlx_rs::with_stream(stream, work)
    })
}

/// The default streams' workers (`:cpu`, `:gpu`), started on first use.
static WORKERS: [OnceCell<std::result::Result<Worker, String>>; 2] =
    [OnceCell::new(), OnceCell::new()];

/// The workers of streams made by [`new_stream`], by device (kind and
/// stream number). A stream lives as long as the VM: MLX keeps its streams
/// for the life of the process too.
static STREAMS: Lazy<Mutex<HashMap<Device, Arc<Worker>>>> =
    Lazy::new(|| Mutex::new(HashMap::new()));

/// The last stream number handed out (one count for both kinds: a number
/// names one stream).
static LAST_STREAM: AtomicU32 = AtomicU32::new(0);

/// A new stream of `device`'s kind, with a worker thread and an MLX stream
/// of its own: ops on its tensors run there, without waiting for other
/// streams' (whether the GPU then overlaps their kernels is MLX's to
/// decide). Errors when the device is not available or [`MAX_STREAMS`] are
/// made.
pub fn new_stream(device: Device) -> Result<Device> {
    let mut streams = streams();
    if streams.len() >= MAX_STREAMS {
        return Err(Error::Device(format!(
            "at most {MAX_STREAMS} streams can be made (each has a thread for the life of the \
             VM); reuse the ones made"
        )));
    }
    let stream = device.on_stream(LAST_STREAM.fetch_add(1, Ordering::Relaxed) + 1);
    let worker = start(stream).map_err(Error::Device)?;
    streams.insert(stream, Arc::new(worker));
    Ok(stream)
}

/// How many streams [`new_stream`] makes at most: each keeps a thread.
pub const MAX_STREAMS: usize = 64;

/// Whether `device` names an existing stream (default streams always exist).
pub fn stream_exists(device: Device) -> bool {
    device.stream() == 0 || streams().contains_key(&device)
}

fn streams() -> std::sync::MutexGuard<'static, HashMap<Device, Arc<Worker>>> {
    // (a panic while the map is locked cannot leave it half-updated: insert
    // and lookups only)
    STREAMS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn default_index(device: Device) -> usize {
    match device.kind() {
        Kind::Cpu => 0,
        Kind::Gpu => 1,
    }
}

fn start(device: Device) -> std::result::Result<Worker, String> {
    if !device.is_available() {
        return Err(format!(
            "the {} device is not available in this MLX build (MLX {}); use :cpu",
            device.name(),
            crate::mlx_version()
        ));
    }
    let (queue, jobs) = mpsc::channel::<Job>();
    let backlog = Arc::new(AtomicUsize::new(0));
    let done = backlog.clone();
    let unstarted = Arc::new(AtomicUsize::new(0));
    let started = unstarted.clone();
    let graveyard = Arc::new(Mutex::new(Vec::new()));
    let shared = Arc::new(OnceCell::new());
    let published = shared.clone();
    thread::Builder::new()
        .name(match device.stream() {
            0 => format!("ex_mlx_{}", device.name()),
            n => format!("ex_mlx_{}_{n}", device.name()),
        })
        .spawn(move || {
            ON_WORKER.with(|w| w.set(true));
            ahead::bind(device.kind());
            let in_mlx = exit::new_worker_flag();
            let stream = exit::in_mlx(&in_mlx, || {
                let make = || {
                    let stream = worker_stream(device);
                    // MLX makes its allocator, scheduler and stream objects
                    // now, so the exit handler registered after this runs
                    // before their destructors (crate::exit)
                    mlx_rs::with_stream(&stream, make_mlx_objects);
                    stream
                };
                match device.kind() {
                    // MLX's CPU stream thread, which the first evaluation
                    // starts, is to be a batch thread (see below)
                    Kind::Cpu => as_batch_thread(make),
                    Kind::Gpu => make(),
                }
            });
            exit::register();
            if callers_may_run(device) {
                let _ = published.set(Shared {
                    running: Mutex::new(()),
                    stream: SharedStream(stream.clone()),
                    in_mlx: exit::new_flag(),
                    job_running: AtomicBool::new(false),
                });
            }
            let shared = published.get();
            if let Some(shared) = shared {
                set_mlx_default_stream(&shared.stream.0);
            }
            mlx_rs::with_stream(&stream, || {
                let mut extra = std::time::Duration::ZERO;
                loop {
                    let (job, waited) = next_job(&jobs, &in_mlx, shared, extra);
                    let Some(job) = job else {
                        break;
                    };
                    extra = next_extra_poll(waited, extra);
                    let _running = shared.map(|shared| locked(&shared.running));
                    // (counted once `running` is held: a caller holding it
                    // and finding no job unstarted knows that none is
                    // queued or running, see `run_on_caller`)
                    started.fetch_sub(1, Ordering::AcqRel);
                    if let Some(shared) = shared {
                        shared.job_running.store(true, Ordering::Release);
                    }
                    exit::in_mlx(&in_mlx, || {
                        let busy = crate::wait::Busy::running_mlx_work();
                        job();
                        drop(busy);
                        done.fetch_sub(1, Ordering::AcqRel);
                        // start evaluating what was built (crate::ahead)
                        // once a batch of results is waiting, queued jobs
                        // or not: the caller may issue ops as fast as they
                        // are built
                        ahead::evaluate(ahead::BATCH);
                    });
                    if let Some(shared) = shared {
                        shared.job_running.store(false, Ordering::Release);
                    }
                }
            });
        })
        .map_err(|e| format!("could not start the {} worker thread: {e}", device.name()))?;
    Ok(Worker {
        queue,
        backlog,
        graveyard,
        unstarted,
        burials: Arc::new(AtomicUsize::new(0)),
        shared,
    })
}

/// Runs `work` with this thread under Linux's `SCHED_BATCH` policy, then
/// restores its own: threads that `work` starts inherit the policy (glibc's
/// threads start with their creator's policy).
///
/// A CPU worker runs its first evaluation this way, so MLX's stream thread
/// (`scheduler::StreamThread`, which MLX starts on the stream's first task) is
/// a batch thread. MLX queues each op's kernel as a task of its own for that
/// thread and wakes it for every one; an ordinary thread woken on the
/// worker's core preempts the worker at once, so an evaluation of a few ops
/// became a context switch per task (a read of `add |> sum` about five). A
/// batch thread does not preempt on waking: the worker queues the whole
/// graph, then waits, and the stream thread runs the tasks in one go
/// (docs/decisions/0003-mlx-cpu-stream-thread-as-batch-thread.md). Its
/// share of the CPU is unchanged.
#[cfg(target_os = "linux")]
fn as_batch_thread<T>(work: impl FnOnce() -> T) -> T {
    // SAFETY: pid 0 is the calling thread.
    let own = unsafe { libc::sched_getscheduler(0) };
    let changed = own == libc::SCHED_OTHER && set_own_policy(libc::SCHED_BATCH);
    let result = work();
    if changed {
        set_own_policy(own);
    }
    result
}

/// Sets the calling thread's scheduling policy (a non-real-time one: the
/// priority is 0); whether it took. No privilege is needed to move between
/// SCHED_OTHER and SCHED_BATCH, but a sandbox may forbid it.
#[cfg(target_os = "linux")]
fn set_own_policy(policy: libc::c_int) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid `sched_param`
    // for the call; on failure nothing changes.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn as_batch_thread<T>(work: impl FnOnce() -> T) -> T {
    work()
}

/// Makes and evaluates one array on this thread's stream, so that MLX has
/// made the objects it evaluates with (an error is left to the first job
/// to meet).
fn make_mlx_objects() {
    let one = mlx_rs::Array::from_f32(1.0);
    let _ = mlx_rs::ops::add(&one, &one).and_then(|sum| sum.eval());
}

/// How long an idle worker polls its queue before it sleeps. Small ops come
/// in bursts (one process building a graph op by op); polling briefly saves
/// the wake-up of a sleeping thread on each of them (on a virtual machine,
/// waking a thread whose core went idle costs tens of microseconds). It
/// polls only while the machine has a core to spare (crate::wait).
const POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// What a worker runs before it blocks for want of jobs, set once with
/// [`set_before_sleep`]; `true` when it did something.
static BEFORE_SLEEP: OnceCell<fn() -> bool> = OnceCell::new();

/// Sets what every worker runs before it blocks for want of jobs (the NIF
/// drops there the references its jobs left for a batch:
/// `ex_mlx::tensor::release_later`). Only the first call sets it.
pub fn set_before_sleep(hook: fn() -> bool) -> bool {
    BEFORE_SLEEP.set(hook).is_ok()
}

/// Whether this thread is a worker.
pub fn on_worker() -> bool {
    ON_WORKER.with(|w| w.get())
}

/// The next job, polling for [`POLL`] before blocking; `None` when every
/// sender is gone. Before it blocks, it starts evaluating whatever results
/// were built and not read (crate::ahead), however few, and runs the hook
/// of [`set_before_sleep`]. After those it goes on polling for `extra` (see
/// [`next_extra_poll`]); it returns how long it waited.
fn next_job(
    jobs: &mpsc::Receiver<Job>,
    in_mlx: &AtomicBool,
    shared: Option<&Shared>,
    extra: std::time::Duration,
) -> (Option<Job>, std::time::Duration) {
    let started = std::time::Instant::now();
    let mut next = None;
    let mut poll = |limit| {
        crate::wait::spin_until(limit, || match jobs.try_recv() {
            Ok(job) => {
                next = Some(Some(job));
                true
            }
            Err(mpsc::TryRecvError::Disconnected) => {
                next = Some(None);
                true
            }
            Err(mpsc::TryRecvError::Empty) => false,
        })
    };
    if !poll(POLL) {
        let _running = shared.map(|shared| locked(&shared.running));
        let (evaluating, released) = exit::in_mlx(in_mlx, || {
            let evaluating = ahead::evaluate(1);
            (evaluating, BEFORE_SLEEP.get().is_some_and(|hook| hook()))
        });
        drop(_running);
        let again = if evaluating || released {
            extra.max(POLL)
        } else {
            extra
        };
        if !again.is_zero() {
            poll(again);
        }
    }
    let job = next.unwrap_or_else(|| jobs.recv().ok());
    (job, started.elapsed())
}

/// The longest an idle worker polls beyond [`POLL`].
const MAX_EXTRA_POLL: std::time::Duration = std::time::Duration::from_micros(1000);

/// How long to poll beyond [`POLL`] next, after waiting `waited` for the
/// last job with `extra` as the extra poll: a caller that comes back every
/// few hundred microseconds (a loop with some Elixir work, or a
/// collection, between compiled calls) finds the worker still polling
/// instead of asleep, whose wake-up would be much of a short call's time
/// (docs/decisions/0002-worker-hand-off-and-waits.md). After a wait of up
/// to half [`MAX_EXTRA_POLL`], the worker polls twice that wait in all;
/// jobs back to back (a call's own) keep the extra poll; a longer wait
/// ends it (an idle VM does not spin).
fn next_extra_poll(waited: std::time::Duration, extra: std::time::Duration) -> std::time::Duration {
    if waited <= POLL {
        extra
    } else if waited > MAX_EXTRA_POLL / 2 {
        std::time::Duration::ZERO
    } else {
        (waited * 2).saturating_sub(POLL).min(MAX_EXTRA_POLL)
    }
}

/// Queues `job` on the worker of `device`; returns how many jobs are now
/// queued or running there, this one included.
pub fn submit(device: Device, job: Job) -> Result<usize> {
    if device.stream() == 0 {
        let worker = WORKERS[default_index(device)]
            .get_or_init(|| start(device))
            .as_ref()
            .map_err(|message| Error::Device(message.clone()))?;
        return queue(worker, device, job);
    }
    let worker = streams().get(&device).cloned().ok_or_else(|| {
        Error::Device(format!(
            "there is no {}: ExMLX.Stream.new/1 makes streams",
            device.describe()
        ))
    })?;
    queue(&worker, device, job)
}

fn queue(worker: &Worker, device: Device, job: Job) -> Result<usize> {
    let backlog = worker.backlog.fetch_add(1, Ordering::AcqRel) + 1;
    worker.unstarted.fetch_add(1, Ordering::AcqRel);
    worker.queue.send(job).map_err(|_| {
        worker.backlog.fetch_sub(1, Ordering::AcqRel);
        worker.unstarted.fetch_sub(1, Ordering::AcqRel);
        Error::Internal(format!("the {} worker has stopped", device.describe()))
    })?;
    Ok(backlog)
}

/// Drops `array` on the worker of `device` (at once when called on a worker
/// thread).
///
/// A tensor's last reference usually goes away on a scheduler thread, when
/// the garbage collector frees the term. Its array's memory was allocated on
/// the worker, and freeing it on another thread contends for the C
/// allocator's lock with the worker's own allocations (a futex wake-up on
/// each collision, seen in profiles of graph building). Released arrays wait
/// here, and the worker drops them in one batch.
pub fn release(device: Device, array: mlx_rs::Array) {
    if on_worker() || on_caller() {
        return drop(array);
    }
    if exit::exiting() {
        // (no worker will run again: crate::exit)
        return std::mem::forget(array);
    }
    let worker = if device.stream() == 0 {
        match WORKERS[default_index(device)].get() {
            Some(Ok(worker)) => worker,
            _ => return drop(array),
        }
    } else {
        match streams().get(&device).cloned() {
            Some(worker) => return bury(&worker, device, array),
            None => return drop(array),
        }
    };
    bury(worker, device, array)
}

/// Drops `array` on this thread: for an array made on it (see [`release`]
/// for arrays a worker made). Kept, not dropped, once the VM exits, as
/// [`release`] keeps it (crate::exit).
pub fn drop_at_once(array: mlx_rs::Array) {
    if exit::exiting() {
        return std::mem::forget(array);
    }
    drop(array)
}

fn bury(worker: &Worker, device: Device, array: mlx_rs::Array) {
    let mut graves = locked(&worker.graveyard);
    let first = graves.is_empty();
    graves.push(array);
    drop(graves);
    // the first array of a batch sends the worker the job that drops them all
    if first {
        let graveyard = worker.graveyard.clone();
        let burials = worker.burials.clone();
        let job: Job = Box::new(move || {
            burials.fetch_sub(1, Ordering::AcqRel);
            let dead = std::mem::take(&mut *locked(&graveyard));
            drop(dead);
        });
        worker.burials.fetch_add(1, Ordering::AcqRel);
        if queue(worker, device, job).is_err() {
            worker.burials.fetch_sub(1, Ordering::AcqRel);
            locked(&worker.graveyard).clear();
        }
    }
}

/// Queues a job that keeps `device`'s worker busy until something is sent
/// on the channel returned (for tests).
#[cfg(test)]
fn hold(device: Device) -> mpsc::Sender<()> {
    let (go, wait) = mpsc::channel::<()>();
    submit(
        device,
        Box::new(move || {
            let _ = wait.recv();
        }),
    )
    .expect("a job queued");
    go
}

/// Arrays waiting in `device`'s graveyard (for tests).
#[cfg(test)]
fn buried(device: Device) -> usize {
    let worker = streams().get(&device).cloned().expect("a stream's worker");
    let count = locked(&worker.graveyard).len();
    count
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// On a worker's thread: waits until MLX has finished the work queued on
/// that worker's stream (`mlx_synchronize`). Queued as a job, it runs after
/// every job queued before it.
pub fn synchronize_own_stream() -> Result<()> {
    let stream = mlx_rs::Stream::thread_local_or_default();
    // SAFETY: `stream` is the worker's own stream, alive for this call;
    // mlx-c reports a C++ exception as a non-zero status.
    let status = unsafe { mlx_sys::mlx_synchronize(stream.as_ptr()) };
    if status == 0 {
        Ok(())
    } else {
        Err(Error::Internal("mlx_synchronize failed".into()))
    }
}

/// Runs `work` on the worker of `device` and waits for its result (a blocking
/// call, for Rust callers such as tests; the NIF never blocks this way).
pub fn run_blocking<T, F>(device: Device, work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let (done, result) = mpsc::sync_channel(1);
    submit(
        device,
        Box::new(move || {
            let _ = done.send(run_caught(work));
        }),
    )?;
    result
        .recv()
        .map_err(|_| Error::Internal("the worker dropped a job".into()))?
}

/// Runs `work`, turning a panic into an [`Error::Internal`].
pub fn run_caught<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(Error::Internal(format!(
            "panic in the MLX worker: {message}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_has_a_worker_of_its_own() {
        let stream = new_stream(Device::Cpu).unwrap();
        assert_eq!((stream.kind(), stream.stream() > 0), (Kind::Cpu, true));
        assert!(stream_exists(stream));
        let a = run_blocking(stream, || Ok(thread::current().id())).unwrap();
        let b = run_blocking(Device::Cpu, || Ok(thread::current().id())).unwrap();
        assert_ne!(a, b);
        let sum = run_blocking(stream, || {
            let x = mlx_rs::Array::from_slice(&[1.0f32, 2.0], &[2]);
            let s = mlx_rs::ops::sum(&x, None)?;
            synchronize_own_stream()?;
            Ok(s.item_exact::<f32>())
        })
        .unwrap();
        assert_eq!(sum, 3.0);
        let unknown = Device::Cpu.on_stream(u32::MAX);
        assert!(!stream_exists(unknown));
        let e = submit(unknown, Box::new(|| {})).unwrap_err();
        assert!(e.to_string().contains("there is no cpu stream 4294967295"));
    }

    /// The policy of thread `tid` of this process (`sched_getscheduler`).
    #[cfg(target_os = "linux")]
    fn policy(tid: i32) -> libc::c_int {
        // SAFETY: any tid may be asked; an unknown one gives -1.
        unsafe { libc::sched_getscheduler(tid) }
    }

    /// This process's threads named `name`.
    #[cfg(target_os = "linux")]
    fn threads_named(name: &str) -> Vec<i32> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                let comm = std::fs::read_to_string(path.join("comm")).ok()?;
                let tid = path.file_name()?.to_str()?.parse().ok()?;
                (comm.trim_end() == name).then_some(tid)
            })
            .collect()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_cpu_streams_thread_is_a_batch_thread_and_the_worker_is_not() {
        // (where a sandbox forbids changing a thread's policy, the worker
        // leaves it as it is: nothing to check then)
        let permitted = thread::spawn(|| set_own_policy(libc::SCHED_BATCH))
            .join()
            .unwrap();
        if !permitted {
            eprintln!("SCHED_BATCH is not permitted here: not checked");
            return;
        }
        // SAFETY: gettid has no arguments and cannot fail.
        let worker = run_blocking(Device::Cpu, || Ok(unsafe { libc::gettid() })).unwrap();
        assert_eq!(policy(worker), libc::SCHED_OTHER);
        // MLX's stream thread (and any thread it started) carries the name
        // of the worker that started it
        let started: Vec<i32> = threads_named("ex_mlx_cpu")
            .into_iter()
            .filter(|&tid| tid != worker)
            .collect();
        assert!(!started.is_empty(), "no thread started by the CPU worker");
        for tid in started {
            assert_eq!(policy(tid), libc::SCHED_BATCH, "thread {tid}");
        }
    }

    #[test]
    fn jobs_run_on_the_workers_thread() {
        let a = run_blocking(Device::Cpu, || Ok(thread::current().id())).unwrap();
        let b = run_blocking(Device::Cpu, || Ok(thread::current().id())).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, thread::current().id());
    }

    #[test]
    fn a_graph_built_on_the_worker_evaluates_there() {
        let sum = run_blocking(Device::Cpu, || {
            let a = mlx_rs::Array::from_slice(&[1.0f32, 2.0], &[2]);
            let s = mlx_rs::ops::add(&a, &a)?;
            s.eval()?;
            Ok(s.as_slice::<f32>().to_vec())
        })
        .unwrap();
        assert_eq!(sum, vec![2.0, 4.0]);
    }

    #[test]
    fn released_arrays_are_dropped_by_their_worker() {
        let stream = new_stream(Device::Cpu).unwrap();
        let make = || run_blocking(stream, || Ok(mlx_rs::Array::from_f32(1.0))).unwrap();
        // the worker busy until `go` is sent: a released array waits for it
        let go = hold(stream);
        release(stream, make_on_this_thread());
        release(stream, make_on_this_thread());
        assert_eq!(buried(stream), 2);
        go.send(()).unwrap();
        // jobs run in order: the drop came before this one
        run_blocking(stream, || Ok(())).unwrap();
        assert_eq!(buried(stream), 0);
        // released on the worker's own thread: dropped at once
        let array = make();
        run_blocking(stream, move || {
            release(stream, array);
            Ok(())
        })
        .unwrap();
        assert_eq!(buried(stream), 0);
    }

    fn make_on_this_thread() -> mlx_rs::Array {
        mlx_rs::Array::from_slice(&[1.0f32, 2.0], &[2])
    }

    #[test]
    fn an_idle_worker_polls_longer_after_short_waits_only() {
        let us = std::time::Duration::from_micros;
        // after a wait of 200 µs: 400 µs in all
        assert_eq!(POLL + next_extra_poll(us(200), us(0)), us(400));
        assert_eq!(POLL + next_extra_poll(us(500), us(0)), us(1000));
        // jobs back to back keep it; a long wait ends it
        assert_eq!(next_extra_poll(us(10), us(350)), us(350));
        assert_eq!(next_extra_poll(POLL, us(350)), us(350));
        assert_eq!(next_extra_poll(us(501), us(350)), us(0));
        assert_eq!(next_extra_poll(us(5_000_000), us(350)), us(0));
        assert_eq!(next_extra_poll(us(10), us(0)), us(0));
    }

    #[test]
    fn a_panic_becomes_an_error_and_the_worker_lives_on() {
        let err = run_blocking::<(), _>(Device::Cpu, || panic!("boom")).unwrap_err();
        assert_eq!(err.to_string(), "panic in the MLX worker: boom");
        assert_eq!(run_blocking(Device::Cpu, || Ok(7)).unwrap(), 7);
    }

    /// Evaluation ahead of reads (crate::ahead), on workers of their own.
    mod ahead {
        use super::*;
        use crate::ahead::{enabled, evaluate, is_available, note, set_enabled};
        use mlx_rs::Array;

        // Each test uses a stream of its own: a worker of its own, whose
        // thread's record no other test touches. The setting is global: the
        // tests that change it run one at a time.
        static SETTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

        fn setting() -> std::sync::MutexGuard<'static, ()> {
            SETTING.lock().unwrap_or_else(|p| p.into_inner())
        }

        #[test]
        fn an_idle_worker_starts_evaluating_the_newest_result() {
            let _one_at_a_time = setting();
            let was = enabled(Kind::Cpu);
            set_enabled(Kind::Cpu, true);
            let stream = new_stream(Device::Cpu).unwrap();
            let (before, after, value) = run_blocking(stream, || {
                let a = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
                let b = mlx_rs::ops::add(&a, &a)?;
                let c = mlx_rs::ops::multiply(&b, &b)?;
                note(&b);
                note(&c);
                let before = is_available(&c);
                // fewer results than asked for: nothing happens
                assert!(!evaluate(3));
                assert!(evaluate(2));
                crate::worker::synchronize_own_stream()?;
                Ok((before, is_available(&c), c.as_slice::<f32>().to_vec()))
            })
            .unwrap();
            set_enabled(Kind::Cpu, was);
            assert_eq!((before, after), (false, true));
            assert_eq!(value, vec![4.0, 16.0, 36.0]);
        }

        #[test]
        fn nothing_is_recorded_while_off_nor_off_a_worker() {
            let _one_at_a_time = setting();
            let stream = new_stream(Device::Cpu).unwrap();
            let evaluated = run_blocking(stream, || {
                let a = Array::from_slice(&[1.0f32], &[1]);
                let b = mlx_rs::ops::add(&a, &a)?;
                let was = enabled(Kind::Cpu);
                set_enabled(Kind::Cpu, false);
                note(&b);
                let evaluated = evaluate(1) || is_available(&b);
                set_enabled(Kind::Cpu, was);
                Ok(evaluated)
            })
            .unwrap();
            assert!(!evaluated);
            // this thread is no worker: no device kind, nothing kept
            let a = Array::from_slice(&[1.0f32], &[1]);
            note(&a);
            assert!(!evaluate(1));
        }
    }
}
