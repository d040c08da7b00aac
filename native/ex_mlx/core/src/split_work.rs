//! Work in parts that a thread waiting for the worker may share: the
//! caller's scheduler thread that polls in its NIF for a result
//! (`ex_mlx::reply`, up to 60 µs) otherwise spins on the other core.
//!
//! The worker posts a [`Parts`] job and computes its parts from the first
//! on; a poller that calls [`help`] meanwhile claims parts from the last
//! on, one a call, each into a buffer of the job's own, until it meets the
//! worker.
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
//! the arrays the job reads ([`in_parts`]'s `keep`) until the count is back
//! to zero ([`drop_finished`], run by the worker before it sleeps and at
//! its next split).
//!
//! Measured on the project's 2-core CPU machine (bench/README.md, session
//! 18): the products of a batch-1 MLP 784-512-512-10, rows split in
//! halves, 31.6 µs on one thread and 14.8 µs with a second thread taking
//! the second half (each core keeps its half of the weights in its own
//! 2 MB L2).

use std::cell::{RefCell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlx_rs::Array;

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
    /// A helper's result for each part it claimed.
    outs: Vec<UnsafeCell<Vec<f32>>>,
}

// SAFETY: `outs[i]` is written only by the one helper whose
// compare-exchange moved `states[i]` from FREE to CLAIMED, and read by the
// worker only after it saw DONE there (the helper's Release store after
// its last write); every other field is atomic or immutable, and `job` is
// `Send + Sync`.
unsafe impl Sync for Posted {}

/// Whether a job is posted (checked before the board's lock).
static POSTED: AtomicBool = AtomicBool::new(false);
/// The posted job, if any (one worker posts at a time; others compute alone).
static BOARD: Mutex<Option<Arc<Posted>>> = Mutex::new(None);

thread_local! {
    /// This worker's closed jobs that a helper was still reading, with the
    /// arrays that keep what they read alive.
    static LINGERING: RefCell<Vec<(Arc<Posted>, Vec<Array>)>> = const { RefCell::new(Vec::new()) };
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
        Err(_) => return,
    };
    let Some(posted) = posted else {
        return;
    };
    posted.readers.fetch_add(1, Ordering::SeqCst);
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
                posted.job.compute(part, out);
                // (fails if the worker took the part over: the result is dropped)
                let _ = state.compare_exchange(CLAIMED, DONE, Ordering::Release, Ordering::Relaxed);
            }
        }
    }
    posted.readers.fetch_sub(1, Ordering::SeqCst);
}

