//! How one thread waits for another: it spins while the machine has cores
//! that ExMLX's threads can have, and otherwise blocks.
//!
//! Hand-offs between a BEAM scheduler, a device's worker and MLX's threads
//! are short (microseconds), and waking a thread that went to sleep costs
//! about as much again, so a waiter first spins, giving its core to the
//! threads it waits for (often ExMLX's own, on a 2-core machine) with
//! `sched_yield` every few microseconds. That pays only while no other
//! process's threads want the cores. When every core has a runnable thread
//! of another process (a CPU-bound process per core, a training job beside a
//! notebook), Linux's EEVDF scheduler charges each `sched_yield` as a whole
//! time slice, and a thread that yields in a loop then waits milliseconds
//! behind those processes for every hand-off
//! (docs/decisions/0001-waiting-on-a-busy-machine.md). So a waiter spins only
//! while [`saturated`] is false, and otherwise blocks on a futex (a
//! channel's `recv`, `std::thread::park`): a thread woken from a futex is
//! placed on a core ahead of the CPU-bound processes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use once_cell::sync::Lazy;

/// Spins until `ready()` holds or `limit` has passed, whichever is first;
/// whether it holds, yielding its core every [`RECHECK`]. It stops early,
/// returning `ready()`'s last answer, when other processes' threads take
/// every core ([`saturated`]): the caller then blocks instead.
pub fn spin_until(limit: Duration, ready: impl FnMut() -> bool) -> bool {
    spin_while_cores_spare(limit, ready, saturated)
}

