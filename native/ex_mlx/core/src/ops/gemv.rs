//! Products of one row or one column with a float32 matrix on the CPU,
//! computed here in one pass over the matrix.
//!
//! MLX's CPU matmul hands every float32 product to BLAS's `sgemm`. With one
//! row (a batch of one: an MLP's or a language model's decoding step) the
//! OpenBLAS that ExMLX's runtime links (Debian's 0.3.21, README) packs the
//! whole matrix first: `1×784 · 784×512` took 85 µs in `sgemm` on this
//! project's CPU machine, 22 µs in its `sgemv` on one thread and 16–29 µs on
//! two (bench/README.md, session 14). Such products (at least
//! [`MIN_MATRIX_ELEMENTS`] matrix elements, on a CPU stream) are computed
//! here instead, on the calling worker's thread: the inputs are evaluated,
//! then one pass over the matrix in vectors (copies for AVX-512F and AVX2
//! chosen at run time, as crate::elementwise_fusion does) writes the result,
//! a new array. The sums run in another order than `sgemm`'s, so the last
//! bits may differ from MLX's product; every ExMLX path (eager ops,
//! `ExMLX.Compiler`) goes through here alike.

use mlx_rs::{Array, Dtype};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::host::{is_col_contiguous, is_row_contiguous};
use crate::simd::multiversion;

/// Smaller matrices go through MLX's matmul (its `sgemm` is quick enough
/// there, and evaluating the inputs first would cost more than it saves).
/// From this size on the product here is computed, ready, on the worker:
/// an MLP's last layer (`512×10`) after its hidden ones needs no
/// evaluation on MLX's stream thread then (crate::elementwise_fusion's
/// `ready_or` computes the bias and ReLU between the layers the same way).
pub const MIN_MATRIX_ELEMENTS: usize = 4 * 1024;

