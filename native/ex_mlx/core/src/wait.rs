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
    let _spinning = Busy::new(1);
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
/// own that ExMLX knows to be busy ([`Busy`]) and one for the calling
/// thread, is at least the number of online cores. Read from
/// `/proc/loadavg` at most once per [`CACHE_FOR`]; `false` where it cannot
/// be read (waiters then spin within their limits, as on a machine with
/// cores to spare).
///
/// ExMLX's own threads are left out of the count: a waiter that spins
/// while the threads it waits for run beside it is what spinning is for
/// (blocking every waiter made the quiet eager loop of
/// docs/decisions/0001-waiting-on-a-busy-machine.md slower).
pub fn saturated() -> bool {
    let now = clock_micros();
    let last = SATURATION.load(Ordering::Relaxed);
    if now.saturating_sub(last >> 1) < CACHE_FOR.as_micros() as u64 {
        return last & 1 == 1;
    }
    let own = OWN_BUSY.load(Ordering::Relaxed) + 1;
    let busy =
        runnable_threads().is_some_and(|running| running.saturating_sub(own) >= *ONLINE_CORES);
    SATURATION.store((now << 1) | u64::from(busy), Ordering::Relaxed);
    busy
}

/// ExMLX's threads that are runnable now, by ExMLX's own count: spinning
/// waiters, and for a worker running a job, the worker and the MLX thread
/// its evaluation may wake (MLX's CPU stream thread).
static OWN_BUSY: AtomicUsize = AtomicUsize::new(0);

/// Counts `threads` of ExMLX's as busy while it lives (see [`saturated`]).
pub struct Busy(usize);

impl Busy {
    pub fn new(threads: usize) -> Busy {
        OWN_BUSY.fetch_add(threads, Ordering::Relaxed);
        Busy(threads)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        OWN_BUSY.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// How long one reading of the machine's load is used.
const CACHE_FOR: Duration = Duration::from_micros(500);

/// The last reading: the time it was made (microseconds since [`EPOCH`])
/// shifted left by one, and whether the machine was saturated in the low
/// bit. Zero: never read.
static SATURATION: AtomicU64 = AtomicU64::new(0);

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
    fn a_saturated_machine_gets_no_spinning() {
        // one look at the condition, and no spinning
        assert_eq!(looks(0, true), (false, 1));
        assert_eq!(looks(1, true), (true, 1));
    }
}
