//! Moving data between host bytes and MLX arrays.

use mlx_rs::{Array, Dtype};

use crate::dtype;
use crate::error::{Error, Result};

/// Checks dimensions given as `i64` and converts them to MLX's `i32`.
pub fn check_shape(name: &'static str, dims: &[i64]) -> Result<Vec<i32>> {
    dims.iter()
        .enumerate()
        .map(|(axis, &n)| {
            if (0..=i32::MAX as i64).contains(&n) {
                Ok(n as i32)
            } else {
                Err(Error::arg(
                    name,
                    format!(
                        "dimension {axis} is {n}; dimensions must be in 0..={}",
                        i32::MAX
                    ),
                ))
            }
        })
        .collect()
}

/// Number of elements of `shape`, or an error if it overflows.
pub fn element_count(name: &'static str, shape: &[i32]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d as usize).ok_or_else(|| {
            Error::arg(
                name,
                format!("{} has too many elements", dtype::display_shape(shape)),
            )
        })
    })
}

/// Checks that `bytes` holds exactly `shape` elements of `dtype` (and, for
/// `:bool`, only 0 and 1).
pub fn check_bytes(bytes: &[u8], shape: &[i32], dtype: Dtype) -> Result<()> {
    let count = element_count("shape", shape)?;
    let expected = count
        .checked_mul(dtype::size_of(dtype))
        .ok_or_else(|| Error::arg("shape", "the byte size overflows"))?;
    if bytes.len() != expected {
        return Err(Error::arg(
            "data",
            format!(
                "binary has {} bytes, but shape {} of {} needs {expected}",
                bytes.len(),
                dtype::display_shape(shape),
                dtype::display(dtype)
            ),
        ));
    }
    if dtype == Dtype::Bool {
        if let Some(at) = bytes.iter().position(|&b| b > 1) {
            return Err(Error::arg(
                "data",
                format!("byte {at} is {}; :bool elements must be 0 or 1", bytes[at]),
            ));
        }
    }
    Ok(())
}

/// An array holding a copy of `bytes`: little-endian elements of `dtype`,
/// row-major, in `shape`.
pub fn array_from_bytes(bytes: &[u8], shape: &[i32], dtype: Dtype) -> Result<Array> {
    check_bytes(bytes, shape, dtype)?;
    crate::memory::check_allocation(bytes.len())?;
    if bytes.is_empty() {
        // MLX wants a valid pointer even for zero elements.
        let nothing = [0u8; 16];
        // SAFETY: `nothing` is 16 readable bytes, more than one element of any
        // dtype; for a shape with zero elements MLX reads none of them.
        return Ok(unsafe { Array::from_raw_data(nothing.as_ptr().cast(), shape, dtype) });
    }
    // SAFETY: `bytes` holds exactly product(shape) elements of `dtype` (checked
    // above); MLX copies them into its own buffer before returning, byte-wise,
    // so the slice's alignment does not matter.
    Ok(unsafe { Array::from_raw_data(bytes.as_ptr().cast(), shape, dtype) })
}

/// An evaluated, row-contiguous array whose bytes can be read in place.
///
/// Built on a worker thread; afterwards only its memory is read.
pub struct HostBuffer {
    /// Dropped by `Drop`, unless the process is exiting (crate::exit).
    array: std::mem::ManuallyDrop<Array>,
    len: usize,
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: the array is taken once, here, and not used afterwards.
        let array = unsafe { std::mem::ManuallyDrop::take(&mut self.array) };
        crate::exit::forget_if_exiting(array);
    }
}

// SAFETY: a HostBuffer's array is evaluated and row-contiguous before the
// buffer exists, and nothing mutates it afterwards: the only access is reading
// its data through `bytes`. Reading immutable MLX memory from any thread is
// sound; dropping the handle decrements an atomic reference count, and the
// last one frees the memory through MLX's allocator, which takes its lock.
unsafe impl Sync for HostBuffer {}

/// Whether an evaluated array's elements lie in row-major order, without
/// gaps, from its data pointer on (an offset slice of rows may; a transpose
/// or a broadcast does not).
pub fn is_row_contiguous(array: &Array) -> Result<bool> {
    layout_flag(array, mlx_sys::_mlx_array_is_row_contiguous)
}

/// Whether an evaluated array's elements lie in column-major order, without
/// gaps, from its data pointer on (the transpose of a row-contiguous matrix).
pub fn is_col_contiguous(array: &Array) -> Result<bool> {
    layout_flag(array, mlx_sys::_mlx_array_is_col_contiguous)
}

type LayoutFlag = unsafe extern "C" fn(*mut bool, mlx_sys::mlx_array) -> std::os::raw::c_int;

fn layout_flag(array: &Array, flag: LayoutFlag) -> Result<bool> {
    let mut set = false;
    // SAFETY: `flag` is one of mlx-c's layout queries; `array` is a live,
    // evaluated array handle (its flags are set by its evaluation) and `set`
    // a valid out-pointer.
    let status = unsafe { flag(&mut set, array.as_ptr()) };
    if status != 0 {
        return Err(Error::Internal(
            "MLX could not report an array's layout".into(),
        ));
    }
    Ok(set)
}

