//! MLX's distributed engine (mlx-c's `mlx_distributed_*`, which mlx-rs does
//! not wrap): backends, groups, and the collectives as lazy MLX arrays.
//!
//! **Groups.** [`init`] asks MLX for the group of a backend (`ring`, `mpi`,
//! `nccl`, or `any`); MLX keeps one group per backend for the life of the OS
//! process and returns the same one to a second `init`. [`Group::single`] is
//! the group of one that ExMLX uses when nothing was initialized: its
//! reductions and gathers return their input and send/recv are refused with
//! MLX's own messages, as MLX does on a group of size 1. (ExMLX never lets
//! MLX pick its default group itself: MLX would then read `MLX_RANK` and
//! `MLX_HOSTFILE` and block in a ring's connect.)
//!
//! **Where the work runs.** A collective's graph is built and evaluated on
//! the communication thread ([`comm_submit`]), which owns its own MLX
//! stream, not on a device's worker (`crate::worker`). A collective waits for
//! its peers, possibly for long, and MLX cannot cancel one that waits for a
//! peer that never answers; on a worker it would hold up every other
//! operation of the device. The input is evaluated on its device's worker
//! first, so the communication thread only reads computed buffers.
//!
//! **Failures.** MLX 0.32.2's ring backend (what docs/distributed.md
//! records): a peer that dies mid-collective makes the survivors' evaluation
//! fail with "[ring] connection to a peer was lost"; a peer missing at init
//! makes the ranks that connect fail after MLX's retries (about 31 s), but a
//! rank that accepts first waits in `accept` forever; a peer that is alive
//! but never joins a collective makes it wait forever. The caller's watchdog
//! (a timeout on every call, `ExMLX.Distributed`) bounds those waits;
//! [`poison`] then records that the communication thread is stuck, and every
//! later distributed call fails at once with that reason.
//!
//! **Checks before MLX.** The ring backend checks some arguments inside the
//! task that runs on MLX's stream thread (a send to a rank that is not a
//! neighbour, an all_sum of fewer elements than ranks whose padding exceeds
//! its 1 KB buffer); those are checked here first, with errors naming the
//! argument.

use std::cell::RefCell;
use std::ffi::CString;
use std::sync::{mpsc, Mutex};
use std::thread;

use mlx_rs::{Array, Dtype, Stream};
use once_cell::sync::OnceCell;

use crate::error::{Error, Result};

/// A distributed backend as MLX names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Any,
    Ring,
    Mpi,
    Nccl,
}

impl Backend {
    pub const ALL: [Backend; 4] = [Backend::Any, Backend::Ring, Backend::Mpi, Backend::Nccl];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Any => "any",
            Backend::Ring => "ring",
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
        }
    }

    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Whether this MLX build has the backend (for `any`: one of them).
    pub fn is_available(self) -> bool {
        let name = CString::new(self.name()).unwrap_or_default();
        // SAFETY: `name` is a NUL-terminated string alive for the call; mlx-c
        // catches C++ exceptions (returning false).
        unsafe { mlx_sys::mlx_distributed_is_available(name.as_ptr()) }
    }
}

/// Runs one mlx-c call returning a status; MLX's message on failure
/// (`crate::mlx_c`) is a distributed error.
fn mlx_call(what: &str, call: impl FnOnce() -> i32) -> Result<()> {
    crate::mlx_c::call(what, call).map_err(Error::Distributed)
}

// -----------------------------------------------------------------------------
// Groups
// -----------------------------------------------------------------------------

/// A distributed group: MLX's, or the group of one (see the module docs).
pub struct Group {
    raw: Option<mlx_sys::mlx_distributed_group>,
    backend: &'static str,
    rank: i32,
    size: i32,
}

// SAFETY: an mlx-c group is a handle to a shared_ptr of MLX's group, which is
// never mutated after it is made; MLX's rank/size/split and the collectives
// read it from any thread (MLX's own Python binding shares it the same way).
unsafe impl Send for Group {}
// SAFETY: as above; no method takes `&mut self`.
unsafe impl Sync for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // SAFETY: `raw` was made by mlx-c for this group alone and is freed once.
            unsafe { mlx_sys::mlx_distributed_group_free(raw) };
        }
    }
}

