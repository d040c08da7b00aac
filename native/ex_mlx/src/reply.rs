//! How an asynchronous NIF queues work and how its result reaches the caller
//! (the thread model itself is described in `ex_mlx_core::worker`).
//!
//! Three modes, chosen by the caller through the `tag` argument:
//!
//! * a reference: the worker sends `{tag, {:ok, value} | {:error, reason}}`
//!   when done and the caller waits for it (`ExMLX.Call.run/1`);
//! * `{:deferred, type}` (or `{:deferred, :any}`, which keeps MLX's
//!   result type), for operations producing one tensor: the NIF
//!   returns `{:deferred, tensor, device}` at once, the tensor being filled
//!   by the worker (cast to `type` if MLX produced another). Nothing is sent
//!   back; an error is stored in the tensor and raised where it is used. The
//!   Nx backend uses this: Nx knows every result's shape and type, so only
//!   reading data has to wait, and an op costs no thread round trip;
//! * `{:deferred, type, shape}`: the same, for results whose type and shape
//!   the caller predicted by MLX's own rules (`ExMLX`'s element-wise
//!   arithmetic); the worker checks the prediction instead of casting.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ex_mlx_core::device::Device;
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::{wait, worker};
use mlx_rs::Dtype;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{Atom, Encoder, Env, LocalPid, NifResult, Term};

use crate::args::Tag;
use crate::tensor::{NewTensor, Results, Tensor, TensorRef};
use crate::term::{error_tuple, DeviceTerm, ErrorTerm};

rustler::atoms! { ok, error, deferred, any, collect }

/// Where a reply goes: the calling process and the tag it waits for. Built on
/// the scheduler (it copies the tag), used on a worker thread.
pub struct Replier {
    env: OwnedEnv,
    caller: LocalPid,
    tag: SavedTerm,
}

impl Replier {
    pub fn new(env: Env, tag: Term) -> Replier {
        let owned = OwnedEnv::new();
        let tag = owned.save(tag);
        Replier {
            env: owned,
            caller: env.pid(),
            tag,
        }
    }

    /// Sends `{tag, {:ok, value}}` or `{tag, {:error, {kind, message}}}`.
    /// Must run on a non-BEAM thread (a worker).
    pub fn send<T: Encoder>(mut self, result: Result<T>) {
        let tag = self.tag;
        // A send fails only when the caller has exited; nobody wants the reply then.
        let _ = self.env.send_and_clear(&self.caller, |env| {
            let outcome = match &result {
                Ok(value) => (ok(), value).encode(env),
                Err(e) => (error(), ErrorTerm(e.clone())).encode(env),
            };
            (tag.load(env), outcome).encode(env)
        });
    }
}

/// What an asynchronous NIF returns: [`Submitted`], or `{:error, reason}`
/// for arguments it refused.
pub type AsyncResult = NifResult<Submitted>;

/// What a NIF returns once its work is queued.
pub enum Submitted {
    /// `:ok`: the reply will come as a message.
    Queued,
    /// `{:ok, value}` or `{:error, reason}`: the worker finished while the
    /// NIF waited for it (see [`QUICK_WAIT`]); no message follows.
    /// (Unwind-safe: encoding a finished result leaves no state behind.)
    Done(AssertUnwindSafe<Box<dyn Encoder + Send>>),
    /// `{:deferred, tensor, device}`: the tensor fills in the background.
    Deferred(TensorRef),
}

/// `{:ok, value}` and `{:deferred, tensor, device}` get a third or fourth
/// element, `:collect`, when a garbage-collection hint is due
/// (`crate::collect`); `ExMLX.Call` then collects the caller's garbage.
impl Encoder for Submitted {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self {
            Submitted::Queued => ok().encode(env),
            Submitted::Done(reply) => {
                let term = reply.0.encode(env);
                match term.decode::<(Atom, Term)>() {
                    Ok((tag, value)) if tag == ok() && ex_mlx_core::collect::take_hint() => {
                        (ok(), value, collect()).encode(env)
                    }
                    _ => term,
                }
            }
            Submitted::Deferred(t) if ex_mlx_core::collect::take_hint() => {
                (deferred(), t, DeviceTerm(t.device), collect()).encode(env)
            }
            Submitted::Deferred(t) => (deferred(), t, DeviceTerm(t.device)).encode(env),
        }
    }
}