/// Runs `job` on this thread, letting a waiting thread compute some of its
/// parts ([`help`]); returns every part's values, in order. `keep` gives
/// the arrays whose buffers `job` reads: they are kept past the return
/// while a helper still reads them.
pub fn in_parts(job: Arc<dyn Parts>, keep: impl FnOnce() -> Vec<Array>) -> Vec<Vec<f32>> {
    drop_finished();
    let count = job.count();
    let posted = Arc::new(Posted {
        outs: (0..count)
            .map(|part| UnsafeCell::new(vec![0.0; job.len(part)]))
            .collect(),
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
    let mut parts: Vec<Option<Vec<f32>>> = vec![None; count];
    let mut slowest = Duration::ZERO;
    for (part, slot) in parts.iter_mut().enumerate() {
        if posted.states[part]
            .compare_exchange(FREE, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let start = Instant::now();
            let mut out = vec![0.0; job.len(part)];
            job.compute(part, &mut out);
            slowest = slowest.max(start.elapsed());
            *slot = Some(out);
        }
    }
    // the helper's parts: wait about as long as one part took, then take
    // over what is not done
    let limit = slowest * 2 + Duration::from_micros(20);
    let states = &posted.states;
    let all_done = || {
        states
            .iter()
            .all(|s| matches!(s.load(Ordering::Acquire), TAKEN | DONE))
    };
    if !all_done() {
        crate::worker::poll_until(limit, all_done);
    }
    let helped: Vec<bool> = states
        .iter()
        .map(|s| {
            s.load(Ordering::Acquire) == DONE
                || (s.load(Ordering::Acquire) == CLAIMED
                    && s.compare_exchange(CLAIMED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                        .is_err())
        })
        .collect();
    guard.close();
    parts
        .into_iter()
        .zip(helped)
        .enumerate()
        .map(|(part, (own, helped))| match own {
            Some(out) => out,
            None if helped => {
                // SAFETY: the part is DONE: the helper wrote its buffer
                // before its Release store and writes it no more (see
                // `Posted`).
                std::mem::take(unsafe { &mut *posted.outs[part].get() })
            }
            None => {
                let mut out = vec![0.0; job.len(part)];
                job.compute(part, &mut out);
                out
            }
        })
        .collect()
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
struct Closing<K: FnOnce() -> Vec<Array>> {
    posted: Arc<Posted>,
    keep: Option<K>,
    on_board: bool,
}

impl<K: FnOnce() -> Vec<Array>> Closing<K> {
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

impl<K: FnOnce() -> Vec<Array>> Drop for Closing<K> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Half h writes `len` copies of h + 1, after sleeping `delay[h]`.
    struct Sleepy {
        len: usize,
        delay: [Duration; 2],
        calls: [AtomicU32; 2],
    }

    impl Parts for Sleepy {
        fn count(&self) -> usize {
            2
        }
        fn len(&self, _half: usize) -> usize {
            self.len
        }
        fn compute(&self, half: usize, out: &mut [f32]) {
            self.calls[half].fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(self.delay[half]);
            out.fill(half as f32 + 1.0);
        }
    }

    fn sleepy(delay: [u64; 2]) -> Arc<Sleepy> {
        Arc::new(Sleepy {
            len: 3,
            delay: delay.map(Duration::from_millis),
            calls: [AtomicU32::new(0), AtomicU32::new(0)],
        })
    }

    /// Runs `job` on a thread of its own while this thread helps until it
    /// is done; the halves, and how often each was computed.
    fn run_helped(job: Arc<Sleepy>) -> (Vec<Vec<f32>>, [u32; 2]) {
        let worker_job = job.clone();
        let worker = std::thread::spawn(move || in_parts(worker_job, Vec::new));
        while !worker.is_finished() {
            help();
        }
        let halves = worker.join().unwrap();
        (
            halves,
            job.calls.each_ref().map(|c| c.load(Ordering::SeqCst)),
        )
    }

    /// Held by each test here: one job is posted at a time, and a test's
    /// job must be the one posted (a job that is not computes both halves
    /// on its worker; the gated test's first half would wait in vain).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn a_helper_computes_the_second_half() {
        let _one = one_at_a_time();
        let job = sleepy([50, 0]);
        let (halves, calls) = run_helped(job);
        assert_eq!(halves, [vec![1.0; 3], vec![2.0; 3]]);
        assert_eq!(calls, [1, 1]);
    }

    /// Half 0 waits (up to 10 s) until a helper has claimed half 1; a
    /// helper's half 1 then blocks until the test lets it go, which it
    /// does only after the worker returned.
    struct Gated {
        claimed: Mutex<bool>,
        claimed_signal: std::sync::Condvar,
        release: std::sync::mpsc::Receiver<()>,
        worker: Mutex<Option<std::thread::ThreadId>>,
    }

    // SAFETY (test only): the receiver is used by one helper at a time (a
    // half is claimed once), under the `claimed` lock's protocol.
    unsafe impl Sync for Gated {}

    impl Parts for Gated {
        fn count(&self) -> usize {
            2
        }
        fn len(&self, _half: usize) -> usize {
            2
        }
        fn compute(&self, half: usize, out: &mut [f32]) {
            let on_worker = *self.worker.lock().unwrap() == Some(std::thread::current().id());
            if half == 0 {
                let claimed = self.claimed.lock().unwrap();
                let _ =
                    self.claimed_signal
                        .wait_timeout_while(claimed, Duration::from_secs(10), |c| !*c);
            } else if !on_worker {
                *self.claimed.lock().unwrap() = true;
                self.claimed_signal.notify_all();
                let _ = self.release.recv();
            }
            out.fill(half as f32 + 1.0);
        }
    }

    #[test]
    fn the_worker_does_not_wait_for_a_stalled_helper() {
        let _one = one_at_a_time();
        let (release, gate) = std::sync::mpsc::channel();
        let job = Arc::new(Gated {
            claimed: Mutex::new(false),
            claimed_signal: std::sync::Condvar::new(),
            release: gate,
            worker: Mutex::new(None),
        });
        let worker_job = job.clone();
        let worker = std::thread::spawn(move || {
            *worker_job.worker.lock().unwrap() = Some(std::thread::current().id());
            in_parts(worker_job, Vec::new)
        });
        let helper = std::thread::spawn(|| {
            for _ in 0..100_000 {
                help();
            }
        });
        // the worker returns while the helper is still blocked in its half
        let halves = worker.join().unwrap();
        assert_eq!(halves, [vec![1.0; 2], vec![2.0; 2]]);
        release.send(()).ok();
        helper.join().unwrap();
    }

    #[test]
    fn without_helpers_the_worker_computes_both() {
        let _one = one_at_a_time();
        let job = sleepy([0, 0]);
        let halves = in_parts(job.clone(), Vec::new);
        assert_eq!(halves, [vec![1.0; 3], vec![2.0; 3]]);
        assert_eq!(
            job.calls.each_ref().map(|c| c.load(Ordering::SeqCst)),
            [1, 1]
        );
    }
}