impl Group {
    /// The group of one (rank 0, size 1) used when nothing is initialized.
    pub fn single() -> Group {
        Group {
            raw: None,
            backend: "none",
            rank: 0,
            size: 1,
        }
    }

    pub fn rank(&self) -> i32 {
        self.rank
    }

    pub fn size(&self) -> i32 {
        self.size
    }

    /// The backend's name ("ring", ...), "none" for the group of one.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    fn wrap(raw: mlx_sys::mlx_distributed_group, backend: &'static str) -> Result<Group> {
        let mut group = Group {
            raw: Some(raw),
            backend,
            rank: 0,
            size: 1,
        };
        // SAFETY: `raw` is a live group handle (set by a successful mlx-c call).
        group.rank = unsafe { mlx_sys::mlx_distributed_group_rank(raw) };
        // SAFETY: as above.
        group.size = unsafe { mlx_sys::mlx_distributed_group_size(raw) };
        if group.size < 1 || group.rank < 0 || group.rank >= group.size {
            return Err(Error::Distributed(format!(
                "MLX returned a group with rank {} and size {}",
                group.rank, group.size
            )));
        }
        Ok(group)
    }

    /// The group MLX gave for `color` and `key` (`key` < 0: ordered by rank).
    /// The ring backend cannot split ("[ring] Group split not supported.").
    pub fn split(&self, color: i32, key: i32) -> Result<Group> {
        let Some(raw) = self.raw else {
            // (MLX's own message for a group of one)
            return Err(Error::Distributed(
                "Cannot split the distributed group further.".into(),
            ));
        };
        // SAFETY: a fresh empty handle for mlx-c to fill.
        let mut res = unsafe { mlx_sys::mlx_distributed_group_new() };
        // SAFETY: `res` is a handle to write into and `raw` a live group.
        let outcome = mlx_call("group split", || unsafe {
            mlx_sys::mlx_distributed_group_split(&mut res, raw, color, key)
        });
        if let Err(e) = outcome {
            // SAFETY: `res` is ours and was not handed out.
            unsafe { mlx_sys::mlx_distributed_group_free(res) };
            return Err(e);
        }
        Group::wrap(res, self.backend)
    }

    /// The handle to pass to mlx-c; `None` for the group of one.
    fn raw(&self) -> Option<mlx_sys::mlx_distributed_group> {
        self.raw
    }
}

/// Initializes `backend`'s group (MLX reads `MLX_RANK` and `MLX_HOSTFILE`
/// for the ring). Not strict: a backend that cannot start gives the group of
/// one, as in MLX. Strict: an error. A backend this MLX build lacks is an
/// error either way (it names the backend and the available ones).
///
/// Blocks until every rank has connected (see the module docs on failures).
pub fn init(backend: Backend, strict: bool) -> Result<Group> {
    if !backend.is_available() {
        return Err(not_available(backend));
    }
    let name = CString::new(backend.name()).unwrap_or_default();
    // SAFETY: a fresh empty handle for mlx-c to fill.
    let mut res = unsafe { mlx_sys::mlx_distributed_group_new() };
    // SAFETY: `res` is a handle to write into; `name` is NUL-terminated and
    // alive for the call.
    let outcome = mlx_call("distributed init", || unsafe {
        mlx_sys::mlx_distributed_init(&mut res, strict, name.as_ptr())
    });
    if let Err(e) = outcome {
        // SAFETY: `res` is ours and was not handed out.
        unsafe { mlx_sys::mlx_distributed_group_free(res) };
        return Err(e);
    }
    let mut group = Group::wrap(res, backend.name())?;
    if group.size == 1 {
        // MLX's empty group: it refuses every collective, so use ours.
        return Ok(Group::single());
    }
    if backend == Backend::Any {
        group.backend = chosen_by_any(
            |name| std::env::var_os(name).is_some(),
            Backend::Nccl.is_available(),
        );
    }
    Ok(group)
}