/// A result computed on the calling thread, returned as `{:ok, value}` like
/// one the worker finished within the quick wait. For a reference tag only:
/// a deferred tag gets the value back, and the caller queues the work.
pub fn done_at_once<T: Encoder + Send + 'static>(
    tag: Tag,
    value: T,
) -> std::result::Result<Submitted, T> {
    if tag.0.get_type() == rustler::TermType::Ref {
        Ok(Submitted::Done(AssertUnwindSafe(Box::new(Reply(Ok(
            value,
        ))))))
    } else {
        Err(value)
    }
}

/// The reply for a tensor computed on the calling thread (a computed CPU
/// array, `crate::op`): `{:deferred, tensor, device}` for a deferred tag
/// whose type (and shape) the array already has, `{:ok, tensor}` for a
/// reference tag; `None` otherwise (a cast is MLX work: the caller queues
/// the op as usual).
pub fn computed_at_once(tag: Tag, array: mlx_rs::Array, device: Device) -> Option<Submitted> {
    match expected_result(tag.0).ok()? {
        Some(expected) if expected.met_by(&array) => Some(Submitted::Deferred(
            Tensor::computed_on_caller(array, device),
        )),
        Some(_) => None,
        None => {
            let tensor = NewTensor::Existing(Tensor::computed_on_caller(array, device));
            done_at_once(tag, Results::One(tensor)).ok()
        }
    }
}

/// The most elements a call run on the calling thread may have MLX
/// compute (see [`deferred_on_caller`]): element-wise ops, reductions,
/// creations and rearrangements cost MLX's CPU kernels about a nanosecond
/// an element or less, so a NIF on a normal scheduler that runs that much
/// returns well within a millisecond.
pub const CALLER_WORK: u64 = 1 << 16;

/// [`submit`] for a read of `tensor` (`read(&tensor)`, on a reference
/// tag): on the calling thread when evaluating `tensor` computes at most
/// [`CALLER_WORK`] elements (`Tensor::work_to_evaluate`) and
/// `ex_mlx_core::worker::run_on_caller` allows it, replying `{:ok, value}`
/// or the error as the worker would; otherwise queued.
pub fn submit_read<T, F>(env: Env, tag: Tag, tensor: TensorRef, read: F) -> AsyncResult
where
    T: Encoder + Send + 'static,
    F: FnOnce(&TensorRef) -> Result<T> + Send + 'static,
{
    let device = tensor.device;
    let small = tensor
        .work_to_evaluate()
        .is_some_and(|work| work <= CALLER_WORK);
    let work = move || read(&tensor);
    if !small || tag.0.get_type() != rustler::TermType::Ref {
        return submit(env, tag, device, work);
    }
    let started = Instant::now();
    match worker::run_on_caller(device, work) {
        Ok(result) => {
            charge_for(env, started);
            Ok(Submitted::Done(AssertUnwindSafe(Box::new(Reply(result)))))
        }
        Err(work) => submit(env, tag, device, work),
    }
}

/// A one-result op (`work`, on a deferred tag) built on the calling thread
/// when `ex_mlx_core::worker::run_on_caller` allows it and evaluating its
/// inputs and reading them and its result computes at most
/// [`CALLER_WORK`] elements: `input_work` counts the first two (the
/// caller adds them up from `Tensor::work_to_evaluate` and
/// `Tensor::elements`), the result's are added here. The tensor, not
/// evaluated (MLX evaluates it with what reads it, as it would the
/// worker's), records its work, so that a read of it, or a later op on it,
/// can run on the calling thread too. `Err(work)`, unused, otherwise.
fn deferred_on_caller<F>(
    env: Env,
    tag: Tag,
    device: Device,
    input_work: u64,
    work: F,
) -> std::result::Result<Submitted, F>
where
    F: FnOnce() -> Result<Results>,
{
    let expected = match expected_result(tag.0) {
        Ok(Some(expected)) => expected,
        _ => return Err(work),
    };
    let type_ok = expected
        .dtype()
        .is_none_or(|dtype| ex_mlx_core::device::check_dtype(dtype, device).is_ok());
    if !type_ok || input_work > CALLER_WORK {
        return Err(work);
    }
    let started = Instant::now();
    let result = worker::run_on_caller(device, work)?;
    charge_for(env, started);
    let tensor = Tensor::pending(device);
    fill_deferred(&tensor, result, &expected, Some(input_work));
    Ok(Submitted::Deferred(tensor))
}

