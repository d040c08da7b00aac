//! MLX's memory statistics and limits (global to the process, thread-safe in
//! MLX: the allocator takes its own lock).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::device::Device;
use crate::error::{Error, Result};

/// Memory figures in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub active: usize,
    pub peak: usize,
    pub cache: usize,
    pub memory_limit: usize,
}

pub fn stats() -> Result<Stats> {
    Ok(Stats {
        active: mlx_rs::memory::active_memory()?,
        peak: mlx_rs::memory::peak_memory()?,
        cache: mlx_rs::memory::cache_memory()?,
        memory_limit: mlx_rs::memory::memory_limit()?,
    })
}

pub fn reset_peak() -> Result<()> {
    Ok(mlx_rs::memory::reset_peak_memory()?)
}

pub fn clear_cache() -> Result<()> {
    Ok(mlx_rs::memory::clear_cache()?)
}

/// The largest block glibc's `malloc` serves from its heap, and the free
/// space at the heap's top it keeps, after [`tune_host_malloc`]: the values
/// glibc's own adaptive thresholds reach at most on 64-bit Linux (32 MiB and
/// twice that; mallopt(3), `M_MMAP_THRESHOLD`).
pub const MALLOC_MMAP_THRESHOLD: usize = 32 << 20;
pub const MALLOC_TRIM_THRESHOLD: usize = 64 << 20;

/// Sets glibc's `malloc` thresholds to [`MALLOC_MMAP_THRESHOLD`] and
/// [`MALLOC_TRIM_THRESHOLD`]; whether the C library took them (false where it
/// is not glibc).
///
/// MLX's CPU buffers, and the 528 KiB of bookkeeping OpenBLAS allocates on
/// each threaded matrix product, come from `malloc`. In a plain process
/// glibc raises its thresholds as such blocks are freed, and they come from
/// the heap after the first. In the BEAM they stay at 128 KiB: every such
/// block was a fresh `mmap` (strace showed one per product), paid for again
/// in page faults and an `munmap` (docs/decisions/0005-nif-allocator.md).
pub fn tune_host_malloc() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes two of glibc's malloc parameters; it
        // takes the allocator's lock and is safe to call from any thread.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD as libc::c_int) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD as libc::c_int) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Refuses to allocate `bytes` when that would take MLX's active memory past
/// its memory limit.
///
/// MLX's CPU allocator treats the limit as advice and allocates anyway (a
/// 256 MB array under a 64 MB limit), and with the OS overcommitting memory
/// an allocation too large for the machine ends in the OOM killer, not in an
/// error. ExMLX therefore checks every new buffer it creates, before MLX
/// allocates it. Buffers MLX allocates for intermediate results inside one
/// evaluation are not seen here; a `malloc` failure there is an MLX error.
///
/// Reading MLX's active memory takes its allocator's lock, which on a GPU
/// MLX's completion thread holds often (it frees buffers there). So each
/// thread asks MLX once and then allocates from an allowance ([`Allowance`]):
/// an eighth of the room that check found, at most [`MAX_ALLOWANCE`], spent
/// without asking again; a larger tensor, an allowance spent, or a new
/// memory limit sends the next check to MLX. What one thread allocates
/// between two checks stays within an eighth of the room it saw.
pub fn check_allocation(bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let epoch = LIMIT_EPOCH.load(Ordering::Acquire);
    if let Some(rest) = ALLOWANCE.get().spend(epoch, bytes) {
        ALLOWANCE.set(rest);
        return Ok(());
    }
    let limit = memory_limit()?;
    let active = mlx_rs::memory::active_memory()?;
    let allowance = Allowance::grant(epoch, active, limit, bytes)?;
    ALLOWANCE.set(allowance);
    Ok(())
}

/// The most a thread allocates between two checks of MLX's active memory.
pub const MAX_ALLOWANCE: usize = 16 << 20;

thread_local! {
    /// This thread's allowance (see [`check_allocation`]).
    static ALLOWANCE: Cell<Allowance> = const { Cell::new(Allowance { epoch: 0, bytes: 0 }) };
}

/// Bumped by every [`set_memory_limit`]: allowances granted before it are void.
static LIMIT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Bytes a thread may allocate without asking MLX, granted under the memory
/// limit of `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Allowance {
    epoch: u64,
    bytes: usize,
}