/// The backend MLX's `any` joined a group of several ranks with, from the
/// setup in the environment (`is_set` tells whether a variable is set):
/// the ring when MLX_RANK and MLX_HOSTFILE are set, NCCL when its
/// NCCL_HOST_IP is (and the build has NCCL: ExMLX's launcher sets it for
/// `backend: :nccl`), MPI otherwise. The name decides where collectives
/// run: NCCL's on a GPU stream.
fn chosen_by_any(is_set: impl Fn(&str) -> bool, nccl_built: bool) -> &'static str {
    if is_set("MLX_RANK") && is_set("MLX_HOSTFILE") {
        "ring"
    } else if nccl_built && is_set("NCCL_HOST_IP") {
        "nccl"
    } else {
        "mpi"
    }
}

fn not_available(backend: Backend) -> Error {
    let available: Vec<&str> = Backend::ALL
        .into_iter()
        .filter(|b| *b != Backend::Any && b.is_available())
        .map(|b| b.name())
        .collect();
    Error::Distributed(format!(
        "the {} backend is not available in this MLX build (MLX {}); available: {}",
        backend.name(),
        crate::mlx_version(),
        if available.is_empty() {
            "none".to_string()
        } else {
            available.join(", ")
        }
    ))
}

// -----------------------------------------------------------------------------
// Collectives (lazy arrays; evaluate them on the communication thread)
// -----------------------------------------------------------------------------

/// The reductions and the gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    AllSum,
    AllMax,
    AllMin,
    AllGather,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllSum => "all_sum",
            Collective::AllMax => "all_max",
            Collective::AllMin => "all_min",
            Collective::AllGather => "all_gather",
        }
    }

    pub fn from_name(name: &str) -> Option<Collective> {
        [
            Collective::AllSum,
            Collective::AllMax,
            Collective::AllMin,
            Collective::AllGather,
        ]
        .into_iter()
        .find(|c| c.name() == name)
    }
}

type RawCollective = unsafe extern "C" fn(
    *mut mlx_sys::mlx_array,
    mlx_sys::mlx_array,
    mlx_sys::mlx_distributed_group,
    mlx_sys::mlx_stream,
) -> i32;

/// Builds `op` of `x` over `group` on this thread's stream. On the group of
/// one: `x` itself.
pub fn collective(op: Collective, x: &Array, group: &Group) -> Result<Array> {
    let Some(raw) = group.raw() else {
        return Ok(x.clone());
    };
    if group.backend == "ring" && op != Collective::AllGather {
        check_ring_padding(op, x, group)?;
    }
    let f: RawCollective = match op {
        Collective::AllSum => mlx_sys::mlx_distributed_all_sum,
        Collective::AllMax => mlx_sys::mlx_distributed_all_max,
        Collective::AllMin => mlx_sys::mlx_distributed_all_min,
        Collective::AllGather => mlx_sys::mlx_distributed_all_gather,
    };
    // SAFETY: `f` writes a new array into `res`; `x` and `raw` are live for
    // the call.
    raw_array(op.name(), |res, s| unsafe { f(res, x.as_ptr(), raw, s) })
}

/// The ring's reductions of fewer elements than ranks pad the data to one
/// element per rank in a 1 KB buffer, refusing more inside MLX's stream task.
fn check_ring_padding(op: Collective, x: &Array, group: &Group) -> Result<()> {
    let elements = x.size();
    let padded = crate::dtype::size_of(x.dtype()) * group.size as usize;
    if elements < group.size as usize && padded > 1024 {
        return Err(Error::arg(
            "tensor",
            format!(
                "the ring backend cannot {} {elements} elements of {} over {} ranks \
                 (fewer elements than ranks are padded into 1024 bytes); pass at least {} elements",
                op.name(),
                crate::dtype::display(x.dtype()),
                group.size,
                group.size
            ),
        ));
    }
    Ok(())
}

