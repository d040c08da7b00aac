//! Moving a new array's memory to the GPU in one transfer.
//!
//! On CUDA, MLX keeps arrays in unified memory (`cudaMallocManaged`). An
//! array made from host bytes is written by the host, so its pages sit in
//! host memory, and the first kernel that reads it pulls them over page
//! fault by page fault, slower than one transfer (bench/results/gpu.md's
//! host → GPU rows).
//! [`prefetch_to_gpu`] asks the CUDA driver to move them in one transfer
//! (`cuMemPrefetchAsync_v2`) and waits for it, on the worker that made the
//! array. libmlx calls the driver (`libcuda.so.1`) itself; ExMLX finds the
//! already loaded library with `dlopen(RTLD_NOLOAD)`, so a build without
//! CUDA, or a machine without the driver, does nothing here.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use mlx_rs::Array;

/// `CUmemLocation` (cuda.h): a location kind and its ordinal.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemLocation {
    kind: c_int,
    id: c_int,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE` (cuda.h).
const LOCATION_DEVICE: c_int = 1;

/// `cuMemPrefetchAsync_v2(devPtr, count, location, flags, stream)`.
type Prefetch = unsafe extern "C" fn(u64, usize, MemLocation, c_uint, *mut c_void) -> c_int;
/// `cuStreamSynchronize(stream)`.
type Synchronize = unsafe extern "C" fn(*mut c_void) -> c_int;

struct Driver {
    prefetch: Prefetch,
    synchronize: Synchronize,
}

/// The CUDA driver's functions, when libcuda is loaded in this process.
fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let name = c"libcuda.so.1";
            // SAFETY: RTLD_NOLOAD only looks the library up among those
            // already loaded; it loads nothing and runs no initializer.
            let handle =
                unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
            if handle.is_null() {
                return None;
            }
            let symbol = |name: &CStr| {
                // SAFETY: `handle` is a live handle from dlopen (never
                // closed), `name` a NUL-terminated symbol name.
                let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
                (!address.is_null()).then_some(address)
            };
            let prefetch = symbol(c"cuMemPrefetchAsync_v2")?;
            let synchronize = symbol(c"cuStreamSynchronize")?;
            // SAFETY: these are the driver's functions of those names, whose
            // C signatures (cuda.h, CUDA 12.2 and later) the types spell.
            Some(unsafe {
                Driver {
                    prefetch: std::mem::transmute::<*mut c_void, Prefetch>(prefetch),
                    synchronize: std::mem::transmute::<*mut c_void, Synchronize>(synchronize),
                }
            })
        })
        .as_ref()
}

/// Arrays smaller than this are left where they are: a page or a few fault
/// over at about the cost of the call.
pub const PREFETCH_MIN_BYTES: usize = 256 << 10;

/// Moves the memory of `array` (made from host bytes on this GPU worker:
/// evaluated, row-contiguous) to GPU 0 and waits for the transfer. Whether
/// it did: `false` where there is no CUDA driver, for small arrays, or when
/// the driver refuses (the memory is not managed memory, say); the array is
/// unchanged either way, and its first kernel then reads it as before.
pub fn prefetch_to_gpu(array: &Array) -> bool {
    let bytes = array.nbytes();
    if bytes < PREFETCH_MIN_BYTES {
        return false;
    }
    let Some(driver) = driver() else {
        return false;
    };
    // SAFETY: `array` is a live, evaluated array, so its data pointer is set;
    // mlx_array_data_uint8 only returns it (no evaluation, no dtype check).
    let data = unsafe { mlx_sys::mlx_array_data_uint8(array.as_ptr()) };
    if data.is_null() {
        return false;
    }
    let gpu = MemLocation {
        kind: LOCATION_DEVICE,
        id: 0,
    };
    // SAFETY: `data` points to the `bytes` bytes of the array's own buffer
    // (it is row-contiguous, made from host bytes), which lives (the caller
    // holds the array) until the synchronization below returns; the null
    // stream is the context's default stream. The calling worker has the
    // device's context current (MLX made it so when the worker made its
    // stream). Both calls only return a status.
    unsafe {
        (driver.prefetch)(data as u64, bytes, gpu, 0, std::ptr::null_mut()) == 0
            && (driver.synchronize)(std::ptr::null_mut()) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_arrays_and_processes_without_the_driver_are_left_as_they_are() {
        let small = Array::from_slice(&[1.0f32; 16], &[16]);
        assert!(!prefetch_to_gpu(&small));
        // (a CPU build of MLX loads no CUDA driver)
        if driver().is_none() {
            let n = PREFETCH_MIN_BYTES / 4;
            let large = Array::from_slice(&vec![2.0f32; n], &[n as i32]);
            assert!(!prefetch_to_gpu(&large));
            assert_eq!(large.as_slice::<f32>()[n - 1], 2.0);
        }
    }
}
