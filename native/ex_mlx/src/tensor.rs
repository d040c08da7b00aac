//! The tensor resource: an MLX array, the device whose worker owns it, and its
//! shape and dtype (kept in Rust so queries need no trip to the worker).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use ex_mlx_core::device::{Device, Kind};
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::memory;
use mlx_rs::{Array, Dtype};
use rustler::{Encoder, Env, Resource, ResourceArc, Term};

use crate::term::{shape_term, show, DeviceTerm, TypeTerm};

pub struct Tensor {
    // `Array` is `Send` but not `Sync`; the mutex makes the resource shareable.
    // It is held only briefly (to clone the handle, a reference-count
    // increment); MLX work on the clone happens on the device's worker.
    state: Mutex<State>,
    // Signalled when a pending tensor gets its array (or its error).
    filled: Condvar,
    // Threads waiting on `filled` (changed only with `state` locked), so that
    // filling a tensor nobody waits for costs no futex wake-up.
    waiters: AtomicUsize,
    pub device: Device,
}

/// Where a tensor's array is.
enum State {
    /// Being computed by a deferred operation on the device's worker.
    Pending,
    Ready {
        array: Array,
        dtype: Dtype,
        shape: Vec<i64>,
        /// The array is known to be computed (made from host bytes, or
        /// evaluated by the worker): its data can be read on any thread
        /// without building or running a graph (see `evaluated_array`).
        evaluated: bool,
        /// For an array not computed, built by an op of linear cost
        /// (`crate::reply::submit_op`): at most how many elements
        /// evaluating it computes; [`UNKNOWN_WORK`] otherwise (see
        /// [`Tensor::work_to_evaluate`]).
        work: u64,
        /// The array was computed on a calling thread from computed inputs
        /// ([`Tensor::computed_on_caller`]): its memory is that thread's
        /// allocation, freed where its last reference goes rather than on
        /// the worker (`ex_mlx_core::worker::release` is for arrays the
        /// worker made).
        made_on_caller: bool,
    },
    /// The deferred operation failed; using the tensor gives its error.
    Failed(Error),
    /// `deallocate` freed it early.
    Deallocated,
}

#[rustler::resource_impl]
impl Resource for Tensor {}

impl Drop for Tensor {
    fn drop(&mut self) {
        let state = std::mem::replace(
            self.state
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            State::Deallocated,
        );
        if let State::Ready {
            array,
            made_on_caller,
            ..
        } = state
        {
            if made_on_caller {
                ex_mlx_core::worker::drop_at_once(array);
            } else {
                ex_mlx_core::worker::release(self.device, array);
            }
        }
    }
}

pub type TensorRef = ResourceArc<Tensor>;