/// Checks a peer rank for send/recv: in the group, not this rank, and for
/// the ring a neighbour (MLX's ring sends only to its left and right).
fn check_peer(name: &'static str, peer: i32, group: &Group) -> Result<()> {
    if peer < 0 || peer >= group.size {
        return Err(Error::arg(
            name,
            format!(
                "rank {peer} is not in the group (ranks 0..{})",
                group.size - 1
            ),
        ));
    }
    if peer == group.rank {
        return Err(Error::arg(name, format!("rank {peer} is this rank")));
    }
    if group.backend == "ring" {
        let right = (group.rank + 1) % group.size;
        let left = (group.rank + group.size - 1) % group.size;
        if peer != left && peer != right {
            return Err(Error::arg(
                name,
                format!(
                    "the ring backend exchanges with neighbours only: rank {} can reach ranks {left} and {right}, not {peer}",
                    group.rank
                ),
            ));
        }
    }
    Ok(())
}

fn singleton(what: &str) -> Error {
    // MLX's own messages for a group of one.
    Error::Distributed(format!("Cannot {what} a singleton group"))
}

/// Sends `x` to rank `dst`: the array to evaluate (it is `x` once sent).
pub fn send(x: &Array, dst: i32, group: &Group) -> Result<Array> {
    let Some(raw) = group.raw() else {
        return Err(singleton("send to"));
    };
    check_peer("dst", dst, group)?;
    // SAFETY: writes a new array into `res`; `x` and `raw` are live.
    raw_array("send", |res, s| unsafe {
        mlx_sys::mlx_distributed_send(res, x.as_ptr(), dst, raw, s)
    })
}

/// Receives an array of `shape` and `dtype` from rank `src`.
pub fn recv(shape: &[i32], dtype: Dtype, src: i32, group: &Group) -> Result<Array> {
    let Some(raw) = group.raw() else {
        return Err(singleton("recv from"));
    };
    check_peer("src", src, group)?;
    // SAFETY: writes a new array into `res`; `shape` is alive for the call
    // and its length passed with it.
    raw_array("recv", |res, s| unsafe {
        mlx_sys::mlx_distributed_recv(
            res,
            shape.as_ptr(),
            shape.len(),
            u32::from(dtype) as mlx_sys::mlx_dtype,
            src,
            raw,
            s,
        )
    })
}

/// Evaluates a collective's array (on the communication thread). MLX's
/// failure here is the group's (a lost peer): the error is of kind
/// `distributed`, and since MLX's group cannot run collectives any more
/// (the ring's socket threads have given up), later calls are refused at
/// once ([`poison`]) instead of waiting for their timeout. An operation or
/// type the backend lacks ([`unsupported_by_backend`]) is the caller's
/// error: nothing was exchanged, and the group stays usable.
pub fn eval(array: &Array) -> Result<()> {
    array.eval().map_err(|e| {
        let message = Error::from(e).to_string();
        if unsupported_by_backend(&message) {
            return Error::arg("tensor", message);
        }
        poison(format!("an earlier collective failed: {message}"));
        Error::Distributed(message)
    })
}

/// Whether MLX's message says the backend has no implementation of the
/// operation or type asked for (MLX 0.32's CUDA build: "Send has no CUDA
/// implementation"; its backends: "... is not supported"), as opposed to
/// a failure of the exchange itself.
fn unsupported_by_backend(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    [
        "has no cuda implementation",
        "not supported",
        "not implemented",
    ]
    .iter()
    .any(|phrase| lower.contains(phrase))
}

/// Runs one mlx-c call that writes a new array on this thread's stream.
fn raw_array(
    name: &str,
    call: impl FnOnce(*mut mlx_sys::mlx_array, mlx_sys::mlx_stream) -> i32,
) -> Result<Array> {
    // SAFETY: every caller passes its arrays and pointers to one mlx-c
    // function writing a new array, valid for the duration of the call.
    unsafe { crate::mlx_c::new_array(name, call) }.map_err(Error::Distributed)
}

// -----------------------------------------------------------------------------
// The communication thread
// -----------------------------------------------------------------------------

/// Work for the communication thread: runs there, inside its stream.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

static COMM: OnceCell<std::result::Result<Mutex<mpsc::Sender<Job>>, String>> = OnceCell::new();

/// Why distributed calls are refused, once one timed out (see [`poison`]).
static POISONED: Mutex<Option<String>> = Mutex::new(None);