impl HostBuffer {
    /// Evaluates `array`, copying it into a fresh row-major buffer if it is a
    /// view (a slice with an offset, a transpose, a broadcast), so the bytes
    /// are exactly the elements in order, read with the array's own dtype.
    pub fn new(array: &Array) -> Result<HostBuffer> {
        array.eval()?;
        // Most arrays are row-contiguous once evaluated: read them in place.
        // (A `contiguous` node would cost a second evaluation, about half
        // of the time of reading a scalar.)
        let array = if is_row_contiguous(array)? {
            array.clone()
        } else {
            let copy = array.contiguous()?;
            copy.eval()?;
            copy
        };
        let len = array.size() * dtype::size_of(array.dtype());
        let buffer = HostBuffer {
            array: std::mem::ManuallyDrop::new(array),
            len,
        };
        // Check the data pointer now, so `bytes` cannot fail later.
        buffer.checked_bytes()?;
        Ok(buffer)
    }

    pub fn dtype(&self) -> Dtype {
        self.array.dtype()
    }

    /// The evaluated, row-contiguous array the bytes belong to.
    pub fn array(&self) -> &Array {
        &self.array
    }

    pub fn shape(&self) -> &[i32] {
        self.array.shape()
    }

    fn checked_bytes(&self) -> Result<&[u8]> {
        if self.len == 0 {
            return Ok(&[]);
        }
        // SAFETY: `self.array` is a live, evaluated array (evaluated by
        // `new`, or known evaluated by the caller of `in_place`), so its data
        // pointer is set; mlx_array_data_uint8 only returns that pointer
        // (reinterpreted, with no evaluation and no dtype check).
        let data = unsafe { mlx_sys::mlx_array_data_uint8(self.array.as_ptr()) };
        if data.is_null() {
            return Err(Error::Internal("an evaluated array has no data".into()));
        }
        // SAFETY: the array is row-contiguous (checked when the buffer was
        // made), so its `len` bytes (elements × element size) lie in order
        // from `data`; the buffer owns a handle to the array, so the memory
        // lives as long as the returned slice, and nothing writes to it.
        Ok(unsafe { std::slice::from_raw_parts(data, self.len) })
    }

    /// A buffer over `array` as it is, without evaluating anything: `None`
    /// if it is not row-contiguous. Needs no MLX stream, so it may run on
    /// any thread; the caller must know `array` is already evaluated
    /// (made from host bytes, or evaluated on its worker earlier).
    pub fn in_place(array: &Array) -> Result<Option<HostBuffer>> {
        if !is_row_contiguous(array)? {
            return Ok(None);
        }
        let len = array.size() * dtype::size_of(array.dtype());
        Ok(Some(HostBuffer {
            array: std::mem::ManuallyDrop::new(array.clone()),
            len,
        }))
    }

    /// The elements, row-major, little-endian.
    pub fn bytes(&self) -> &[u8] {
        // Cannot fail: `new` checked the same call.
        self.checked_bytes().unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    fn round_trip(bytes: Vec<u8>, shape: Vec<i32>, dtype: Dtype) -> Result<Vec<u8>> {
        run_blocking(Device::Cpu, move || {
            let a = array_from_bytes(&bytes, &shape, dtype)?;
            Ok(HostBuffer::new(&a)?.bytes().to_vec())
        })
    }

    #[test]
    fn bytes_round_trip_for_every_dtype() {
        for (_, _, dtype) in dtype::TYPES {
            let size = dtype::size_of(*dtype);
            // Three elements; for bool the bytes must be 0/1.
            let bytes: Vec<u8> = (0..3 * size)
                .map(|i| {
                    if *dtype == Dtype::Bool {
                        (i % 2) as u8
                    } else {
                        (i * 37 % 251) as u8
                    }
                })
                .collect();
            let back = round_trip(bytes.clone(), vec![3], *dtype).unwrap();
            assert_eq!(back, bytes, "{dtype:?}");
        }
    }

    #[test]
    fn views_are_read_in_logical_order() {
        // [[1, 2, 3], [4, 5, 6]] transposed is [[1, 4], [2, 5], [3, 6]].
        let out = run_blocking(Device::Cpu, || {
            let a = Array::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3]);
            let t = a.t();
            Ok(HostBuffer::new(&t)?.bytes().to_vec())
        })
        .unwrap();
        let values: Vec<i32> = out
            .chunks(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(values, vec![1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn wrong_sizes_and_bools_are_rejected() {
        let e = check_bytes(&[0; 5], &[2], Dtype::Float32).unwrap_err();
        assert_eq!(
            e.to_string(),
            "data: binary has 5 bytes, but shape {2} of {:f, 32} needs 8"
        );
        let e = check_bytes(&[0, 2], &[2], Dtype::Bool).unwrap_err();
        assert!(e.to_string().contains("byte 1 is 2"), "{e}");
        assert!(check_shape("shape", &[1, -2]).is_err());
        assert!(element_count("shape", &[i32::MAX, i32::MAX, i32::MAX]).is_err());
    }

    #[test]
    fn empty_arrays_have_no_bytes() {
        assert_eq!(
            round_trip(vec![], vec![3, 0], Dtype::Float32).unwrap(),
            Vec::<u8>::new()
        );
    }
}
