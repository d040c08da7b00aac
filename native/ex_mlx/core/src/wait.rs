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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
/// ExMLX's: the kernel's count of runnable threads, less this process's
/// own that ExMLX knows to be busy ([`Busy`]) and the calling thread
/// (counted once: [`foreign_runnable`]), is at least the number of online cores. Read from
/// `/proc/loadavg` at most once per [`CACHE_FOR`]; `false` where it cannot
/// be read (waiters then spin within their limits, as on a machine with
/// cores to spare).
///
/// ExMLX's own threads are left out of the count: a waiter that spins
/// while the threads it waits for run beside it is what spinning is for
/// (blocking every waiter made the quiet eager loop of
/// docs/decisions/0001-waiting-on-a-busy-machine.md slower).
pub fn saturated() -> bool {
    saturated_with(foreign_runnable(), *ONLINE_CORES)
}

fn saturated_with(foreign: usize, cores: usize) -> bool {
    foreign >= cores
}

/// Whether fewer than two cores are free of other processes' runnable
/// threads (counted as for [`saturated`]): too few for a hand-off between
/// two of ExMLX's threads to be spun for, as a calling thread and a worker
/// each spin while the other works. A calling thread then runs a worker's
/// small work itself (crate::worker::run_on_caller).
pub fn crowded() -> bool {
    crowded_with(foreign_runnable(), *ONLINE_CORES)
}

fn crowded_with(foreign: usize, cores: usize) -> bool {
    foreign + 2 > cores
}

/// Other processes' runnable threads, by the kernel's count less ExMLX's
/// own (see [`saturated`]); 0 where it cannot be read. Read at most once
/// per [`CACHE_FOR`]. ExMLX's own are the threads counted by [`Busy`] and
/// the reading thread, which is runnable as it reads: counted once, whether
/// a [`Busy`] of its own counts it already (a spinning waiter, a worker
/// running a job) or not (a caller about to wait). An undercount of ExMLX's
/// own makes waiters block where they could have spun; an overcount made
/// them yield behind other processes for milliseconds.
fn foreign_runnable() -> usize {
    let now = clock_micros();
    let last = READING.load(Ordering::Relaxed);
    if now.saturating_sub(last >> READING_BITS) < CACHE_FOR.as_micros() as u64 {
        return (last & READING_MASK) as usize;
    }
    let own = OWN_BUSY.load(Ordering::Relaxed) + usize::from(!counted_as_busy());
    let foreign = runnable_threads()
        .map_or(0, |running| running.saturating_sub(own))
        .min(READING_MASK as usize);
    READING.store((now << READING_BITS) | foreign as u64, Ordering::Relaxed);
    foreign
}

/// ExMLX's threads that are runnable now, by ExMLX's own count: each
/// [`Busy`] counts one.
static OWN_BUSY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How many live [`Busy`] guards this thread holds.
    static SELF_COUNTED: Cell<usize> = const { Cell::new(0) };
}

/// Whether a [`Busy`] of the calling thread counts it now.
fn counted_as_busy() -> bool {
    SELF_COUNTED.with(|c| c.get()) > 0
}

/// Counts the calling thread as one of ExMLX's runnable threads while it
/// lives (see [`saturated`]): a spinning waiter, or a thread running MLX
/// work (a worker's job, a caller's small work). A thread running MLX work
/// is counted once with MLX's CPU stream thread, which it wakes: while the
/// stream thread computes an evaluation, the thread that asked for it
/// waits for it, asleep, so the two are one runnable thread at a time.
pub struct Busy(());

impl Busy {
    /// (a thread holding several, nested, is counted once)
    pub fn this_thread() -> Busy {
        let outermost = SELF_COUNTED.with(|c| {
            c.set(c.get() + 1);
            c.get() == 1
        });
        if outermost {
            OWN_BUSY.fetch_add(1, Ordering::Relaxed);
        }
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let outermost = SELF_COUNTED.with(|c| {
            c.set(c.get() - 1);
            c.get() == 0
        });
        if outermost {
            OWN_BUSY.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// How long one reading of the machine's load is used.
const CACHE_FOR: Duration = Duration::from_micros(500);

/// The last reading: the time it was made (microseconds since [`EPOCH`])
/// shifted left by [`READING_BITS`], and the other processes' runnable
/// threads in the low bits (at most [`READING_MASK`]). Zero: never read.
static READING: AtomicU64 = AtomicU64::new(0);

const READING_BITS: u32 = 16;
const READING_MASK: u64 = (1 << READING_BITS) - 1;

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
            assert!(!counted_as_busy());
            let outer = Busy::this_thread();
            let inner = Busy::this_thread();
            assert!(counted_as_busy());
            drop(outer);
            assert!(counted_as_busy());
            drop(inner);
            assert!(!counted_as_busy());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_saturated_machine_gets_no_spinning() {
        // one look at the condition, and no spinning
        assert_eq!(looks(0, true), (false, 1));
        assert_eq!(looks(1, true), (true, 1));
    }
}
