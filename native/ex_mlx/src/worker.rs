//! The thread model: one worker thread per device owns that device's MLX stream
//! and runs every MLX call for tensors on it.
//!
//! Why: MLX 0.32 binds a stream to the thread that created it. A graph built on
//! one thread and evaluated on another fails with "There is no Stream(cpu, 0) in
//! current thread" (shared/design.md §4). BEAM processes migrate between
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
//!    MLX takes (a large matmul, an eval).
//!
//! The price is one cross-thread hand-off per call (queue, wake the worker,
//! `enif_send`, wake the caller); `bench/` measures it. Workers start on first
//! use; a device MLX cannot run on gives an error naming it instead of a worker.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread;

use once_cell::sync::OnceCell;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{Encoder, Env, LocalPid, Term};

use crate::device::Device;
use crate::error::{Error, Result};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Worker {
    queue: mpsc::Sender<Job>,
}

static WORKERS: [OnceCell<std::result::Result<Worker, String>>; 2] =
    [OnceCell::new(), OnceCell::new()];

fn start(device: Device) -> std::result::Result<Worker, String> {
    if !device.is_available() {
        return Err(format!(
            "the {} device is not available in this MLX build (MLX {}); use :cpu",
            device.name(),
            crate::MLX_VERSION
        ));
    }
    let (queue, jobs) = mpsc::channel::<Job>();
    thread::Builder::new()
        .name(format!("ex_mlx_{}", device.name()))
        .spawn(move || {
            let stream = mlx_rs::Stream::new_with_device(&device.to_mlx());
            mlx_rs::with_stream(&stream, || {
                for job in jobs {
                    job();
                }
            });
        })
        .map_err(|e| format!("could not start the {} worker thread: {e}", device.name()))?;
    Ok(Worker { queue })
}

/// Queues `job` on the worker of `device`.
pub fn submit(device: Device, job: Job) -> Result<()> {
    let worker = WORKERS[device.index()]
        .get_or_init(|| start(device))
        .as_ref()
        .map_err(|message| Error::Device(message.clone()))?;
    worker
        .queue
        .send(job)
        .map_err(|_| Error::Internal(format!("the {} worker has stopped", device.name())))
}

rustler::atoms! { ok, error }

/// A value the worker sends back; boxed so every op can return its own kind.
pub type Reply = Box<dyn Encoder + Send>;

/// Runs `work` on the worker of `device` and sends `{tag, {:ok, value}}` or
/// `{tag, {:error, {kind, message}}}` to the calling process.
pub fn reply<T, F>(env: Env, tag: Term, device: Device, work: F) -> Result<()>
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let caller = env.pid();
    let mut message_env = OwnedEnv::new();
    let tag = message_env.save(tag);
    submit(
        device,
        Box::new(move || {
            let result = run_caught(work);
            send(&mut message_env, &caller, &tag, result);
        }),
    )
}

/// Runs `work`, turning a panic into an [`Error::Internal`].
pub fn run_caught<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(Error::Internal(format!("panic in the MLX worker: {message}")))
    })
}

fn send<T: Encoder>(env: &mut OwnedEnv, to: &LocalPid, tag: &SavedTerm, result: Result<T>) {
    // A send fails only when the caller has exited; then nobody wants the reply.
    let _ = env.send_and_clear(to, |env| {
        let outcome = match &result {
            Ok(value) => (ok(), value).encode(env),
            Err(e) => (error(), e).encode(env),
        };
        (tag.load(env), outcome).encode(env)
    });
}