fn spin_while_cores_spare(
    limit: Duration,
    mut ready: impl FnMut() -> bool,
    saturated: impl Fn() -> bool,
) -> bool {
    if ready() {
        return true;
    }
    if limit.is_zero() || saturated() {
        return false;
    }
    let _spinning = Busy::this_thread();
    let start = Instant::now();
    let mut checked = start;
    loop {
        if ready() {
            return true;
        }
        let now = Instant::now();
        if now.duration_since(start) >= limit {
            return false;
        }
        if now.duration_since(checked) >= RECHECK {
            if saturated() {
                return ready();
            }
            checked = now;
            // (the threads it waits for may be ExMLX's own, on this core:
            // with no foreign thread runnable, a yield costs nothing and
            // lets them run)
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// How often a spinning thread yields its core and asks again whether the
/// machine is saturated (the answer is cached: [`CACHE_FOR`]).
const RECHECK: Duration = Duration::from_micros(2);

/// Whether every core of the machine is taken by threads that are not
/// ExMLX's: the kernel's count of runnable threads, less the threads of
/// this process that are surely runnable ([`Busy`], and the calling thread,
/// counted once), is at least the number of online cores. Read from
/// `/proc/loadavg` at most once per [`CACHE_FOR`]; `false` where it cannot
/// be read (waiters then spin within their limits, as on a machine with
/// cores to spare).
///
/// ExMLX's own threads are left out of the count: a waiter that spins
/// while the threads it waits for run beside it is what spinning is for
/// (blocking every waiter made the quiet eager loop of
/// docs/decisions/0001-waiting-on-a-busy-machine.md slower). MLX's stream
/// threads, which may or may not be running, are not left out: where the
/// count is unsure, a waiter blocks (a waiter that spins on a saturated
/// machine yields behind other processes for milliseconds).
pub fn saturated() -> bool {
    saturated_with(foreign_runnable().most, *ONLINE_CORES)
}

fn saturated_with(foreign: usize, cores: usize) -> bool {
    foreign >= cores
}

/// Whether fewer than two cores are free of other processes' runnable
/// threads: too few for a hand-off between two of ExMLX's threads to be
/// spun for, as a calling thread and a worker each spin while the other
/// works. A calling thread then runs a worker's small work itself
/// (crate::worker::run_on_caller). Counted as for [`saturated`], but with
/// MLX's stream threads that may be running left out too: where the count
/// is unsure, work stays on the worker, as on a quiet machine.
pub fn crowded() -> bool {
    crowded_with(foreign_runnable().least, *ONLINE_CORES)
}

fn crowded_with(foreign: usize, cores: usize) -> bool {
    foreign + 2 > cores
}

/// Other processes' runnable threads: at least `least`, at most `most`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Foreign {
    least: usize,
    most: usize,
}

/// Other processes' runnable threads by the kernel's count less ExMLX's own
/// (see [`saturated`]); 0 where it cannot be read. Read at most once per
/// [`CACHE_FOR`]. ExMLX's own are the threads counted by [`Busy`] and the
/// reading thread, which is runnable as it reads (counted once, whether a
/// [`Busy`] of its own counts it already or not), and, for `least`, the MLX
/// stream threads that [`Busy::running_mlx_work`] says may be running.
fn foreign_runnable() -> Foreign {
    let now = clock_micros();
    let last = READ_AT.load(Ordering::Acquire);
    if now.saturating_sub(last) < CACHE_FOR.as_micros() as u64 {
        let counts = READING.load(Ordering::Relaxed);
        return Foreign {
            least: (counts & COUNT_MASK) as usize,
            most: (counts >> COUNT_BITS) as usize,
        };
    }
    let sure = OWN_BUSY.load(Ordering::Relaxed) + usize::from(!counted_as_busy());
    let foreign = foreign_given(runnable_threads(), sure, MLX_MAYBE.load(Ordering::Relaxed));
    // (a reader between the two stores may pair the new time with the
    // previous counts: a reading 500 µs older, as good as a cached one)
    let counts = ((foreign.most as u32) << COUNT_BITS) | foreign.least as u32;
    READING.store(counts, Ordering::Relaxed);
    READ_AT.store(now, Ordering::Release);
    foreign
}

/// [`Foreign`] for the kernel's `runnable` count, `sure` threads of ExMLX's
/// surely runnable and `maybe` more that may be.
fn foreign_given(runnable: Option<usize>, sure: usize, maybe: usize) -> Foreign {
    let most = runnable
        .map_or(0, |running| running.saturating_sub(sure))
        .min(COUNT_MASK as usize);
    Foreign {
        least: most.saturating_sub(maybe),
        most,
    }
}

/// ExMLX's threads that are surely runnable now, by ExMLX's own count: each
/// thread holding a [`Busy`] counts one.
static OWN_BUSY: AtomicUsize = AtomicUsize::new(0);

/// MLX's stream threads that may be running now: one for each thread
/// holding a [`Busy::running_mlx_work`].
static MLX_MAYBE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How many live [`Busy`] guards this thread holds, and how many of
    /// them are [`Busy::running_mlx_work`].
    static SELF_COUNTED: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Whether a [`Busy`] of the calling thread counts it now.
fn counted_as_busy() -> bool {
    SELF_COUNTED.with(|c| c.get().0) > 0
}

/// Counts the calling thread as one of ExMLX's runnable threads while it
/// lives (see [`saturated`]); a thread holding several, nested, is counted
/// once.
pub struct Busy {
    mlx: bool,
}

impl Busy {
    /// A spinning waiter.
    pub fn this_thread() -> Busy {
        Busy::counting(false)
    }

    /// A thread running MLX work (a worker's job, a caller's small work):
    /// it, and MLX's CPU stream thread, which its evaluations wake and
    /// which may be running beside it.
    pub fn running_mlx_work() -> Busy {
        Busy::counting(true)
    }

    fn counting(mlx: bool) -> Busy {
        let (first, first_mlx) = SELF_COUNTED.with(|c| {
            let (all, with_mlx) = c.get();
            c.set((all + 1, with_mlx + usize::from(mlx)));
            (all == 0, mlx && with_mlx == 0)
        });
        if first {
            OWN_BUSY.fetch_add(1, Ordering::Relaxed);
        }
        if first_mlx {
            MLX_MAYBE.fetch_add(1, Ordering::Relaxed);
        }
        Busy { mlx }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mlx = self.mlx;
        let (last, last_mlx) = SELF_COUNTED.with(|c| {
            let (all, with_mlx) = c.get();
            c.set((all - 1, with_mlx - usize::from(mlx)));
            (all == 1, mlx && with_mlx == 1)
        });
        if last {
            OWN_BUSY.fetch_sub(1, Ordering::Relaxed);
        }
        if last_mlx {
            MLX_MAYBE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// How long one reading of the machine's load is used.
const CACHE_FOR: Duration = Duration::from_micros(500);

/// When the last reading was made (microseconds since [`EPOCH`]); zero:
/// never.
static READ_AT: AtomicU64 = AtomicU64::new(0);

/// The last reading: the other processes' runnable threads at most, shifted
/// left by [`COUNT_BITS`], and at least (each at most [`COUNT_MASK`]).
static READING: AtomicU32 = AtomicU32::new(0);

const COUNT_BITS: u32 = 16;
const COUNT_MASK: u32 = (1 << COUNT_BITS) - 1;

static EPOCH: Lazy<Instant> = Lazy::new(Instant::now);

fn clock_micros() -> u64 {
    // (one microsecond past the epoch at least, so that a first reading
    // made at the epoch is not taken for "never read")
    EPOCH.elapsed().as_micros() as u64 + CACHE_FOR.as_micros() as u64
}

static ONLINE_CORES: Lazy<usize> =
    Lazy::new(|| std::thread::available_parallelism().map_or(1, |n| n.get()));

/// The number of runnable threads on the machine: the fourth field of
/// `/proc/loadavg` is `running/total`.
#[cfg(target_os = "linux")]
fn runnable_threads() -> Option<usize> {
    use std::io::Read;
    let mut text = [0u8; 128];
    let mut file = std::fs::File::open("/proc/loadavg").ok()?;
    let n = file.read(&mut text).ok()?;
    parse_runnable(std::str::from_utf8(&text[..n]).ok()?)
}

#[cfg(not(target_os = "linux"))]
fn runnable_threads() -> Option<usize> {
    None
}

/// The running count of a `/proc/loadavg` line (`"0.52 0.58 0.59 3/467 12345"`).
fn parse_runnable(line: &str) -> Option<usize> {
    let field = line.split_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_count_is_read_from_a_loadavg_line() {
        assert_eq!(parse_runnable("0.52 0.58 0.59 3/467 12345\n"), Some(3));
        assert_eq!(parse_runnable("1.00 1.00 1.00 12/90 1"), Some(12));
        assert_eq!(parse_runnable("0.52 0.58"), None);
        assert_eq!(parse_runnable("0.52 0.58 0.59 x/467 1"), None);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_machine_reports_at_least_the_reading_thread() {
        assert!(runnable_threads().is_some_and(|n| n >= 1));
    }

    /// [`spin_while_cores_spare`] over 10 s for a condition that comes true
    /// at its `true_at`-th look (never for 0), on a machine `saturated` or
    /// not: its answer, and how many looks it took.
    fn looks(true_at: usize, saturated: bool) -> (bool, usize) {
        let mut looks = 0;
        let ready = || {
            looks += 1;
            looks == true_at
        };
        let came_true = spin_while_cores_spare(Duration::from_secs(10), ready, || saturated);
        (came_true, looks)
    }

    #[test]
    fn spin_until_reports_whether_the_condition_came_true() {
        let spare = || false;
        assert_eq!(looks(3, false), (true, 3));
        let limit = Duration::from_millis(2);
        let start = Instant::now();
        assert!(!spin_while_cores_spare(limit, || false, spare));
        assert!(start.elapsed() >= limit);
        assert!(!spin_while_cores_spare(Duration::ZERO, || false, spare));
        assert!(spin_while_cores_spare(Duration::ZERO, || true, spare));
    }

    #[test]
    fn a_machine_is_crowded_with_fewer_than_two_cores_free_of_other_processes() {
        // 2 cores: quiet, one busy, both busy
        assert!(!crowded_with(0, 2));
        assert!(crowded_with(1, 2));
        assert!(crowded_with(2, 2) && saturated_with(2, 2));
        assert!(!saturated_with(1, 2));
        // 8 cores: crowded from 7 busy on, saturated from 8
        assert!(!crowded_with(6, 8) && crowded_with(7, 8));
        assert!(!saturated_with(7, 8) && saturated_with(8, 8));
        // one core: always crowded (no hand-off is worth spinning for)
        assert!(crowded_with(0, 1));
    }

    #[test]
    fn a_thread_holding_nested_guards_is_counted_once_until_the_last_goes() {
        // (a test thread of its own: its guards are its alone)
        std::thread::spawn(|| {
            let counts = || SELF_COUNTED.with(|c| c.get());
            assert!(!counted_as_busy());
            let work = Busy::running_mlx_work();
            let spin = Busy::this_thread();
            let inner_work = Busy::running_mlx_work();
            assert!(counted_as_busy());
            assert_eq!(counts(), (3, 2));
            drop(work);
            drop(inner_work);
            assert!(counted_as_busy());
            assert_eq!(counts(), (1, 0));
            drop(spin);
            assert!(!counted_as_busy());
            assert_eq!(counts(), (0, 0));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn mlx_threads_that_may_run_count_only_toward_the_least() {
        // 2 cores, two CPU-bound processes; ExMLX: a caller spinning (sure)
        // for a worker running a job (sure) whose MLX thread is idle, so the
        // kernel counts 4 runnable threads: saturated, though the MLX thread
        // might have been running
        let foreign = foreign_given(Some(4), 2, 1);
        assert_eq!(foreign, Foreign { least: 1, most: 2 });
        assert!(saturated_with(foreign.most, 2) && crowded_with(foreign.least, 2));
        // quiet: the same ExMLX threads and the MLX thread running (3): not
        // saturated, and not crowded (the MLX thread may be that one)
        let foreign = foreign_given(Some(3), 2, 1);
        assert!(!saturated_with(foreign.most, 2) && !crowded_with(foreign.least, 2));
        // unreadable: as on a quiet machine
        assert_eq!(foreign_given(None, 2, 1), Foreign { least: 0, most: 0 });
    }

    #[test]
    fn a_saturated_machine_gets_no_spinning() {
        // one look at the condition, and no spinning
        assert_eq!(looks(0, true), (false, 1));
        assert_eq!(looks(1, true), (true, 1));
    }
}