/// `a · b` (MLX's matmul shapes) computed here when one side is a single
/// row (of any rank, its other axes of size 1) or column and the other a
/// float32 matrix of at least [`MIN_MATRIX_ELEMENTS`] elements, stored
/// row-major or column-major, on a CPU stream; `None` otherwise (the caller
/// runs MLX's matmul).
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
    let (rows, cols) = (matrix.shape()[0] as usize, matrix.shape()[1] as usize);
    // the matrix as stored: row-major, or the row-major transpose
    let (stored_rows, stored_cols) = if column_major {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let stored = values(matrix, rows * cols)?;
    let len = if row_times { cols } else { rows };
    let x = values(vector, if row_times { rows } else { cols })?;
    let mut y = vec![0.0f32; len];
    // y = matrixᵀ x (row times matrix) or matrix x: with the storage, the
    // first is a sum of its rows scaled by x when stored row-major, and
    // the second one dot product per stored row; column-major swaps them.
    if row_times != column_major {
        debug_assert_eq!((x.len(), y.len()), (stored_rows, stored_cols));
        scaled_rows(x, stored, &mut y);
    } else {
        debug_assert_eq!((x.len(), y.len()), (stored_cols, stored_rows));
        row_dots(stored, x, &mut y);
    }
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

/// The `len` values of an evaluated, contiguous float32 array (row- or
/// column-major: its storage in order).
fn values(array: &Array, len: usize) -> Result<&[f32]> {
    // SAFETY: `array` is a live, evaluated float32 array (checked by the
    // caller), so its data pointer is set; mlx_array_data_float32 returns it.
    let data = unsafe { mlx_sys::mlx_array_data_float32(array.as_ptr()) };
    if data.is_null() || data.align_offset(std::mem::align_of::<f32>()) != 0 {
        return Err(Error::Internal(
            "an evaluated array has no float32 data".into(),
        ));
    }
    // SAFETY: the array is contiguous (checked by the caller) with `len`
    // elements, so its storage is `len` float32 values from `data`, aligned
    // (checked); the slice borrows `array`, which keeps the buffer alive, and
    // nothing writes to an evaluated array.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

multiversion!(
    /// y = Σ_i x[i] · rows[i] (`rows`: x.len() rows of y.len() values).
    fn scaled_rows = scaled_rows_avx512, scaled_rows_avx2, scaled_rows_plain(
        x: &[f32],
        rows: &[f32],
        y: &mut [f32],
    );
);

#[inline(always)]
fn scaled_rows_plain(x: &[f32], rows: &[f32], y: &mut [f32]) {
    y.fill(0.0);
    for (&xi, row) in x.iter().zip(rows.chunks_exact(y.len())) {
        for (yj, &r) in y.iter_mut().zip(row) {
            *yj += xi * r;
        }
    }
}

multiversion!(
    /// y[i] = rows[i] · x (`rows`: y.len() rows of x.len() values).
    fn row_dots = row_dots_avx512, row_dots_avx2, row_dots_plain(
        rows: &[f32],
        x: &[f32],
        y: &mut [f32],
    );
);

/// Partial sums a dot product keeps (independent lanes the compiler can
/// put in vectors: a single running sum would fix the order of additions).
const LANES: usize = 16;

#[inline(always)]
fn row_dots_plain(rows: &[f32], x: &[f32], y: &mut [f32]) {
    for (yi, row) in y.iter_mut().zip(rows.chunks_exact(x.len())) {
        let mut sums = [0.0f32; LANES];
        let (row_body, row_tail) = row.split_at(row.len() - row.len() % LANES);
        let (x_body, x_tail) = x.split_at(row_body.len());
        for (r, v) in row_body.chunks_exact(LANES).zip(x_body.chunks_exact(LANES)) {
            for l in 0..LANES {
                sums[l] += r[l] * v[l];
            }
        }
        let tail: f32 = row_tail.iter().zip(x_tail).map(|(r, v)| r * v).sum();
        *yi = sums.iter().sum::<f32>() + tail;
    }
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

    fn sample(n: usize, seed: u32) -> Vec<f32> {
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
        let x = sample(k, 1);
        let w = sample(k * n, 2);
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
    fn every_compiled_copy_gives_the_plain_copy_s_bits() {
        let (r, c) = (37usize, 301usize);
        let m = sample(r * c, 5);
        let xr = sample(r, 6);
        let xc = sample(c, 7);
        let mut plain_rows = vec![0.0; c];
        scaled_rows_plain(&xr, &m, &mut plain_rows);
        let mut plain_dots = vec![0.0; r];
        row_dots_plain(&m, &xc, &mut plain_dots);
        let mut best_rows = vec![0.0; c];
        scaled_rows(&xr, &m, &mut best_rows);
        let mut best_dots = vec![0.0; r];
        row_dots(&m, &xc, &mut best_dots);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&plain_rows), bits(&best_rows));
        assert_eq!(bits(&plain_dots), bits(&best_dots));
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            let mut rows2 = vec![0.0; c];
            let mut dots2 = vec![0.0; r];
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe {
                scaled_rows_avx2(&xr, &m, &mut rows2);
                row_dots_avx2(&m, &xc, &mut dots2);
            }
            assert_eq!(bits(&plain_rows), bits(&rows2));
            assert_eq!(bits(&plain_dots), bits(&dots2));
        }
    }

    #[test]
    fn other_products_are_left_to_mlx() {
        let left = run_blocking(Device::Cpu, || {
            let square = Array::from_slice(&vec![1.0f32; 256 * 256], &[256, 256]);
            let row = Array::from_slice(&vec![1.0f32; 256], &[1, 256]);
            let small = Array::from_slice(&vec![1.0f32; 32 * 32], &[32, 32]);
            let row32 = Array::from_slice(&[1.0f32; 32], &[1, 32]);
            let f64_row = row.as_dtype(Dtype::Float64)?;
            let broadcast = mlx_rs::ops::broadcast_to(Array::from_f32(1.0), &[256, 256])?;
            Ok(vec![
                vector_product(&square, &square)?.is_none(),
                vector_product(&row32, &small)?.is_none(),
                vector_product(&f64_row, &square)?.is_none(),
                vector_product(&row, &broadcast)?.is_none(),
                vector_product(&row, &square)?.is_some(),
            ])
        })
        .unwrap();
        assert_eq!(left, [true, true, true, true, true]);
    }

    /// Prints how long the two kernels take for a batch-1 MLP's first layer
    /// and a small language model's (`cargo test -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn kernel_time() {
        let time = |f: &mut dyn FnMut()| {
            let mut best = f64::MAX;
            for _ in 0..200 {
                let start = std::time::Instant::now();
                f();
                best = best.min(start.elapsed().as_secs_f64());
            }
            best * 1e6
        };
        for (r, c) in [(784usize, 512usize), (256, 768), (768, 256), (256, 2048)] {
            let m = sample(r * c, 1);
            let xr = sample(r, 2);
            let xc = sample(c, 3);
            let mut yr = vec![0.0; c];
            let mut yc = vec![0.0; r];
            println!(
                "{r}x{c}: scaled rows {:.1} us, row dots {:.1} us",
                time(&mut || scaled_rows(&xr, &m, &mut yr)),
                time(&mut || row_dots(&m, &xc, &mut yc))
            );
        }
    }
}
