//! Garbage-collection hints. A tensor's memory is freed when the last term
//! referring to it is garbage-collected, and the BEAM does not know how large
//! a tensor is: a process that makes big tensors and drops them can hold
//! gigabytes of garbage (GPU memory included) until its heap fills up, and
//! MLX has to allocate fresh memory meanwhile instead of reusing what was
//! freed. So the bytes of the arrays given to the BEAM are counted; when they
//! pass a threshold since the last hint, the next tensor-producing NIF's reply
//! carries a hint (the NIF crate's `reply::Submitted`), and `ExMLX.Call`
//! collects the caller's garbage. A threshold of 0 turns the hints off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The default threshold: 512 MiB of arrays between hints.
pub const DEFAULT_THRESHOLD: u64 = 512 << 20;

static THRESHOLD: AtomicU64 = AtomicU64::new(DEFAULT_THRESHOLD);
static SINCE_HINT: AtomicU64 = AtomicU64::new(0);
static DUE: AtomicBool = AtomicBool::new(false);

/// Sets the threshold in bytes (0: no hints); returns the previous one.
pub fn set_threshold(bytes: u64) -> u64 {
    SINCE_HINT.store(0, Ordering::Relaxed);
    DUE.store(false, Ordering::Relaxed);
    THRESHOLD.swap(bytes, Ordering::Relaxed)
}

pub fn threshold() -> u64 {
    THRESHOLD.load(Ordering::Relaxed)
}

/// Counts an array of `bytes` handed to the BEAM.
pub fn allocated(bytes: usize) {
    let threshold = THRESHOLD.load(Ordering::Relaxed);
    if threshold == 0 {
        return;
    }
    let total = SINCE_HINT.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
    if total >= threshold {
        SINCE_HINT.store(0, Ordering::Relaxed);
        DUE.store(true, Ordering::Relaxed);
    }
}

/// Whether a hint is due; the first caller to see it takes it.
pub fn take_hint() -> bool {
    DUE.load(Ordering::Relaxed) && DUE.swap(false, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    // (one test: the counters are global)
    #[test]
    fn a_hint_comes_once_per_threshold_of_bytes() {
        set_threshold(100);
        allocated(60);
        assert!(!take_hint());
        allocated(60);
        assert!(take_hint());
        assert!(!take_hint(), "taken once");
        allocated(99);
        assert!(!take_hint(), "counting restarted at the hint");
        assert_eq!(set_threshold(0), 100);
        allocated(1 << 40);
        assert!(!take_hint(), "threshold 0: no hints");
        set_threshold(DEFAULT_THRESHOLD);
    }
}