impl Allowance {
    /// What is left after allocating `bytes` from this allowance, if it
    /// covers them under the limit of `epoch`.
    fn spend(self, epoch: u64, bytes: usize) -> Option<Allowance> {
        (self.epoch == epoch && bytes <= self.bytes).then(|| Allowance {
            epoch,
            bytes: self.bytes - bytes,
        })
    }

    /// The check against MLX's figures: the allowance left after `bytes`
    /// (an eighth of the room then left, at most [`MAX_ALLOWANCE`]), or the
    /// error when `bytes` do not fit.
    fn grant(epoch: u64, active: usize, limit: usize, bytes: usize) -> Result<Allowance> {
        let Some(room) = limit.checked_sub(active.saturating_add(bytes)) else {
            return Err(Error::OutOfMemory(format!(
                "a tensor of {bytes} bytes would exceed the memory limit of {limit} bytes \
                 ({active} bytes are in use); free tensors, or raise the limit with \
                 ExMLX.Memory.set_memory_limit/1"
            )));
        };
        Ok(Allowance {
            epoch,
            bytes: (room / 8).min(MAX_ALLOWANCE),
        })
    }
}

/// MLX's memory limit, remembered here (0: not read yet) so the check of
/// every new tensor takes one lock of MLX's allocator, not two. Only
/// [`set_memory_limit`] changes the limit.
static MEMORY_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The memory limit.
pub fn memory_limit() -> Result<usize> {
    match MEMORY_LIMIT.load(Ordering::Acquire) {
        0 => {
            let limit = mlx_rs::memory::memory_limit()?;
            MEMORY_LIMIT.store(limit, Ordering::Release);
            Ok(limit)
        }
        limit => Ok(limit),
    }
}

/// Sets the memory limit; returns the previous one.
pub fn set_memory_limit(bytes: usize) -> Result<usize> {
    let previous = mlx_rs::memory::set_memory_limit(bytes)?;
    MEMORY_LIMIT.store(bytes, Ordering::Release);
    LIMIT_EPOCH.fetch_add(1, Ordering::AcqRel);
    Ok(previous)
}

/// MLX's own cache limit, the one its allocator started with: recorded by
/// the first [`set_cache_limit`] of the process (every change of the limit
/// goes through it, under this lock, so the first previous value seen is
/// MLX's).
static MLX_CACHE_LIMIT: Mutex<Option<usize>> = Mutex::new(None);

/// Sets the cache limit; returns the previous one.
pub fn set_cache_limit(bytes: usize) -> Result<usize> {
    let mut mlx_default = MLX_CACHE_LIMIT.lock().unwrap_or_else(|e| e.into_inner());
    let previous = mlx_rs::memory::set_cache_limit(bytes)?;
    mlx_default.get_or_insert(previous);
    Ok(previous)
}

/// The cache limit (MLX has no getter: set and restore).
pub fn cache_limit() -> Result<usize> {
    let current = set_cache_limit(usize::MAX)?;
    set_cache_limit(current)?;
    Ok(current)
}

/// The cache limit MLX's allocator started with, whatever has been set
/// since: it depends on the backend (on a GPU it is sized from the device's
/// memory, on the CPU it is small).
pub fn mlx_cache_limit() -> Result<usize> {
    let recorded = *MLX_CACHE_LIMIT.lock().unwrap_or_else(|e| e.into_inner());
    match recorded {
        Some(bytes) => Ok(bytes),
        None => {
            cache_limit()?;
            Ok((*MLX_CACHE_LIMIT.lock().unwrap_or_else(|e| e.into_inner())).unwrap_or(0))
        }
    }
}

/// A device fact: a number or a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    Size(usize),
    Text(String),
}

