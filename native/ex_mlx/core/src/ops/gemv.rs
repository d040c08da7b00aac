//! Products of one row or one column with a float32 matrix on the CPU,
//! through the process's CBLAS `sgemv`.
//!
//! MLX's CPU matmul hands every float32 product to BLAS's `sgemm`. With one
//! row (a batch of one: an MLP's or a language model's decoding step) the
//! OpenBLAS that ExMLX's runtime links (Debian's 0.3.21, docs/architecture.md)
//! packs the whole matrix first: `1×784 · 784×512` took 85 µs in `sgemm`
//! and 28 µs in `sgemv` on this project's CPU machine (bench/README.md,
//! session 14). Such products (at least [`MIN_MATRIX_ELEMENTS`] matrix
//! elements, on a CPU stream) are computed here: the inputs are evaluated,
//! `sgemv` writes the result, which is a new array. Its sums run in another
//! order than `sgemm`'s, so the last bits may differ from MLX's product;
//! every ExMLX path (eager ops, `ExMLX.Compiler`) goes through here alike.
//!
//! `sgemv` comes from the BLAS library already loaded for MLX (looked up by
//! name among the loaded libraries, nothing is loaded); where there is none
//! (macOS's Accelerate, a runtime with another BLAS), MLX's matmul runs.

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

use mlx_rs::{Array, Dtype};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::host::{is_col_contiguous, is_row_contiguous};

/// Smaller matrices go through MLX's matmul (its `sgemm` is quick enough
/// there, and evaluating the inputs first would cost more than it saves).
pub const MIN_MATRIX_ELEMENTS: usize = 16 * 1024;

/// `cblas_sgemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy)`.
type Sgemv = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    f32,
    *mut f32,
    c_int,
);

const ROW_MAJOR: c_int = 101;
const NO_TRANS: c_int = 111;
const TRANS: c_int = 112;

/// The loaded BLAS's `cblas_sgemv`, if one is loaded.
fn sgemv() -> Option<Sgemv> {
    static SGEMV: OnceLock<Option<Sgemv>> = OnceLock::new();
    *SGEMV.get_or_init(|| {
        let names: [&CStr; 4] = [
            c"libopenblas.so.0",
            c"libopenblas.so",
            c"libcblas.so.3",
            c"libblas.so.3",
        ];
        names.iter().find_map(|name| {
            // SAFETY: RTLD_NOLOAD only looks the library up among those
            // already loaded; it loads nothing and runs no initializer.
            let handle =
                unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
            if handle.is_null() {
                return None;
            }
            // SAFETY: `handle` is a live handle from dlopen (never closed,
            // so the library stays loaded), the name NUL-terminated.
            let address: *mut c_void = unsafe { libc::dlsym(handle, c"cblas_sgemv".as_ptr()) };
            // SAFETY: the CBLAS function of that name, whose C signature
            // (cblas.h) the type spells, enums as ints.
            (!address.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, Sgemv>(address) })
        })
    })
}

/// A matrix operand: its data, and whether it is stored transposed
/// (column-major).
struct Matrix {
    data: *const f32,
    rows: usize,
    cols: usize,
    column_major: bool,
}

/// `a · b` (MLX's matmul shapes) computed here when one side is a single
/// row (of any rank, its other axes of size 1) or column and the other a float32 matrix of at least
/// [`MIN_MATRIX_ELEMENTS`] elements, on a CPU stream, with a BLAS loaded;
/// `None` otherwise (the caller runs MLX's matmul).
pub fn vector_product(a: &Array, b: &Array) -> Result<Option<Array>> {
    if a.dtype() != Dtype::Float32 || b.dtype() != Dtype::Float32 {
        return Ok(None);
    }
    let (sa, sb) = (a.shape(), b.shape());
    // row · matrix: a of [.., 1, k] (every axis but the last of size 1: a
    // batch of one) by [k, n]; matrix · column: [m, k] by [k, 1] or [k]
    let one_row = |s: &[i32]| {
        s.split_last()
            .is_some_and(|(_, lead)| lead.iter().all(|&d| d == 1))
    };
    let (vector, matrix, row_times) = match (sa, sb) {
        (&[.., k], &[k2, n]) if one_row(sa) && k == k2 && n > 1 => (a, b, true),
        (&[m, k], &[k2, 1] | &[k2]) if k == k2 && m > 1 => (b, a, false),
        _ => return Ok(None),
    };
    if matrix.size() < MIN_MATRIX_ELEMENTS || !Device::current_is_cpu() {
        return Ok(None);
    }
    let Some(sgemv) = sgemv() else {
        return Ok(None);
    };
    mlx_rs::transforms::eval([vector, matrix])?;
    let column_major = if is_row_contiguous(matrix)? {
        false
    } else if is_col_contiguous(matrix)? {
        true
    } else {
        return Ok(None);
    };
    // (a vector is contiguous either way; a strided one goes to MLX)
    if !is_row_contiguous(vector)? {
        return Ok(None);
    }
    let m = Matrix {
        data: data(matrix)?,
        rows: matrix.shape()[0] as usize,
        cols: matrix.shape()[1] as usize,
        column_major,
    };
    let x = data(vector)?;
    let len = if row_times { m.cols } else { m.rows };
    let mut y = vec![0.0f32; len];
    // y = matrixᵀ x (row times matrix) or matrix x; a column-major matrix
    // is the row-major transpose of its storage.
    let transposed = row_times != m.column_major;
    let (stored_rows, stored_cols) = if m.column_major {
        (m.cols, m.rows)
    } else {
        (m.rows, m.cols)
    };
    let int =
        |v: usize| c_int::try_from(v).map_err(|_| Error::arg("b", "matrix too large for BLAS"));
    let (rows, cols, lda) = (int(stored_rows)?, int(stored_cols)?, int(stored_cols)?);
    // SAFETY: `m.data` points to the matrix's stored_rows × stored_cols
    // float32 values in row-major order (its layout checked above, the
    // arrays evaluated and held by the caller for this call), `x` to the
    // vector's len(x) = (transposed ? stored_rows : stored_cols) values, `y`
    // to `len` writable values (len = the other dimension); sgemv reads and
    // writes only those, and returns when done.
    unsafe {
        sgemv(
            ROW_MAJOR,
            if transposed { TRANS } else { NO_TRANS },
            rows,
            cols,
            1.0,
            m.data,
            lda,
            x,
            1,
            0.0,
            y.as_mut_ptr(),
            1,
        )
    };
    // MLX's matmul shapes: a's leading axes and n; m, and 1 for a column
    let shape: Vec<i32> = if row_times {
        let mut shape = sa.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = len as i32;
        }
        shape
    } else if sb.len() == 2 {
        vec![len as i32, 1]
    } else {
        vec![len as i32]
    };
    Ok(Some(Array::from_slice(&y, &shape)))
}

