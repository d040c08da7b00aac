//! Work in parts that a thread waiting for the worker may share: the
//! caller's scheduler thread that polls in its NIF for a result
//! (`ex_mlx::reply`'s quick wait) otherwise spins on the other core.
//!
//! The worker posts a [`Parts`] job and computes its parts from the first
//! on; a poller that calls [`help`] meanwhile claims parts from the last
//! on, one a call, each into a buffer of the job's own, until it meets the
//! worker. Roles swap for a program run on the calling thread
//! (crate::program's `run_on_caller`): that thread posts, and the worker, asked
//! with [`worker_helps`], helps.
//! The worker then takes the helper's results, waiting about as long as
//! one of its own parts took; a part the helper has not finished by then
//! the worker computes itself (a helper descheduled by the OS never holds
//! the worker up; its late result is dropped). Every part is computed by
//! the same code over the same rows whoever computes it, and the caller
//! combines them in their order, so the result has the same bits with or
//! without a helper.
//!
//! A helper reads what the job's raw pointers address (MLX buffers held by
//! the worker's arrays). It counts itself in `readers` before it checks that
//! the job is still `open`; the worker closes the job before it reads
//! `readers` (both sequentially consistent), so either the helper sees the
//! job closed and touches nothing, or the worker sees the reader and keeps
//! what the job reads ([`in_parts`]'s `keep`: arrays, or values computed on
//! the host) until the count is back
//! to zero ([`drop_finished`], run at its next split and, through the NIF
//! crate's `worker::set_before_sleep` hook, before it sleeps).
//!
//! Why: docs/decisions/0007-one-row-products.md.