fn start_comm() -> std::result::Result<Mutex<mpsc::Sender<Job>>, String> {
    let (queue, jobs) = mpsc::channel::<Job>();
    thread::Builder::new()
        .name("ex_mlx_distributed".into())
        .spawn(move || {
            // (the ring and MPI backends run on the CPU; NCCL would need a GPU
            // stream, made when a job asks for one: see `with_gpu_stream`)
            // (it stops calling MLX when the process exits, as the
            // device workers do: crate::exit)
            let in_mlx = crate::exit::new_worker_flag();
            let stream =
                crate::exit::in_mlx(&in_mlx, || Stream::new_with_device(&mlx_rs::Device::cpu()));
            crate::exit::register();
            mlx_rs::with_stream(&stream, || {
                while let Ok(job) = jobs.recv() {
                    crate::exit::in_mlx(&in_mlx, job);
                }
            });
        })
        .map_err(|e| format!("could not start the distributed thread: {e}"))?;
    Ok(Mutex::new(queue))
}

/// Queues `job` on the communication thread (jobs run one at a time, in
/// submission order: every rank must issue its collectives in the same
/// order). Refused once [`poison`] was called.
pub fn comm_submit(job: Job) -> Result<()> {
    check_usable()?;
    let queue = COMM
        .get_or_init(start_comm)
        .as_ref()
        .map_err(|message| Error::Distributed(message.clone()))?;
    let sender = queue.lock().unwrap_or_else(|p| p.into_inner());
    sender
        .send(job)
        .map_err(|_| Error::Internal("the distributed thread has stopped".into()))
}

/// Runs `work` on the communication thread inside a stream of `gpu`'s
/// device (for NCCL, whose collectives run on the GPU): a stream made on
/// this thread once.
pub fn with_gpu_stream<T>(work: impl FnOnce() -> T) -> T {
    thread_local! {
        static GPU: RefCell<Option<Stream>> = const { RefCell::new(None) };
    }
    let stream = GPU.with(|g| {
        g.borrow_mut()
            .get_or_insert_with(|| Stream::new_with_device(&mlx_rs::Device::gpu()))
            .clone()
    });
    mlx_rs::with_stream(&stream, work)
}

/// Records that a distributed call timed out: its work may never finish
/// (MLX cannot cancel it), so every later call fails at once with `reason`.
pub fn poison(reason: String) {
    let mut slot = POISONED.lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_none() {
        *slot = Some(reason);
    }
}

/// `Ok` unless a distributed call timed out before (see [`poison`]).
pub fn check_usable() -> Result<()> {
    match &*POISONED.lock().unwrap_or_else(|p| p.into_inner()) {
        Some(reason) => Err(Error::Distributed(format!(
            "distributed calls are disabled in this OS process: {reason}"
        ))),
        None => Ok(()),
    }
}