/// Fills `target`, a deferred op's tensor, with the op's `result` made
/// what the tag `expected`; a result of an op whose inputs' work was
/// `input_work` records its work (see [`deferred_on_caller`]).
fn fill_deferred<T: 'static>(
    target: &Tensor,
    result: Result<T>,
    expected: &Expected,
    input_work: Option<u64>,
) {
    let result = result
        .and_then(into_array)
        .and_then(|array| expected.apply(array));
    let work = match &result {
        Ok(array) => {
            // (on the worker: crate::ahead; elsewhere nothing)
            ex_mlx_core::ahead::note(array);
            input_work.and_then(|input| work_with(input, array))
        }
        Err(_) => None,
    };
    target.fill_with_work(result, work);
}

/// The work of evaluating `array`, built from inputs whose work is
/// `input_work` (see [`deferred_on_caller`]): `None` past [`CALLER_WORK`],
/// which no calling thread takes on.
fn work_with(input_work: u64, array: &mlx_rs::Array) -> Option<u64> {
    input_work
        .checked_add(array.size() as u64)
        .filter(|&work| work <= CALLER_WORK)
}

/// Charges the calling process for the time since `started` that its NIF
/// held the scheduler (a timeslice is about 1 ms), as a NIF that waited in
/// vain for the worker is charged (see `queue`).
pub fn charge_for(env: Env, started: Instant) {
    let percent = (started.elapsed().as_micros() / 10).min(100) as i32;
    if percent > 0 {
        rustler::schedule::consume_timeslice(env, percent);
    }
}

/// What a deferred result must be.
enum Expected {
    /// `{:deferred, :any}`: whatever MLX produces (for intermediate results
    /// whose type the caller does not need to know).
    Any,
    /// `{:deferred, type}`: cast to `type` if MLX produced another (Nx
    /// decides result types, and they can differ from MLX's).
    Cast(Dtype),
    /// `{:deferred, type, shape}`: exactly this type and shape, as the caller
    /// predicted them from MLX's rules; anything else is an `:internal` error
    /// (a wrong prediction must never pass unnoticed).
    Exact(Dtype, Vec<i32>),
}

impl Expected {
    fn dtype(&self) -> Option<Dtype> {
        match self {
            Expected::Any => None,
            Expected::Cast(d) | Expected::Exact(d, _) => Some(*d),
        }
    }

    /// Whether `array` is the result as it is (no cast, no check to fail).
    fn met_by(&self, array: &mlx_rs::Array) -> bool {
        match self {
            Expected::Any => true,
            Expected::Cast(dtype) => array.dtype() == *dtype,
            Expected::Exact(dtype, shape) => array.dtype() == *dtype && array.shape() == shape,
        }
    }

    fn apply(&self, array: mlx_rs::Array) -> Result<mlx_rs::Array> {
        match self {
            Expected::Any => Ok(array),
            Expected::Cast(cast) if array.dtype() == *cast => Ok(array),
            Expected::Cast(cast) => Ok(array.as_dtype(*cast)?),
            Expected::Exact(dtype, shape) if array.dtype() == *dtype && array.shape() == shape => {
                Ok(array)
            }
            Expected::Exact(dtype, shape) => Err(Error::Internal(format!(
                "ExMLX predicted shape {} and type {}, MLX produced shape {} and type {}",
                ex_mlx_core::dtype::display_shape(shape),
                ex_mlx_core::dtype::display(*dtype),
                ex_mlx_core::dtype::display_shape(array.shape()),
                ex_mlx_core::dtype::display(array.dtype()),
            ))),
        }
    }
}