/// An evaluated float32 array's data pointer.
fn data(array: &Array) -> Result<*const f32> {
    // SAFETY: `array` is a live, evaluated float32 array (checked by the
    // caller), so its data pointer is set; mlx_array_data_float32 returns it.
    let data = unsafe { mlx_sys::mlx_array_data_float32(array.as_ptr()) };
    if data.is_null() {
        return Err(Error::Internal("an evaluated array has no data".into()));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::run_blocking;

    /// `a · b` for row-major `a` (m × k) and `b` (k × n), in float64.
    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
            }
        }
        out
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0
                    - 1.0
            })
            .collect()
    }

    #[test]
    fn one_row_or_column_times_a_matrix_in_every_layout() {
        let (k, n) = (300usize, 200usize);
        let x = values(k, 1);
        let w = values(k * n, 2);
        let wt: Vec<f32> = (0..n * k).map(|i| w[(i % k) * n + i / k]).collect();
        let want_row = reference(&x, &w, 1, k, n);
        let got = run_blocking(Device::Cpu, move || {
            let xa = Array::from_slice(&x, &[1, k as i32]);
            let x1 = Array::from_slice(&x, &[k as i32]);
            let x3 = Array::from_slice(&x, &[1, 1, k as i32]);
            let wa = Array::from_slice(&w, &[k as i32, n as i32]);
            // the same matrix stored transposed: a column-major view
            let wt_view = mlx_rs::ops::transpose(Array::from_slice(&wt, &[n as i32, k as i32]))?;
            let col = Array::from_slice(&x, &[k as i32, 1]);
            let wta = Array::from_slice(&wt, &[n as i32, k as i32]);
            let w_view = mlx_rs::ops::transpose(&wa)?;
            let run = |a: &Array, b: &Array| -> Result<(Vec<i32>, Vec<f32>)> {
                let p = vector_product(a, b)?.expect("computed here");
                Ok((p.shape().to_vec(), p.as_slice::<f32>().to_vec()))
            };
            Ok(vec![
                run(&xa, &wa)?,
                run(&x1, &wa)?,
                run(&xa, &wt_view)?,
                run(&wta, &col)?,
                run(&wta, &x1)?,
                run(&w_view, &col)?,
                run(&x3, &wt_view)?,
            ])
        })
        .unwrap();
        let shapes: Vec<Vec<i32>> = got.iter().map(|(s, _)| s.clone()).collect();
        let n = n as i32;
        assert_eq!(
            shapes,
            [
                vec![1, n],
                vec![n],
                vec![1, n],
                vec![n, 1],
                vec![n],
                vec![n, 1],
                vec![1, 1, n]
            ]
        );
        for (_, v) in &got {
            for (g, want) in v.iter().zip(&want_row) {
                assert!(
                    (*g as f64 - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{g} vs {want}"
                );
            }
        }
    }

    #[test]
    fn other_products_are_left_to_mlx() {
        let left = run_blocking(Device::Cpu, || {
            let square = Array::from_slice(&vec![1.0f32; 256 * 256], &[256, 256]);
            let row = Array::from_slice(&vec![1.0f32; 256], &[1, 256]);
            let small = Array::from_slice(&vec![1.0f32; 64 * 64], &[64, 64]);
            let row64 = Array::from_slice(&vec![1.0f32; 64], &[1, 64]);
            let f64_row = row.as_dtype(Dtype::Float64)?;
            let broadcast = mlx_rs::ops::broadcast_to(Array::from_f32(1.0), &[256, 256])?;
            Ok(vec![
                vector_product(&square, &square)?.is_none(),
                vector_product(&row64, &small)?.is_none(),
                vector_product(&f64_row, &square)?.is_none(),
                vector_product(&row, &broadcast)?.is_none(),
                vector_product(&row, &square)?.is_some(),
            ])
        })
        .unwrap();
        assert_eq!(left, [true, true, true, true, true]);
    }
}