/// What MLX reports about `device` (keys such as "device_name",
/// "architecture", "memory_size", depending on the backend).
pub fn device_info(device: Device) -> Result<Vec<(String, Fact)>> {
    use std::ffi::{CStr, CString};
    if !device.is_available() {
        return Err(Error::Device(format!(
            "the {} device is not available in this MLX build",
            device.name()
        )));
    }
    let kind = device.mlx_type();
    let mut facts = Vec::new();
    // SAFETY: every handle is created here and freed before returning; the
    // strings MLX hands out are copied while `info` is alive.
    unsafe {
        let dev = mlx_sys::mlx_device_new_type(kind, 0);
        let mut info = mlx_sys::mlx_device_info_new();
        let status = mlx_sys::mlx_device_info_get(&mut info, dev);
        if status == 0 {
            let mut keys = mlx_sys::mlx_vector_string_new();
            if mlx_sys::mlx_device_info_get_keys(&mut keys, info) == 0 {
                let n = mlx_sys::mlx_vector_string_size(keys);
                for i in 0..n {
                    let mut key_ptr: *mut std::os::raw::c_char = std::ptr::null_mut();
                    if mlx_sys::mlx_vector_string_get(&mut key_ptr, keys, i) != 0
                        || key_ptr.is_null()
                    {
                        continue;
                    }
                    let key = CStr::from_ptr(key_ptr).to_string_lossy().into_owned();
                    let c_key = match CString::new(key.clone()) {
                        Ok(k) => k,
                        Err(_) => continue,
                    };
                    let mut is_string = false;
                    mlx_sys::mlx_device_info_is_string(&mut is_string, info, c_key.as_ptr());
                    if is_string {
                        let mut value: *const std::os::raw::c_char = std::ptr::null();
                        if mlx_sys::mlx_device_info_get_string(&mut value, info, c_key.as_ptr())
                            == 0
                            && !value.is_null()
                        {
                            facts.push((
                                key,
                                Fact::Text(CStr::from_ptr(value).to_string_lossy().into_owned()),
                            ));
                        }
                    } else {
                        let mut value = 0usize;
                        if mlx_sys::mlx_device_info_get_size(&mut value, info, c_key.as_ptr()) == 0
                        {
                            facts.push((key, Fact::Size(value)));
                        }
                    }
                }
                mlx_sys::mlx_vector_string_free(keys);
            }
        }
        mlx_sys::mlx_device_info_free(info);
        mlx_sys::mlx_device_free(dev);
        if status != 0 {
            return Err(Error::Mlx(format!(
                "MLX could not describe the {} device",
                device.name()
            )));
        }
    }
    if device == Device::Cpu && !facts.iter().any(|(k, _)| k == "memory_size") {
        // MLX does not report the host's memory; the OS does.
        // SAFETY: sysconf only reads system configuration values.
        let (pages, page_size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page_size > 0 {
            facts.push((
                "memory_size".into(),
                Fact::Size(pages as usize * page_size as usize),
            ));
        }
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_back() {
        let before = set_cache_limit(1 << 20).unwrap();
        assert_eq!(cache_limit().unwrap(), 1 << 20);
        set_cache_limit(before).unwrap();
        assert_eq!(cache_limit().unwrap(), before);
        // MLX's own limit is what was there before the first change
        let mlx = mlx_cache_limit().unwrap();
        set_cache_limit(mlx / 2 + 12_345).unwrap();
        assert_eq!(mlx_cache_limit().unwrap(), mlx);
        set_cache_limit(before).unwrap();
    }

    #[test]
    fn an_allowance_is_an_eighth_of_the_room_and_spent_only_under_its_limit() {
        // 1,000 of 10,000 bytes in use, 200 asked: an eighth of the 8,800 left
        let a = Allowance::grant(3, 1_000, 10_000, 200).unwrap();
        assert_eq!(
            a,
            Allowance {
                epoch: 3,
                bytes: 1_100
            }
        );
        assert_eq!(
            a.spend(3, 1_000),
            Some(Allowance {
                epoch: 3,
                bytes: 100
            })
        );
        assert_eq!(a.spend(3, 1_101), None);
        // a new limit voids it
        assert_eq!(a.spend(4, 1), None);
        // capped
        let big = Allowance::grant(1, 0, usize::MAX, 1).unwrap();
        assert_eq!(big.bytes, MAX_ALLOWANCE);
        // what does not fit is refused, with the figures
        let refused = Allowance::grant(1, 9_900, 10_000, 200).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "a tensor of 200 bytes would exceed the memory limit of 10000 bytes (9900 bytes \
             are in use); free tensors, or raise the limit with ExMLX.Memory.set_memory_limit/1"
        );
        assert!(matches!(refused, Error::OutOfMemory(_)));
        assert!(Allowance::grant(1, 9_800, 10_000, 200).is_ok());
    }

    #[test]
    fn cpu_facts_include_its_memory() {
        let facts = device_info(Device::Cpu).unwrap();
        let memory = facts.iter().find(|(k, _)| k == "memory_size");
        assert!(
            matches!(memory, Some((_, Fact::Size(n))) if *n > 0),
            "{facts:?}"
        );
    }
}