/// `Some(expected result)` when `tag` asks for deferred mode.
fn expected_result(tag: Term) -> Result<Option<Expected>> {
    if let Ok((atom, type_)) = tag.decode::<(Atom, Term)>() {
        if atom == deferred() && type_.decode::<Atom>().is_ok_and(|a| a == any()) {
            return Ok(Some(Expected::Any));
        }
        if atom == deferred() {
            return Ok(Some(Expected::Cast(crate::term::decode_type(
                "tag", type_,
            )?)));
        }
    }
    if let Ok((atom, type_, shape)) = tag.decode::<(Atom, Term, Term)>() {
        if atom == deferred() {
            let dtype = crate::term::decode_type("tag", type_)?;
            let shape = crate::term::decode_shape("tag", shape)?;
            return Ok(Some(Expected::Exact(dtype, shape)));
        }
    }
    Ok(None)
}

/// The bytes of the result `tag` predicts (`{:deferred, type, shape}`);
/// `None` for other tags or a size past `usize`.
pub fn predicted_bytes(tag: Term) -> Option<usize> {
    match expected_result(tag).ok()?? {
        Expected::Exact(dtype, shape) => ex_mlx_core::host::element_count("shape", &shape)
            .ok()?
            .checked_mul(ex_mlx_core::dtype::size_of(dtype)),
        _ => None,
    }
}

/// The array inside a tensor-producing result (deferred mode only).
fn into_array<T: 'static>(value: T) -> Result<mlx_rs::Array> {
    let any: Box<dyn Any> = Box::new(value);
    // (an op's result first: the common case)
    let any = match any.downcast::<Results>() {
        Ok(results) => match *results {
            Results::One(tensor) => return tensor.into_array(),
            Results::Many(_) => return Err(no_deferred_form()),
        },
        Err(any) => any,
    };
    match any.downcast::<NewTensor>() {
        Ok(tensor) => tensor.into_array(),
        Err(_) => Err(no_deferred_form()),
    }
}

fn no_deferred_form() -> Error {
    Error::Internal("this operation does not produce one tensor; it has no deferred form".into())
}

/// Queues `work` on `device`'s worker and returns at once `count` pending
/// tensors, which the worker fills with the work's results or, if the work
/// fails, gives each the error (see `Tensor::fill`): deferred mode for work
/// with several results (a program's outputs, `crate::program`).
pub fn pending<F>(device: Device, count: usize, work: F) -> Result<Vec<TensorRef>>
where
    F: FnOnce() -> Result<Vec<mlx_rs::Array>> + Send + 'static,
{
    let outputs: Vec<TensorRef> = (0..count).map(|_| Tensor::pending(device)).collect();
    let targets = outputs.clone();
    worker::submit(
        device,
        Box::new(move || {
            let result = worker::run_caught(|| {
                let arrays = work()?;
                if arrays.len() != count {
                    return Err(Error::Internal(format!(
                        "{} results for {count} pending tensors",
                        arrays.len()
                    )));
                }
                Ok(arrays)
            });
            match result {
                Ok(arrays) => {
                    for (t, array) in targets.iter().zip(arrays) {
                        t.fill(Ok(array));
                    }
                }
                Err(e) => {
                    for t in &targets {
                        t.fill(Err(e.clone()));
                    }
                }
            }
            crate::tensor::release_later(targets);
        }),
    )?;
    Ok(outputs)
}

/// Queues `work` on `device`'s worker, replying or filling a deferred tensor
/// as `tag` asks (see the module documentation): what every asynchronous NIF
/// returns.
pub fn submit<T, F>(env: Env, tag: Tag, device: Device, work: F) -> AsyncResult
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    queue(env, tag.0, device, None, work).map_err(error_tuple)
}

/// [`submit`] for an op of linear cost (`crate::op`), `input_work` being
/// at most how many elements evaluating its inputs and reading them
/// computes: on the calling thread when [`deferred_on_caller`] takes it,
/// otherwise queued; either way a deferred result records its work (with
/// its own elements), so that later small ops and reads of it can run on
/// the calling thread.
pub fn submit_op<F>(env: Env, tag: Tag, device: Device, input_work: u64, work: F) -> AsyncResult
where
    F: FnOnce() -> Result<Results> + Send + 'static,
{
    match deferred_on_caller(env, tag, device, input_work, work) {
        Ok(built) => Ok(built),
        Err(work) => queue(env, tag.0, device, Some(input_work), work).map_err(error_tuple),
    }
}