use std::cell::{RefCell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A computation in `count()` parts, part `i` writing `len(i)` float32
/// values.
pub trait Parts: Send + Sync {
    /// How many parts (at least 1).
    fn count(&self) -> usize;
    /// How many values part `part` writes.
    fn len(&self, part: usize) -> usize;
    /// Computes part `part` into `out` (`len(part)` values).
    fn compute(&self, part: usize, out: &mut [f32]);
}

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const DONE: u8 = 2;
const TAKEN: u8 = 3;

struct Posted {
    job: Arc<dyn Parts>,
    /// Each part's state: FREE, CLAIMED by a helper, DONE by it, or TAKEN
    /// by the worker (which computes it itself).
    states: Vec<AtomicU8>,
    open: AtomicBool,
    readers: AtomicUsize,
    /// A helper's result for each part it claimed (empty until then).
    outs: Vec<UnsafeCell<Vec<f32>>>,
}

// SAFETY: `outs[i]` is written only by the one helper whose
// compare-exchange moved `states[i]` from FREE to CLAIMED, and read by the
// worker only after it saw DONE there (the helper's Release store after
// its last write); every other field is atomic or immutable, and `job` is
// `Send + Sync`.
unsafe impl Sync for Posted {}

/// An owner of memory a job's raw pointers read (an MLX array whose buffer
/// it reads, values computed on the host), kept while a helper may read it.
pub type Kept = Box<dyn Send>;

/// Whether a job is posted (checked before the board's lock).
static POSTED: AtomicBool = AtomicBool::new(false);
/// The posted job, if any (one worker posts at a time; others compute alone).
static BOARD: Mutex<Option<Arc<Posted>>> = Mutex::new(None);

thread_local! {
    /// This thread's closed jobs that a helper was still reading, with
    /// what keeps the memory they read alive.
    static LINGERING: RefCell<Vec<(Arc<Posted>, Vec<Kept>)>> = const { RefCell::new(Vec::new()) };
}

/// Called by a thread waiting for a worker: computes one part of the
/// posted job, the last one nobody has taken. Returns at once if no job is
/// posted or every part is taken. (One part a call: the
/// caller's own poll bounds how long it helps.)
pub fn help() {
    if !POSTED.load(Ordering::Acquire) {
        return;
    }
    let posted = match BOARD.try_lock() {
        Ok(board) => board.clone(),
        Err(std::sync::TryLockError::Poisoned(board)) => board.into_inner().clone(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    let Some(posted) = posted else {
        return;
    };
    // (counted out again however this ends, a panic in `compute` included)
    let _reader = Reader::new(&posted);
    if posted.open.load(Ordering::SeqCst) {
        // the last part still free (the worker goes from the first)
        let free = posted
            .states
            .iter()
            .rposition(|s| s.load(Ordering::Acquire) == FREE);
        if let Some(part) = free {
            let state = &posted.states[part];
            if state
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: this thread won FREE → CLAIMED for `part`, so it
                // alone writes its buffer, and the worker reads it only
                // after DONE (see `Posted`).
                let out = unsafe { &mut *posted.outs[part].get() };
                out.resize(posted.job.len(part), 0.0);
                posted.job.compute(part, out);
                // (fails if the worker took the part over: the result is dropped)
                let _ = state.compare_exchange(CLAIMED, DONE, Ordering::Release, Ordering::Relaxed);
            }
        }
    }
}

/// A helper counted in a job's `readers` while it lives.
struct Reader<'a>(&'a Posted);

impl<'a> Reader<'a> {
    fn new(posted: &'a Posted) -> Self {
        posted.readers.fetch_add(1, Ordering::SeqCst);
        Reader(posted)
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `job` on this thread, letting a waiting thread compute some of its
/// parts ([`help`]), and hands every part's values to `take`, in the
/// parts' order. `keep` gives the owners of the memory `job` reads: they
/// are kept past the return while a helper still reads them.
pub fn in_parts(
    job: Arc<dyn Parts>,
    keep: impl FnOnce() -> Vec<Kept>,
    mut take: impl FnMut(usize, &[f32]),
) {
    drop_finished();
    let count = job.count();
    let mut scratch = Vec::new();
    let mut own = |part: usize, take: &mut dyn FnMut(usize, &[f32])| {
        scratch.clear();
        scratch.resize(job.len(part), 0.0);
        job.compute(part, &mut scratch);
        take(part, &scratch);
    };
    let posted = Arc::new(Posted {
        outs: (0..count).map(|_| UnsafeCell::new(Vec::new())).collect(),
        states: (0..count).map(|_| AtomicU8::new(FREE)).collect(),
        job: job.clone(),
        open: AtomicBool::new(true),
        readers: AtomicUsize::new(0),
    });
    let mut guard = Closing {
        posted: posted.clone(),
        keep: Some(keep),
        on_board: post(&posted),
    };
    // the worker's parts come first (a helper takes them from the last):
    // each is handed over as soon as it is computed
    let mut first_helped = count;
    let mut slowest = Duration::ZERO;
    for part in 0..count {
        if posted.states[part]
            .compare_exchange(FREE, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            first_helped = part;
            break;
        }
        let start = Instant::now();
        own(part, &mut take);
        slowest = slowest.max(start.elapsed());
    }
    // the helper's: wait about as long as one part took, then take over
    // what is not done
    let states = &posted.states[first_helped..];
    let all_done = || states.iter().all(|s| s.load(Ordering::Acquire) == DONE);
    if !all_done() {
        crate::wait::spin_until(slowest * 2 + Duration::from_micros(20), all_done);
    }
    let helped: Vec<bool> = states
        .iter()
        .map(|s| {
            // FREE: a helper left it (it met the worker); CLAIMED: not done
            s.compare_exchange(FREE, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
                && s.compare_exchange(CLAIMED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
        })
        .collect();
    guard.close();
    for (part, helped) in (first_helped..count).zip(helped) {
        if helped {
            // SAFETY: the part is DONE: the helper wrote its buffer before
            // its Release store and writes it no more (see `Posted`).
            let values = unsafe { &*posted.outs[part].get() };
            take(part, values);
        } else {
            own(part, &mut take);
        }
    }
}

/// The longest a worker helps another thread's run ([`worker_helps`]).
pub const HELP_AT_MOST: Duration = Duration::from_millis(2);

/// A request that a device's worker help with the parts this thread posts
/// ([`in_parts`] off the worker: crate::program's runs on the calling
/// thread): the worker calls [`help`] until the request is dropped, for at
/// most [`HELP_AT_MOST`]. Whether it comes in time only decides who
/// computes which part, never the result.
pub struct WorkerHelp {
    done: Arc<AtomicBool>,
}

/// Queues the request on `device`'s worker (which polls its queue for a
/// while after each job, so that calls back to back find it awake); `None`
/// if the worker cannot take it.
pub fn worker_helps(device: crate::device::Device) -> Option<WorkerHelp> {
    let done = Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    crate::worker::submit(
        device,
        Box::new(move || {
            crate::wait::spin_until(HELP_AT_MOST, || {
                help();
                finished.load(Ordering::Acquire)
            });
        }),
    )
    .ok()?;
    Some(WorkerHelp { done })
}

impl Drop for WorkerHelp {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

/// Posts `posted` if no other job is posted; whether it did.
fn post(posted: &Arc<Posted>) -> bool {
    let mut board = BOARD.lock().unwrap_or_else(|p| p.into_inner());
    if board.is_some() {
        return false;
    }
    *board = Some(posted.clone());
    POSTED.store(true, Ordering::Release);
    true
}

/// Takes a job off the board and closes it when its computation ends, by
/// return or by unwinding: a helper that is still reading makes the worker
/// keep the arrays (see the module's notes).
struct Closing<K: FnOnce() -> Vec<Kept>> {
    posted: Arc<Posted>,
    keep: Option<K>,
    on_board: bool,
}

impl<K: FnOnce() -> Vec<Kept>> Closing<K> {
    fn close(&mut self) {
        let Some(keep) = self.keep.take() else {
            return;
        };
        if self.on_board {
            let mut board = BOARD.lock().unwrap_or_else(|p| p.into_inner());
            POSTED.store(false, Ordering::Release);
            *board = None;
        }
        self.posted.open.store(false, Ordering::SeqCst);
        if self.posted.readers.load(Ordering::SeqCst) > 0 {
            let kept = (self.posted.clone(), keep());
            LINGERING.with(|lingering| lingering.borrow_mut().push(kept));
        }
    }
}

impl<K: FnOnce() -> Vec<Kept>> Drop for Closing<K> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Drops the arrays of this thread's closed jobs that no helper reads any
/// more. The worker runs it before it sleeps.
pub fn drop_finished() {
    LINGERING.with(|lingering| {
        if let Ok(mut lingering) = lingering.try_borrow_mut() {
            lingering.retain(|(posted, _)| posted.readers.load(Ordering::SeqCst) > 0);
        }
    });
}

/// Held by each test that posts jobs or waits (here and in
/// crate::ops::gemv): one job is posted at a time, and a test's job must be
/// the one posted (a job that is not computes every part on its worker; a
/// gated first part would wait in vain).
#[cfg(test)]
pub(crate) fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread::ThreadId;

    /// Two parts of two values, part p giving p + 1. Part 0 (on the worker)
    /// waits, up to 10 s, until a helper has claimed part 1; a helper's
    /// part 1 blocks, if `stall`, until the test lets it go.
    struct Gated {
        worker: Mutex<Option<ThreadId>>,
        claimed: Mutex<bool>,
        claimed_signal: std::sync::Condvar,
        stall: Option<Mutex<mpsc::Receiver<()>>>,
        /// The thread that computed each part, last.
        computed_by: Mutex<[Option<ThreadId>; 2]>,
    }

    impl Parts for Gated {
        fn count(&self) -> usize {
            2
        }
        fn len(&self, _part: usize) -> usize {
            2
        }
        fn compute(&self, part: usize, out: &mut [f32]) {
            let me = std::thread::current().id();
            let on_worker = *self.worker.lock().unwrap() == Some(me);
            if part == 0 {
                let claimed = self.claimed.lock().unwrap();
                let _ =
                    self.claimed_signal
                        .wait_timeout_while(claimed, Duration::from_secs(10), |c| !*c);
            } else if !on_worker {
                *self.claimed.lock().unwrap() = true;
                self.claimed_signal.notify_all();
                if let Some(stall) = &self.stall {
                    let _ = stall.lock().unwrap().recv();
                }
            }
            out.fill(part as f32 + 1.0);
            self.computed_by.lock().unwrap()[part] = Some(me);
        }
    }

    fn gated(stall: Option<mpsc::Receiver<()>>) -> Arc<Gated> {
        Arc::new(Gated {
            worker: Mutex::new(None),
            claimed: Mutex::new(false),
            claimed_signal: std::sync::Condvar::new(),
            stall: stall.map(Mutex::new),
            computed_by: Mutex::new([None, None]),
        })
    }

    /// Parts as in_parts handed them over: (part, values).
    type HandedOver = Vec<(usize, Vec<f32>)>;

    /// Runs `job` through in_parts on a thread of its own (the worker);
    /// its parts as handed over, and that thread's id.
    fn on_worker(job: Arc<Gated>) -> std::thread::JoinHandle<(HandedOver, ThreadId)> {
        std::thread::spawn(move || {
            *job.worker.lock().unwrap() = Some(std::thread::current().id());
            let mut parts = Vec::new();
            in_parts(job, Vec::new, |part, values| {
                parts.push((part, values.to_vec()))
            });
            (parts, std::thread::current().id())
        })
    }

    /// A thread that helps the worker until `stop`.
    fn helper(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<ThreadId> {
        let (ready, is_ready) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            ready.send(()).ok();
            while !stop.load(Ordering::SeqCst) {
                help();
            }
            std::thread::current().id()
        });
        is_ready.recv().ok();
        handle
    }

    const PARTS: [f32; 2] = [1.0, 2.0];

    fn expected() -> HandedOver {
        PARTS
            .iter()
            .enumerate()
            .map(|(p, &v)| (p, vec![v; 2]))
            .collect()
    }

    #[test]
    fn a_waiting_thread_computes_the_last_part() {
        let _one = one_test_at_a_time();
        let stop = Arc::new(AtomicBool::new(false));
        let helper = helper(stop.clone());
        let job = gated(None);
        let (parts, worker) = on_worker(job.clone()).join().unwrap();
        stop.store(true, Ordering::SeqCst);
        let helper = helper.join().unwrap();
        assert_eq!(parts, expected());
        assert_eq!(
            *job.computed_by.lock().unwrap(),
            [Some(worker), Some(helper)]
        );
    }

    #[test]
    fn the_worker_does_not_wait_for_a_stalled_helper() {
        let _one = one_test_at_a_time();
        let (release, stall) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let helper = helper(stop.clone());
        let job = gated(Some(stall));
        // the worker returns while the helper is blocked in part 1: it
        // computed that part itself
        let (parts, worker) = on_worker(job.clone()).join().unwrap();
        assert_eq!(parts, expected());
        assert_eq!(
            *job.computed_by.lock().unwrap(),
            [Some(worker), Some(worker)]
        );
        stop.store(true, Ordering::SeqCst);
        release.send(()).ok();
        helper.join().unwrap();
    }

    #[test]
    fn without_a_helper_the_worker_computes_every_part_in_order() {
        let _one = one_test_at_a_time();
        struct Plain(Mutex<Vec<ThreadId>>);
        impl Parts for Plain {
            fn count(&self) -> usize {
                3
            }
            fn len(&self, part: usize) -> usize {
                part + 1
            }
            fn compute(&self, part: usize, out: &mut [f32]) {
                self.0.lock().unwrap().push(std::thread::current().id());
                out.fill(part as f32);
            }
        }
        let job = Arc::new(Plain(Mutex::new(Vec::new())));
        let mut parts = Vec::new();
        in_parts(job.clone(), Vec::new, |part, values| {
            parts.push((part, values.to_vec()))
        });
        assert_eq!(
            parts,
            [(0, vec![0.0]), (1, vec![1.0; 2]), (2, vec![2.0; 3])]
        );
        let me = std::thread::current().id();
        assert_eq!(*job.0.lock().unwrap(), [me, me, me]);
    }
}