thread_local! {
    /// References a worker's jobs are done with, dropped together
    /// ([`release_later`]).
    static DONE_WITH: std::cell::RefCell<Vec<TensorRef>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// How many references a worker keeps before it drops them together.
const RELEASE_BATCH: usize = 64;

/// Drops `tensors`, references a job held (its inputs, the tensor it
/// fills): on a worker, in batches of [`RELEASE_BATCH`], before the worker
/// sleeps (`ex_mlx_core::worker::set_before_sleep`) and before it answers a
/// caller who waits (`crate::reply`), so that nothing a caller dropped
/// before such a call outlives it; elsewhere at once.
///
/// A tensor's reference count is shared with the caller's scheduler, which
/// counts it up at every call that passes the tensor (a weight, a constant
/// added at each step of a loop): dropping the job's reference at each job
/// moved that count's cache line between the two cores every time, a
/// large share of the worker's cost per op on a GPU host
/// (docs/decisions/0005-nif-allocator.md). A batch moves it once.
pub fn release_later(tensors: impl IntoIterator<Item = TensorRef>) {
    if !ex_mlx_core::worker::on_worker() {
        return;
    }
    let full = DONE_WITH.with(|done| {
        let mut done = done.borrow_mut();
        done.extend(tensors);
        done.len() >= RELEASE_BATCH
    });
    if full {
        release_batch();
    }
}

/// Drops the references [`release_later`] kept on this thread; whether
/// there were any. (They are dropped outside the borrow: a tensor's last
/// reference runs its destructor.)
pub fn release_batch() -> bool {
    let mut batch = DONE_WITH.with(|done| std::mem::take(&mut *done.borrow_mut()));
    let any = !batch.is_empty();
    batch.clear();
    // (the emptied list goes back, so the next batch allocates nothing)
    DONE_WITH.with(|done| {
        let mut done = done.borrow_mut();
        if done.is_empty() && done.capacity() < batch.capacity() {
            *done = batch;
        }
    });
    any
}

/// A tensor's `work` when it is not known.
const UNKNOWN_WORK: u64 = u64::MAX;

fn ready(array: Array, evaluated: bool) -> State {
    ready_with_work(array, evaluated, UNKNOWN_WORK)
}

fn ready_with_work(array: Array, evaluated: bool, work: u64) -> State {
    ex_mlx_core::collect::allocated(array.nbytes());
    let dtype = array.dtype();
    let shape = array.shape().iter().map(|&d| d as i64).collect();
    State::Ready {
        array,
        dtype,
        shape,
        evaluated,
        work,
        made_on_caller: false,
    }
}

fn deallocated() -> Error {
    Error::arg(
        "tensor",
        "the tensor was deallocated (Nx.backend_deallocate/1); it has no data any more",
    )
}

impl Tensor {
    pub fn wrap(array: Array, device: Device, evaluated: bool) -> TensorRef {
        Tensor::in_state(ready(array, evaluated), device)
    }

    /// At most how many elements MLX computes to evaluate this tensor: 0
    /// when it is known to be computed, the count recorded when an op of
    /// linear cost built it (`crate::reply::submit_op`); `None` when not
    /// known (any other unevaluated or pending tensor).
    pub fn work_to_evaluate(&self) -> Option<u64> {
        match &*self.lock() {
            State::Ready {
                evaluated: true, ..
            } => Some(0),
            State::Ready { work, .. } if *work != UNKNOWN_WORK => Some(*work),
            _ => None,
        }
    }

    /// The number of elements, once known (`None` while pending or after
    /// an error).
    pub fn elements(&self) -> Option<u64> {
        match &*self.lock() {
            State::Ready { shape, .. } => shape
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?)),
            _ => None,
        }
    }

    /// A CPU array computed on the calling thread from computed inputs
    /// (`crate::op`'s ops computed at once): computed, and freed on the
    /// thread that drops its last reference, where it was allocated.
    /// Freed on the worker, such arrays woke it for each batch and
    /// contended with the caller's next allocations for the allocators'
    /// locks (docs/decisions/0005-nif-allocator.md).
    pub fn computed_on_caller(array: Array, device: Device) -> TensorRef {
        let mut state = ready(array, true);
        if let State::Ready { made_on_caller, .. } = &mut state {
            *made_on_caller = true;
        }
        Tensor::in_state(state, device)
    }

    /// A tensor a deferred operation will fill (see `reply::submit`).
    pub fn pending(device: Device) -> TensorRef {
        Tensor::in_state(State::Pending, device)
    }

    /// A tensor in `state` on `device`, nobody waiting for it.
    fn in_state(state: State, device: Device) -> TensorRef {
        ResourceArc::new(Tensor {
            state: Mutex::new(state),
            filled: Condvar::new(),
            waiters: AtomicUsize::new(0),
            device,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Gives a pending tensor its array or error and wakes its waiters
    /// (call on the device's worker: on the CPU, an array that is already
    /// computed, such as the host's results, ex_mlx_core::ops::computed, or a
    /// program's evaluated outputs, is recorded as such, so it is read in
    /// place and computed on; only CPU tensors are read or computed on the
    /// calling thread, so a GPU fill does not ask).
    pub fn fill(&self, result: Result<Array>) {
        self.fill_with_work(result, None);
    }

    /// [`Tensor::fill`] for an array evaluating which computes at most
    /// `work` elements (`None`: unknown; see [`Tensor::work_to_evaluate`]).
    pub fn fill_with_work(&self, result: Result<Array>, work: Option<u64>) {
        let computed = matches!(&result, Ok(array) if self.known_computed(array));
        let mut state = self.lock();
        if matches!(*state, State::Pending) {
            *state = match result {
                Ok(array) => ready_with_work(array, computed, work.unwrap_or(UNKNOWN_WORK)),
                Err(e) => State::Failed(e),
            };
        }
        self.wake_waiters();
    }

    /// A handle to the array (shares its data and graph). Waits while the
    /// tensor is pending: only ever on a worker thread, for an operation
    /// queued earlier (so there is no cycle to deadlock on).
    pub fn array(&self) -> Result<Array> {
        let mut state = self.lock();
        while matches!(*state, State::Pending) {
            self.waiters.fetch_add(1, Ordering::Relaxed);
            state = self
                .filled
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.waiters.fetch_sub(1, Ordering::Relaxed);
        }
        match &*state {
            State::Ready { array, .. } => Ok(array.clone()),
            State::Failed(e) => Err(e.clone()),
            State::Deallocated => Err(deallocated()),
            State::Pending => Err(Error::Internal("a pending tensor after waiting".into())),
        }
    }

    /// Shape and dtype without waiting: `Ok(None)` while pending.
    pub fn info(&self) -> Result<Option<(Vec<i64>, Dtype)>> {
        match &*self.lock() {
            State::Ready { dtype, shape, .. } => Ok(Some((shape.clone(), *dtype))),
            State::Pending => Ok(None),
            State::Failed(e) => Err(e.clone()),
            State::Deallocated => Err(deallocated()),
        }
    }

    /// Wakes the threads waiting in [`Tensor::array`] for this tensor, if
    /// any (call with the state locked, after changing it).
    fn wake_waiters(&self) {
        if self.waiters.load(Ordering::Relaxed) > 0 {
            self.filled.notify_all();
        }
    }

    /// `Ok` unless the tensor was deallocated or its deferred operation
    /// failed (a pending tensor is fine). Does not wait.
    pub fn check_usable(&self) -> Result<()> {
        match &*self.lock() {
            State::Ready { .. } | State::Pending => Ok(()),
            State::Failed(e) => Err(e.clone()),
            State::Deallocated => Err(deallocated()),
        }
    }

    /// Replaces the array by its evaluated, contiguous copy, unless the
    /// tensor was deallocated meanwhile.
    pub fn replace_evaluated(&self, array: Array) -> Result<()> {
        let mut state = self.lock();
        match &*state {
            State::Ready { .. } => {
                *state = ready(array, true);
                Ok(())
            }
            _ => Err(deallocated()),
        }
    }

    /// Records that this tensor's array was evaluated (call on the worker,
    /// after evaluating the array [`Tensor::array`] returned). A ready
    /// tensor still holds that array, or an evaluated copy of it
    /// ([`Tensor::replace_evaluated`]): a ready tensor's array is never
    /// replaced by an unevaluated one.
    pub fn mark_evaluated(&self) {
        if let State::Ready { evaluated, .. } = &mut *self.lock() {
            *evaluated = true;
        }
    }

    /// Records that this tensor's array is computed if it is (call on the
    /// worker, after an evaluation that may have computed it: a program's
    /// input, evaluated with its outputs), as [`Tensor::fill`] records it
    /// for a result; later reads and calls on the calling thread then use it
    /// in place.
    pub fn mark_if_computed(&self) {
        if let State::Ready {
            array, evaluated, ..
        } = &mut *self.lock()
        {
            if !*evaluated && self.known_computed(array) {
                *evaluated = true;
            }
        }
    }

    /// Whether `array`, this tensor's, can be recorded as computed: a CPU
    /// array whose work is done (call on the worker: MLX's `is_available`).
    fn known_computed(&self, array: &Array) -> bool {
        self.device.kind() == Kind::Cpu && ex_mlx_core::ahead::is_available(array)
    }

    /// Whether the array is known to be computed (see `State::Ready`).
    pub fn is_evaluated(&self) -> bool {
        matches!(
            &*self.lock(),
            State::Ready {
                evaluated: true,
                ..
            }
        )
    }

    /// The array if it is known to be computed (see `State::Ready`), for
    /// reads on the calling thread; `None` otherwise (then the worker reads
    /// it, evaluating it first).
    pub fn evaluated_array(&self) -> Option<Array> {
        match &*self.lock() {
            State::Ready {
                array,
                evaluated: true,
                ..
            } => Some(array.clone()),
            _ => None,
        }
    }

    /// Drops this tensor's reference to its array now instead of at garbage
    /// collection; `false` if it was already deallocated.
    pub fn deallocate(&self) -> bool {
        let mut state = self.lock();
        let had = !matches!(*state, State::Deallocated);
        *state = State::Deallocated;
        self.wake_waiters();
        had
    }
}

/// Queues on `tensor`'s device's worker: its array, evaluated there, given
/// to `then` (or the error that evaluating it gave), on the worker's thread.
pub fn eval_on_worker(
    tensor: TensorRef,
    then: impl FnOnce(Result<Array>) + Send + 'static,
) -> Result<()> {
    let device = tensor.device;
    ex_mlx_core::worker::submit(
        device,
        Box::new(move || {
            then(ex_mlx_core::worker::run_caught(|| {
                let array = tensor.array()?;
                array.eval()?;
                Ok(array)
            }))
        }),
    )?;
    Ok(())
}

/// The device all `tensors` are on, or an error naming the mismatch.
pub fn common_device(tensors: &[&TensorRef]) -> Result<Device> {
    let first = tensors
        .first()
        .map(|t| t.device)
        .ok_or_else(|| Error::Internal("common_device of no tensors".into()))?;
    match tensors.iter().find(|t| t.device != first) {
        None => Ok(first),
        Some(other) => Err(Error::Device(format!(
            "tensors are on different devices ({} and {}); transfer one first",
            first.describe(),
            other.device.describe()
        ))),
    }
}

/// A tensor an operation returns, encoded for Elixir as `{resource, shape,
/// type, device}`. A fresh result stays a plain array until
/// it is encoded for Elixir: in deferred mode it never is (its array goes
/// into the pending tensor), so no resource is made and dropped for it.
pub enum NewTensor {
    Fresh {
        array: Array,
        device: Device,
        evaluated: bool,
    },
    Existing(TensorRef),
}

impl NewTensor {
    /// The result of an operation, refused with an `:out_of_memory` error
    /// if its buffer would take active memory past the memory limit (MLX's
    /// CPU allocator does not enforce the limit itself).
    pub fn new(array: Array, device: Device) -> Result<Self> {
        memory::check_allocation(array.nbytes())?;
        Ok(NewTensor::Fresh {
            array,
            device,
            evaluated: false,
        })
    }

    /// A result that shares its input's buffer (a reshape, transpose,
    /// broadcast or slice), so allocates nothing to check.
    pub fn view(array: Array, device: Device) -> Self {
        NewTensor::Fresh {
            array,
            device,
            evaluated: false,
        }
    }

    /// An array made from host bytes by [`ex_mlx_core::host::array_from_bytes`]:
    /// born evaluated, its buffer checked against the memory limit before it
    /// was allocated (checking it again would count its bytes twice). On a
    /// GPU (call it on the GPU's worker) its memory is moved there now, in
    /// one transfer, instead of page by page by its first kernel
    /// (`ex_mlx_core::unified`; the array is the same either way).
    pub fn from_host(array: Array, device: Device) -> Self {
        if device.kind() == Kind::Gpu {
            ex_mlx_core::unified::prefetch_to_gpu(&array);
        }
        NewTensor::Fresh {
            array,
            device,
            evaluated: true,
        }
    }

    /// The array (for a deferred operation's pending tensor).
    pub fn into_array(self) -> Result<Array> {
        match self {
            NewTensor::Fresh { array, .. } => Ok(array),
            NewTensor::Existing(t) => t.array(),
        }
    }
}

impl Encoder for NewTensor {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let t = match self {
            NewTensor::Fresh {
                array,
                device,
                evaluated,
            } => Tensor::wrap(array.clone(), *device, *evaluated),
            NewTensor::Existing(t) => t.clone(),
        };
        match t.info() {
            Ok(Some((shape, dtype))) => (
                t.encode(env),
                shape_term(env, &shape),
                TypeTerm(dtype),
                DeviceTerm(t.device),
            )
                .encode(env),
            // a new tensor is always ready; never reached
            _ => t.encode(env),
        }
    }
}

/// What an op returns: one tensor, or several (encoded as a list).
pub enum Results {
    One(NewTensor),
    Many(Vec<NewTensor>),
}

impl Encoder for Results {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self {
            Results::One(t) => t.encode(env),
            Results::Many(ts) => ts.encode(env),
        }
    }
}

// -----------------------------------------------------------------------------
// Decoding tensor arguments
// -----------------------------------------------------------------------------

/// A tensor argument (the resource inside an `%ExMLX.Tensor{}`), whatever its
/// state: for queries that report a deallocated or failed tensor themselves.
pub fn decode_any(name: &'static str, term: Term) -> Result<TensorRef> {
    term.decode().map_err(|_| {
        Error::arg(
            name,
            format!("expected a tensor reference, got: {}", show(term)),
        )
    })
}

/// A tensor argument. One that was deallocated, or whose deferred operation
/// failed, is refused here, at the call, with that reason (a pending one is
/// fine: the worker gets to it first).
pub fn decode(name: &'static str, term: Term) -> Result<TensorRef> {
    let tensor = decode_any(name, term)?;
    tensor.check_usable()?;
    Ok(tensor)
}

/// A list of tensors.
pub fn decode_list(name: &'static str, term: Term) -> Result<Vec<TensorRef>> {
    let items = term.decode::<Vec<Term>>().map_err(|_| {
        Error::arg(
            name,
            format!("expected a list of tensors, got: {}", show(term)),
        )
    })?;
    items.into_iter().map(|t| decode(name, t)).collect()
}