fn queue<T, F>(
    env: Env,
    tag: Term,
    device: Device,
    input_work: Option<u64>,
    work: F,
) -> Result<Submitted>
where
    T: Encoder + Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    if let Some(expected) = expected_result(tag)? {
        if let Some(dtype) = expected.dtype() {
            ex_mlx_core::device::check_dtype(dtype, device)?;
        }
        // (the one-result form of `pending`, without its lists: this is the
        // path of every deferred op)
        let out = Tensor::pending(device);
        let target = out.clone();
        worker::submit(
            device,
            Box::new(move || {
                fill_deferred(&target, worker::run_caught(work), &expected, input_work);
                crate::tensor::release_later([target]);
            }),
        )?;
        return Ok(Submitted::Deferred(out));
    }
    let meeting = Arc::new(Meeting::<T>::new());
    let worker_side = meeting.clone();
    let backlog = worker::submit(
        device,
        Box::new(move || {
            let result = worker::run_caught(work);
            // (a caller that waited for the worker finds no reference of
            // earlier jobs still held: crate::tensor::release_later)
            crate::tensor::release_batch();
            worker_side.finish(result)
        }),
    )?;
    // Wait only when the worker has at most a few jobs (a deferred op or two
    // ahead is common and quick), and only one NIF at a time: a waiting NIF
    // holds its scheduler (it spins or sleeps, the scheduler does no other
    // work), and several of them would keep every other process waiting.
    // When every core is busy it waits longer, asleep, and behind more jobs
    // (see QUICK_WAIT_SATURATED).
    let saturated = wait::saturated();
    let (most_jobs, limit) = if saturated {
        (QUICK_BACKLOG_SATURATED, QUICK_WAIT_SATURATED)
    } else {
        (QUICK_BACKLOG, QUICK_WAIT)
    };
    let waits = backlog <= most_jobs
        && NIF_WAITING
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
    let started = Instant::now();
    let limit = if waits { limit } else { Duration::ZERO };
    // (the replier, which copies the tag, is made only if the reply will
    // have to be a message)
    let outcome = meeting.wait(limit, || Replier::new(env, tag));
    if waits {
        NIF_WAITING.store(false, Ordering::Release);
    }
    // Keep the scheduling the message would have given. A caller that gets
    // its result here would otherwise have waited in `receive`, giving its
    // scheduler to the next process: it uses up its timeslice, so it goes
    // to the back of the run queue when the NIF returns (it is back at once
    // if nothing else is waiting). Without this, 64 processes making quick
    // calls kept their schedulers for whole timeslices and a process
    // waiting for a timer missed its ticks (the fairness rows of
    // bench/suite.exs). A NIF that waited in vain is charged the time it
    // held the scheduler (a timeslice is about 1 ms).
    let percent = match outcome {
        Some(_) => 100,
        None => (started.elapsed().as_micros() / 10).min(100) as i32,
    };
    if percent > 0 {
        rustler::schedule::consume_timeslice(env, percent);
    }
    Ok(match outcome {
        Some(result) => Submitted::Done(AssertUnwindSafe(Box::new(Reply(result)))),
        None => Submitted::Queued,
    })
}

/// How long a NIF waits for an idle worker before returning `:ok` and
/// leaving the result to a message. Most calls on small tensors finish within
/// it (an eval of a small graph), and then the result comes back as the
/// NIF's return value: no message, and no wake-up of a scheduler that went
/// to sleep in `receive` (docs/decisions/0002-worker-hand-off-and-waits.md). Short
/// enough not to hold a scheduler noticeably; a NIF whose job is queued
/// behind others does not wait at all.
const QUICK_WAIT: Duration = Duration::from_micros(60);

/// How long a NIF waits, asleep, for an idle worker when every core of the
/// machine is busy (ex_mlx_core::wait): the worker's job then takes longer
/// than [`QUICK_WAIT`] to get a core, and a caller left to `receive` its
/// result idles its scheduler, which spins with `sched_yield` before it
/// sleeps (the BEAM's scheduler busy-wait) and so falls behind every
/// CPU-bound process for milliseconds. Within the 1 ms a NIF may hold a
/// normal scheduler.
const QUICK_WAIT_SATURATED: Duration = Duration::from_micros(500);