/// Runs `work` on the communication thread and waits (for Rust callers:
/// tests; the NIFs never block this way).
pub fn comm_run_blocking<T, F>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let (done, result) = mpsc::sync_channel(1);
    comm_submit(Box::new(move || {
        let _ = done.send(crate::worker::run_caught(work));
    }))?;
    result
        .recv()
        .map_err(|_| Error::Internal("the distributed thread dropped a job".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(a: &Array) -> Vec<f32> {
        a.as_slice::<f32>().to_vec()
    }

    #[test]
    fn the_backend_any_joined_with_is_named_from_the_environment() {
        let with = |names: &'static [&'static str]| move |name: &str| names.contains(&name);
        assert_eq!(
            chosen_by_any(with(&["MLX_RANK", "MLX_HOSTFILE"]), true),
            "ring"
        );
        // ExMLX's launcher with `backend: :nccl`: MLX_RANK, MLX_WORLD_SIZE,
        // NCCL_HOST_IP, NCCL_PORT
        let nccl = with(&["MLX_RANK", "MLX_WORLD_SIZE", "NCCL_HOST_IP", "NCCL_PORT"]);
        assert_eq!(chosen_by_any(nccl, true), "nccl");
        assert_eq!(chosen_by_any(nccl, false), "mpi");
        assert_eq!(chosen_by_any(with(&["MLX_RANK"]), true), "mpi");
    }

    #[test]
    fn a_missing_operation_is_told_from_a_failed_exchange() {
        for message in [
            "Send has no CUDA implementation.",
            "[nccl] Recv not supported in NCCL backend.",
            "[ring] Type not implemented",
        ] {
            assert!(unsupported_by_backend(message), "{message}");
        }
        for message in [
            "[ring] Send failed with errno=32",
            "NCCL error: unhandled system error",
            "[ring] Couldn't connect (error: 111)",
        ] {
            assert!(!unsupported_by_backend(message), "{message}");
        }
    }

    #[test]
    fn backends_by_name() {
        for b in Backend::ALL {
            assert_eq!(Backend::from_name(b.name()), Some(b));
        }
        assert_eq!(Backend::from_name("gloo"), None);
        // the CPU build has the ring
        assert!(Backend::Ring.is_available());
    }

    #[test]
    fn the_group_of_one_reduces_to_its_input_and_refuses_send_and_recv() {
        let g = Group::single();
        assert_eq!((g.rank(), g.size(), g.backend()), (0, 1, "none"));
        let out = comm_run_blocking(|| {
            let x = Array::from_slice(&[1.0f32, -2.0], &[2]);
            let g = Group::single();
            let mut outs = vec![];
            for op in [
                Collective::AllSum,
                Collective::AllMax,
                Collective::AllMin,
                Collective::AllGather,
            ] {
                let y = collective(op, &x, &g)?;
                y.eval()?;
                outs.push(f32s(&y));
            }
            Ok(outs)
        })
        .unwrap();
        assert!(out.iter().all(|o| o == &vec![1.0, -2.0]));
        let x = Array::from_slice(&[1.0f32], &[1]);
        assert_eq!(
            send(&x, 1, &g).unwrap_err().to_string(),
            "Cannot send to a singleton group"
        );
        assert_eq!(
            recv(&[1], Dtype::Float32, 1, &g).unwrap_err().to_string(),
            "Cannot recv from a singleton group"
        );
        assert_eq!(
            g.split(0, -1).err().map(|e| e.to_string()),
            Some("Cannot split the distributed group further.".to_string())
        );
    }

    #[test]
    fn unavailable_backends_are_named() {
        let e = init(Backend::Nccl, true).err().unwrap();
        assert_eq!(e.kind(), "distributed");
        assert_eq!(
            e.to_string(),
            format!(
                "the nccl backend is not available in this MLX build (MLX {}); available: ring",
                crate::mlx_version()
            )
        );
    }

    #[test]
    fn peers_are_checked_before_mlx() {
        let g = Group {
            raw: None,
            backend: "ring",
            rank: 0,
            size: 4,
        };
        assert_eq!(
            check_peer("dst", 2, &g).unwrap_err().to_string(),
            "dst: the ring backend exchanges with neighbours only: rank 0 can reach ranks 3 and 1, not 2"
        );
        assert_eq!(
            check_peer("src", 4, &g).unwrap_err().to_string(),
            "src: rank 4 is not in the group (ranks 0..3)"
        );
        assert_eq!(
            check_peer("src", 0, &g).unwrap_err().to_string(),
            "src: rank 0 is this rank"
        );
        assert!(check_peer("dst", 3, &g).is_ok());
        assert!(check_peer("dst", 1, &g).is_ok());
    }

    #[test]
    fn mlx_messages_reach_the_error() {
        // without MLX_RANK and MLX_HOSTFILE: strict, MLX's message; not
        // strict, MLX's group of one (which MLX then keeps for the ring, so
        // the strict call comes first)
        if std::env::var_os("MLX_HOSTFILE").is_none() {
            let e = comm_run_blocking(|| init(Backend::Ring, true))
                .err()
                .unwrap();
            assert_eq!(e.kind(), "distributed");
            assert!(
                e.to_string()
                    .starts_with("[ring] You need to provide via environment variables"),
                "{e}"
            );
            let g = comm_run_blocking(|| init(Backend::Ring, false)).unwrap();
            assert_eq!((g.rank(), g.size(), g.backend()), (0, 1, "none"));
        }
    }
}