/// The most jobs (this one included) a worker may have before a NIF stops
/// waiting for it.
const QUICK_BACKLOG: usize = 2;

/// The same when every core is busy: the deferred ops a caller issued
/// before a read are then often still queued when the read comes.
const QUICK_BACKLOG_SATURATED: usize = 8;

/// Whether a NIF is waiting for a worker right now (at most one does).
static NIF_WAITING: AtomicBool = AtomicBool::new(false);

/// A meeting's states: the NIF waits for the result, spinning
/// (`WAITING`) or asleep (`PARKED`, its thread in `parked`); the worker
/// left the result (`DONE`); the NIF stopped waiting and left the replier
/// (`GONE`).
const WAITING: u8 = 0;
const PARKED: u8 = 1;
const DONE: u8 = 2;
const GONE: u8 = 3;

/// Where the worker leaves a result for a NIF that may still be waiting,
/// and the NIF, when it stops waiting, leaves the replier for the worker.
struct Meeting<T> {
    state: AtomicU8,
    result: Mutex<Option<Result<T>>>,
    replier: Mutex<Option<Replier>>,
    parked: Mutex<Option<std::thread::Thread>>,
}

fn locked<X>(slot: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Encoder> Meeting<T> {
    fn new() -> Self {
        Meeting {
            state: AtomicU8::new(WAITING),
            result: Mutex::new(None),
            replier: Mutex::new(None),
            parked: Mutex::new(None),
        }
    }

    /// The worker's side: leaves `result` for the NIF (waking it if it
    /// sleeps), or, if the NIF stopped waiting, sends it as a message with
    /// the replier it left.
    fn finish(&self, result: Result<T>) {
        *locked(&self.result) = Some(result);
        let previous = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                (state != GONE).then_some(DONE)
            });
        match previous {
            Ok(PARKED) => {
                if let Some(thread) = locked(&self.parked).take() {
                    thread.unpark();
                }
            }
            Ok(_) => {}
            // GONE: the NIF left the replier before it said so
            Err(_) => {
                let replier = locked(&self.replier).take();
                let result = locked(&self.result).take();
                if let (Some(replier), Some(result)) = (replier, result) {
                    replier.send(result);
                }
            }
        }
    }

    /// The NIF's side: the result if the worker finishes within `limit`;
    /// otherwise `None`, after leaving `replier()` for the worker to send
    /// the result with. It spins while the machine has a core to spare and
    /// sleeps otherwise (ex_mlx_core::wait).
    fn wait(&self, limit: Duration, replier: impl FnOnce() -> Replier) -> Option<Result<T>> {
        let deadline = Instant::now() + limit;
        // (while it spins, it computes blocks of a large product the worker
        // posted: ex_mlx_core::split_work)
        let finished = || {
            ex_mlx_core::split_work::help();
            self.state.load(Ordering::Acquire) != WAITING
        };
        if !(wait::spin_until(limit, finished) || self.sleep_until(deadline)) {
            *locked(&self.replier) = Some(replier());
            let stopped = self
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                    (state != DONE).then_some(GONE)
                });
            if stopped.is_ok() {
                return None;
            }
            // the worker finished meanwhile: the replier is not needed
            locked(&self.replier).take();
        }
        locked(&self.result).take()
    }

    /// Sleeps until the worker has finished or `deadline` has passed;
    /// whether it has finished.
    fn sleep_until(&self, deadline: Instant) -> bool {
        if Instant::now() >= deadline {
            return self.state.load(Ordering::Acquire) == DONE;
        }
        *locked(&self.parked) = Some(std::thread::current());
        if self
            .state
            .compare_exchange(WAITING, PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return true;
        }
        loop {
            if self.state.load(Ordering::Acquire) == DONE {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            // (a wake-up meant for an earlier meeting of this thread only
            // ends this sleep early: the loop looks again)
            std::thread::park_timeout(deadline - now);
        }
    }
}

/// `{:ok, value}` or `{:error, {kind, message}}`, returned by the NIF itself.
struct Reply<T>(Result<T>);

impl<T: Encoder> Encoder for Reply<T> {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        match &self.0 {
            Ok(value) => (ok(), value).encode(env),
            Err(e) => (error(), ErrorTerm(e.clone())).encode(env),
        }
    }
}
