//! Products of one row or one column with a float32 matrix on the CPU,
//! computed here in one pass over the matrix.
//!
//! MLX's CPU matmul hands every float32 product to BLAS's `sgemm`. With one
//! row (a batch of one: an MLP's or a language model's decoding step) the
//! OpenBLAS that ExMLX's runtime links (Debian's 0.3.21, README) packs the
//! whole matrix first, several times slower than a pass over it
//! (docs/decisions/0007-one-row-products.md). Such products (at least
//! [`MIN_MATRIX_ELEMENTS`] matrix elements, on a CPU stream) are computed
//! here instead, on the calling worker's thread: the inputs are evaluated,
//! then one pass over the matrix in vectors (copies for AVX-512F and AVX2
//! chosen at run time, as crate::elementwise_fusion does) writes the result,
//! a new array. The sums run in another order than `sgemm`'s, so the last
//! bits may differ from MLX's product; every ExMLX path (eager ops,
//! `ExMLX.Compiler`) goes through here alike.
//!
//! The matrix may be a strided view whose rows (or columns) lie further
//! apart than their length: a block of a wider matrix (a loaded GPT-2's
//! query, key and value weights are thirds of one fused matrix) or, batched,
//! the heads of a language model's key/value cache at a decoding step
//! (`[B.., 1, k] · [B.., k, n]`). MLX's matmul copies such a view into a
//! contiguous array at every call (its BLAS call takes no other leading
//! dimension); here it is read in place, as a language model's decoding
//! step needs at every layer and every token.

use std::sync::Arc;

use mlx_rs::{Array, Dtype};

use crate::device::Device;
use crate::elementwise_fusion::Operand;
use crate::error::{Error, Result};
use crate::host::is_row_contiguous;
use crate::simd::multiversion;
use crate::split_work;

/// Smaller matrices go through MLX's matmul (its `sgemm` is quick enough
/// there, and evaluating the inputs first would cost more than it saves).
/// From this size on the product here is computed, ready, on the worker:
/// an MLP's last layer (`512×10`) after its hidden ones needs no
/// evaluation on MLX's stream thread then (crate::cpu_kernels computes the
/// bias and ReLU between the layers the same way).
pub const MIN_MATRIX_ELEMENTS: usize = 4 * 1024;

/// `a · b` (MLX's matmul shapes) computed here when one side is a single
/// row (of any rank, its other axes of size 1) or column and the other a
/// float32 matrix of at least [`MIN_MATRIX_ELEMENTS`] elements, stored
/// row-major or column-major (rows or columns evenly apart), or a batch of
/// rows times a batch of such matrices ([`batched_row_product`]), on a CPU
/// stream; `None` otherwise (the caller runs MLX's matmul).
pub fn vector_product(a: &Array, b: &Array) -> Result<Option<Array>> {
    if a.dtype() != Dtype::Float32 || b.dtype() != Dtype::Float32 {
        return Ok(None);
    }
    let (sa, sb) = (a.shape(), b.shape());
    if sa.len() >= 3 && sb.len() == sa.len() {
        return batched_row_product(a, b);
    }
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
    let (Some(strides), &[rows, cols]) = (strides(matrix), matrix.shape()) else {
        return Ok(None);
    };
    // (a vector is contiguous either way; a strided one goes to MLX)
    if !is_row_contiguous(vector)? {
        return Ok(None);
    }
    let len = if row_times { cols } else { rows } as usize;
    let x = values(vector, if row_times { rows } else { cols } as usize)?;
    let keep =
        || -> Vec<split_work::Kept> { vec![Box::new(vector.clone()), Box::new(matrix.clone())] };
    let strides = [strides[0], strides[1]];
    let Some(y) = stored_product(x, matrix, [rows, cols], strides, row_times, keep)? else {
        return Ok(None);
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

/// One row `x` (of shape `[.., 1, k]`, every axis but the last of size 1,
/// or `[k]`) times a computed float32 `matrix` (`[k, n]`; with
/// `transposed`, `[n, k]` read as its transpose, as MLX's matmul reads a
/// swapped-axes view), computed on this thread: the result's values and
/// shape (`x`'s, its last axis `n`). The same blocks as
/// [`vector_product`]'s on a worker, computed by the same code and added in
/// the same order, so the same bits; a thread that [`split_work::help`]s
/// may compute some of them (`keep_x` gives what owns `x`'s values, kept
/// while it reads them). `None` where `vector_product` would leave the
/// product to MLX's matmul. For crate::program's runs on the calling
/// thread, which know the matrix is computed (it is read in place, never
/// evaluated here).
pub fn row_times_matrix(
    x: Operand,
    matrix: &Array,
    transposed: bool,
    keep_x: impl FnOnce() -> split_work::Kept,
) -> Result<Option<(Vec<f32>, Vec<i32>)>> {
    if matrix.dtype() != Dtype::Float32 || matrix.size() < MIN_MATRIX_ELEMENTS {
        return Ok(None);
    }
    let (Some(strides), &[rows, cols]) = (strides(matrix), matrix.shape()) else {
        return Ok(None);
    };
    let (shape, strides) = if transposed {
        ([cols, rows], [strides[1], strides[0]])
    } else {
        ([rows, cols], [strides[0], strides[1]])
    };
    let (k, n) = (shape[0] as usize, shape[1] as usize);
    let one_row = x
        .shape
        .split_last()
        .is_some_and(|(&last, lead)| last as usize == k && lead.iter().all(|&d| d == 1));
    if !one_row || n < 2 || x.values.len() != k {
        return Ok(None);
    }
    let keep = || -> Vec<split_work::Kept> { vec![keep_x(), Box::new(matrix.clone())] };
    let Some(y) = stored_product(x.values, matrix, shape, strides, true, keep)? else {
        return Ok(None);
    };
    let mut out_shape = x.shape.to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = n as i32;
    }
    Ok(Some((y, out_shape)))
}

/// `x` times the matrix of `shape` (rows, columns) and `strides` that lies
/// in `matrix`'s buffer (`row_times`: the row `x` of `rows` values times
/// it; else it times the column `x` of `cols` values), computed on this
/// thread in one pass over the matrix as stored ([`StoredProduct`]), in
/// blocks a waiting thread may share (`keep` gives the owners of the memory
/// they read); `None` when the matrix has no layout read in place.
fn stored_product(
    x: &[f32],
    matrix: &Array,
    shape: [i32; 2],
    strides: [usize; 2],
    row_times: bool,
    keep: impl FnOnce() -> Vec<split_work::Kept>,
) -> Result<Option<Vec<f32>>> {
    let Some(Layout { column_major, ld }) = matrix_layout(&shape, &strides) else {
        return Ok(None);
    };
    let (rows, cols) = (shape[0] as usize, shape[1] as usize);
    // the matrix as stored: row-major, or the row-major transpose, its
    // rows `ld` values apart
    let (stored_rows, stored_cols) = if column_major {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let stored = values(matrix, (stored_rows - 1) * ld + stored_cols)?;
    let len = if row_times { cols } else { rows };
    // y = matrixᵀ x (row times matrix) or matrix x: with the storage, the
    // first is a sum of its rows scaled by x when stored row-major, and
    // the second one dot product per stored row; column-major swaps them.
    let product = StoredProduct {
        sums_rows: row_times != column_major,
        x: x.as_ptr(),
        x_len: x.len(),
        stored: stored.as_ptr(),
        stored_len: stored.len(),
        stored_rows,
        stored_cols,
        ld,
    };
    debug_assert_eq!(
        (x.len(), len),
        if product.sums_rows {
            (stored_rows, stored_cols)
        } else {
            (stored_cols, stored_rows)
        }
    );
    Ok(Some(product.compute_in_parts(len, keep)))
}

/// `a · b` for a batch of single rows: `a` of shape `[B.., 1, k]` times `b`
/// of `[B.., k, n]` (the same batch axes `B`: attention's scores and
/// weighted values at a decoding step, one query row per head), float32
/// on a CPU stream, with at least [`MIN_MATRIX_ELEMENTS`] elements of `b`
/// in all. `b` may be a strided view (the transposed heads of a key or
/// value cache): each of its matrices needs one unit stride, the other
/// stride at least the matrix's width, and the batch axes any strides.
/// MLX's matmul copies such a view into a contiguous array first (its BLAS
/// call takes only exact leading dimensions); here it is read in place.
/// `None` for anything else (the caller runs MLX's matmul). Called by
/// [`vector_product`], which checked the types.
fn batched_row_product(a: &Array, b: &Array) -> Result<Option<Array>> {
    let (sa, sb) = (a.shape(), b.shape());
    let rank = sa.len();
    let (batch_shape, matrix_shape) = sb.split_at(rank - 2);
    if sa[..rank - 2] != *batch_shape || sa[rank - 2] != 1 || sa[rank - 1] != matrix_shape[0] {
        return Ok(None);
    }
    let (k, n) = (matrix_shape[0] as usize, matrix_shape[1] as usize);
    let batch: usize = batch_shape.iter().map(|&d| d as usize).product();
    if k < 2 || n < 2 || batch * k * n < MIN_MATRIX_ELEMENTS || !Device::current_is_cpu() {
        return Ok(None);
    }
    mlx_rs::transforms::eval([a, b])?;
    let (Some(strides_a), Some(strides_b)) = (strides(a), strides(b)) else {
        return Ok(None);
    };
    // a's rows in order; b's matrices as rows of n values `ld` apart, or
    // columns of k values `ld` apart
    if strides_a[rank - 1] != 1 {
        return Ok(None);
    }
    let Some(Layout { column_major, ld }) = matrix_layout(matrix_shape, &strides_b[rank - 2..])
    else {
        return Ok(None);
    };
    let (Some(span_a), Some(span_b)) = (span(sa, &strides_a), span(sb, &strides_b)) else {
        return Ok(None);
    };
    let (xs, ms) = (values(a, span_a)?, values(b, span_b)?);
    let offsets_a = batch_offsets(batch_shape, &strides_a[..rank - 2]);
    let offsets_b = batch_offsets(batch_shape, &strides_b[..rank - 2]);
    let mut out = vec![0.0f32; batch * n];
    for ((y, &off_a), &off_b) in out.chunks_exact_mut(n).zip(&offsets_a).zip(&offsets_b) {
        let x = &xs[off_a..off_a + k];
        if column_major {
            // column j of the matrix: k values from off_b + j·ld
            row_dots(&ms[off_b..off_b + (n - 1) * ld + k], ld, x, y);
        } else {
            scaled_rows(x, &ms[off_b..off_b + (k - 1) * ld + n], ld, y);
        }
    }
    let mut shape = sa.to_vec();
    shape[rank - 1] = n as i32;
    Ok(Some(Array::from_slice(&out, &shape)))
}

/// From this many matrix elements on (1 MB of float32), a one-row product
/// is computed in blocks of its stored rows, some of which the caller's
/// thread may compute while it waits for the result (crate::split_work).
/// The blocks are added (or put side by side) in the same order whoever
/// computed them.
pub const SPLIT_MIN_ELEMENTS: usize = 256 * 1024;

/// At least this many blocks (halves): the worker takes blocks from the
/// first, a helper from the last. Halves beat more blocks: a helper that
/// takes the second half of each product keeps it in its core's cache from
/// call to call (docs/decisions/0007-one-row-products.md).
const SPLIT_PARTS: usize = 2;

/// At most about this many matrix elements a block (1 MB of float32): a
/// helper computes one block at a time between checks of how long it has
/// waited, so a block is kept short.
const PART_ELEMENTS: usize = 256 * 1024;

/// One row or column times a stored matrix ([`vector_product`]), by raw
/// parts so that a helper thread can compute some of it.
#[derive(Clone, Copy)]
struct StoredProduct {
    /// y = Σ_i x[i] · row i (true), or y[i] = row i · x (false).
    sums_rows: bool,
    x: *const f32,
    x_len: usize,
    stored: *const f32,
    stored_len: usize,
    stored_rows: usize,
    stored_cols: usize,
    ld: usize,
}

// SAFETY: the pointers address evaluated MLX buffers, which nothing writes;
// crate::split_work keeps the arrays that hold them alive while any thread
// may read them (vector_product passes them as the job's `keep`).
unsafe impl Send for StoredProduct {}
// SAFETY: as for Send: shared reads of immutable buffers.
unsafe impl Sync for StoredProduct {}

impl StoredProduct {
    /// How many blocks of rows: SPLIT_PARTS, more for a larger matrix (a
    /// block of about PART_ELEMENTS), at most one a row.
    fn block_count(&self) -> usize {
        (self.stored_rows * self.stored_cols)
            .div_ceil(PART_ELEMENTS)
            .max(SPLIT_PARTS)
            .min(self.stored_rows)
    }

    /// The stored rows of block `part` (blocks of equal size, the last
    /// ones shorter or empty).
    fn rows_of(&self, part: usize) -> std::ops::Range<usize> {
        let block = self.stored_rows.div_ceil(self.block_count());
        (part * block).min(self.stored_rows)..((part + 1) * block).min(self.stored_rows)
    }

    /// The vector and the stored rows `range` (`ld` apart).
    fn parts(&self, range: std::ops::Range<usize>) -> (&[f32], &[f32]) {
        // SAFETY: `x` and `stored` come from slices of `x_len` and
        // `stored_len` values (vector_product's `values`), alive as the
        // type's notes say; `range` lies within the stored rows, so its
        // values (the last row `stored_cols` long) lie within `stored`.
        unsafe {
            let x = std::slice::from_raw_parts(self.x, self.x_len);
            let stored = std::slice::from_raw_parts(self.stored, self.stored_len);
            let rows = if range.is_empty() {
                &stored[..0]
            } else {
                &stored[range.start * self.ld..(range.end - 1) * self.ld + self.stored_cols]
            };
            (x, rows)
        }
    }

    /// The product over the stored rows `range` into `out`: the sum of
    /// those rows scaled by their entries of x, or their dot products with
    /// x (all rows: the whole product, in one pass).
    fn rows_product(&self, range: std::ops::Range<usize>, out: &mut [f32]) {
        let (x, rows) = self.parts(range.clone());
        if self.sums_rows {
            scaled_rows(&x[range], rows, self.ld, out);
        } else {
            row_dots(rows, self.ld, x, out);
        }
    }

    /// Whether the product goes in blocks that a waiting thread may share
    /// (crate::split_work): a large enough matrix.
    fn in_blocks(&self) -> bool {
        self.stored_rows * self.stored_cols >= SPLIT_MIN_ELEMENTS && self.stored_rows >= SPLIT_PARTS
    }

    /// The product (`len` values), computed on this thread: in the blocks
    /// of [`StoredProduct::in_blocks`] that a waiting thread may share
    /// (crate::split_work: `keep` gives the owners of the memory they read),
    /// added in order, or in one pass over the rows.
    fn compute_in_parts(
        self,
        len: usize,
        keep: impl FnOnce() -> Vec<split_work::Kept>,
    ) -> Vec<f32> {
        if !self.in_blocks() {
            let mut y = vec![0.0f32; len];
            self.rows_product(0..self.stored_rows, &mut y);
            return y;
        }
        let mut y = Vec::with_capacity(len);
        split_work::in_parts(Arc::new(self), keep, |part, values| {
            self.take(&mut y, part, values)
        });
        y
    }

    /// Adds part `part`'s values to the product `y` (parts in order): the
    /// sum of the parts (each a sum over its rows), or the parts side by
    /// side (each its rows' dot products).
    fn take(&self, y: &mut Vec<f32>, part: usize, values: &[f32]) {
        if self.sums_rows && part > 0 {
            for (a, b) in y.iter_mut().zip(values) {
                *a += b;
            }
        } else {
            y.extend_from_slice(values);
        }
    }
}

impl split_work::Parts for StoredProduct {
    fn count(&self) -> usize {
        self.block_count()
    }

    fn len(&self, part: usize) -> usize {
        if self.sums_rows {
            self.stored_cols
        } else {
            self.rows_of(part).len()
        }
    }

    fn compute(&self, part: usize, out: &mut [f32]) {
        self.rows_product(self.rows_of(part), out);
    }
}

/// How a matrix's elements lie in memory: rows (`column_major`: columns)
/// of contiguous values, each `ld` values after the one before (at least
/// their length: the leading dimension of BLAS).
struct Layout {
    column_major: bool,
    ld: usize,
}

/// The layout of a matrix of `shape` (rows, columns) and `strides`: one of
/// them 1, the other at least the length of what it steps over (an axis of
/// size 1 may have any stride: it is never stepped over).
fn matrix_layout(shape: &[i32], strides: &[usize]) -> Option<Layout> {
    let (&[rows, cols], &[row_stride, col_stride]) = (shape, strides) else {
        return None;
    };
    let (rows, cols) = (rows as usize, cols as usize);
    if cols == 1 || col_stride == 1 {
        let ld = if rows == 1 { cols } else { row_stride };
        (ld >= cols).then_some(Layout {
            column_major: false,
            ld,
        })
    } else if rows == 1 || row_stride == 1 {
        let ld = if cols == 1 { rows } else { col_stride };
        (ld >= rows).then_some(Layout {
            column_major: true,
            ld,
        })
    } else {
        None
    }
}

/// An evaluated array's strides in elements, or `None` if one is negative
/// (MLX keeps them as signed integers; a reversed view has a negative one).
fn strides(array: &Array) -> Option<Vec<usize>> {
    let strides = array.strides();
    strides
        .iter()
        .all(|&s| s <= isize::MAX as usize)
        .then(|| strides.to_vec())
}

/// How many elements from its data pointer on an array of `shape` and
/// `strides` addresses: one past its last element's offset (`None` on
/// overflow; an empty array has none, and is never asked).
fn span(shape: &[i32], strides: &[usize]) -> Option<usize> {
    shape.iter().zip(strides).try_fold(1usize, |acc, (&d, &s)| {
        (d as usize)
            .checked_sub(1)?
            .checked_mul(s)?
            .checked_add(acc)
    })
}

/// The offset of every index of the batch axes `shape` (row-major order)
/// under `strides`.
fn batch_offsets(shape: &[i32], strides: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .zip(strides)
        .fold(vec![0usize], |offsets, (&d, &s)| {
            offsets
                .iter()
                .flat_map(|&o| (0..d as usize).map(move |i| o + i * s))
                .collect()
        })
}

/// The `len` values of an evaluated float32 array from its data pointer on:
/// its storage in order for a contiguous array (row- or column-major), or
/// the [`span`] of a strided one.
fn values(array: &Array, len: usize) -> Result<&[f32]> {
    // SAFETY: `array` is a live, evaluated float32 array (checked by the
    // caller), so its data pointer is set; mlx_array_data_float32 returns it.
    let data = unsafe { mlx_sys::mlx_array_data_float32(array.as_ptr()) };
    if data.is_null() || data.align_offset(std::mem::align_of::<f32>()) != 0 {
        return Err(Error::Internal(
            "an evaluated array has no float32 data".into(),
        ));
    }
    // SAFETY: the caller passes a contiguous array's element count, or the
    // span of the offsets its shape and non-negative strides address from
    // the data pointer: MLX's buffer holds every element of the view, so
    // `len` float32 values from `data` lie in it; `data` is aligned
    // (checked); the slice borrows `array`, which keeps the buffer alive,
    // and nothing writes to an evaluated array.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

multiversion!(
    /// y = Σ_i x[i] · rows[i] (`rows`: x.len() rows of y.len() values,
    /// each `stride` values after the one before).
    fn scaled_rows = scaled_rows_avx512, scaled_rows_avx2, scaled_rows_plain(
        x: &[f32],
        rows: &[f32],
        stride: usize,
        y: &mut [f32],
    );
);

/// Rows a pass of [`scaled_rows`] adds to y: y is read and written once for
/// them, where a pass a row spent as many loads and stores on y as on the
/// matrix. The additions stay in order (row after row, each a product then
/// a sum), so the bits are those of a pass a row. Four beat one and eight
/// (docs/decisions/0007-one-row-products.md).
const ROWS_A_PASS: usize = 4;

#[inline(always)]
fn scaled_rows_plain(x: &[f32], rows: &[f32], stride: usize, y: &mut [f32]) {
    y.fill(0.0);
    let len = y.len();
    let row = |i: usize| &rows[i * stride..i * stride + len];
    let passes = x.len() / ROWS_A_PASS;
    for pass in 0..passes {
        let i = pass * ROWS_A_PASS;
        let (x0, x1, x2, x3) = (x[i], x[i + 1], x[i + 2], x[i + 3]);
        let (r0, r1, r2, r3) = (row(i), row(i + 1), row(i + 2), row(i + 3));
        for ((((yj, &a), &b), &c), &d) in y.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3) {
            *yj = *yj + x0 * a + x1 * b + x2 * c + x3 * d;
        }
    }
    for (i, &xi) in x.iter().enumerate().skip(passes * ROWS_A_PASS) {
        for (yj, &r) in y.iter_mut().zip(row(i)) {
            *yj += xi * r;
        }
    }
}

multiversion!(
    /// y[i] = rows[i] · x (`rows`: y.len() rows of x.len() values, each
    /// `stride` values after the one before).
    fn row_dots = row_dots_avx512, row_dots_avx2, row_dots_plain(
        rows: &[f32],
        stride: usize,
        x: &[f32],
        y: &mut [f32],
    );
);

/// Partial sums a dot product keeps (independent lanes the compiler can
/// put in vectors: a single running sum would fix the order of additions).
const LANES: usize = 16;

#[inline(always)]
fn row_dots_plain(rows: &[f32], stride: usize, x: &[f32], y: &mut [f32]) {
    for (yi, row) in y.iter_mut().zip(rows.chunks(stride)) {
        let row = &row[..x.len()];
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
    use crate::ops::matmul_f64 as reference;
    use crate::worker::run_blocking;

    /// Asserts each computed value lies within 1e-4 (relative, absolute
    /// below 1) of its float64 reference.
    fn assert_close<'a>(pairs: impl Iterator<Item = (&'a f32, &'a f64)>) {
        for (g, want) in pairs {
            assert!(
                (*g as f64 - want).abs() <= 1e-4 * want.abs().max(1.0),
                "{g} vs {want}"
            );
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
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
    fn rows_scaled_and_summed_in_order_whatever_their_count() {
        // every count of rows around ROWS_A_PASS's multiples, rows spaced
        // wider than they are long: the bits of adding one row at a time
        let (len, stride) = (37usize, 41usize);
        for count in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 13, 64, 67] {
            let x = sample(count, 3);
            let rows = sample((count - 1) * stride + len, 4);
            let mut want = vec![0.0f32; len];
            for (i, &xi) in x.iter().enumerate() {
                for (j, w) in want.iter_mut().enumerate() {
                    *w += xi * rows[i * stride + j];
                }
            }
            let mut got = vec![f32::NAN; len];
            scaled_rows(&x, &rows, stride, &mut got);
            assert_eq!(bits(&got), bits(&want), "{count} rows");
        }
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
            assert_close(v.iter().zip(&want_row));
        }
    }

    #[test]
    fn every_compiled_copy_gives_the_plain_copy_s_bits() {
        let (r, c) = (37usize, 301usize);
        let m = sample(r * c, 5);
        let xr = sample(r, 6);
        let xc = sample(c, 7);
        let mut plain_rows = vec![0.0; c];
        scaled_rows_plain(&xr, &m, c, &mut plain_rows);
        let mut plain_dots = vec![0.0; r];
        row_dots_plain(&m, c, &xc, &mut plain_dots);
        let mut best_rows = vec![0.0; c];
        scaled_rows(&xr, &m, c, &mut best_rows);
        let mut best_dots = vec![0.0; r];
        row_dots(&m, c, &xc, &mut best_dots);
        assert_eq!(bits(&plain_rows), bits(&best_rows));
        assert_eq!(bits(&plain_dots), bits(&best_dots));
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            let mut rows2 = vec![0.0; c];
            let mut dots2 = vec![0.0; r];
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe {
                scaled_rows_avx2(&xr, &m, c, &mut rows2);
                row_dots_avx2(&m, c, &xc, &mut dots2);
            }
            assert_eq!(bits(&plain_rows), bits(&rows2));
            assert_eq!(bits(&plain_dots), bits(&dots2));
        }
    }

    /// A decoding step's attention: one query row per head times the keys'
    /// transpose and the values, both strided views of a `[1, len, heads,
    /// dim]` cache, as a language model keeps it.
    #[test]
    fn batched_rows_times_strided_views_of_a_cache() {
        let (len, heads, dim) = (48usize, 4usize, 64usize);
        let cache = sample(len * heads * dim, 3);
        let q = sample(heads * dim, 4);
        let w = sample(heads * len, 5);
        let at = |s: usize, h: usize, d: usize| cache[(s * heads + h) * dim + d] as f64;
        // scores[h][s] = Σ_d q[h][d] · cache[s][h][d]; out[h][d] = Σ_s w[h][s] · cache[s][h][d]
        let scores: Vec<f64> = (0..heads)
            .flat_map(|h| (0..len).map(move |s| (h, s)))
            .map(|(h, s)| (0..dim).map(|d| q[h * dim + d] as f64 * at(s, h, d)).sum())
            .collect();
        let out: Vec<f64> = (0..heads)
            .flat_map(|h| (0..dim).map(move |d| (h, d)))
            .map(|(h, d)| (0..len).map(|s| w[h * len + s] as f64 * at(s, h, d)).sum())
            .collect();
        let (l, h, d) = (len as i32, heads as i32, dim as i32);
        let got = run_blocking(Device::Cpu, move || {
            let cache = Array::from_slice(&cache, &[1, l, h, d]);
            // [1, heads, len, dim] and [1, heads, dim, len] views
            let values = mlx_rs::ops::transpose_axes(&cache, &[0, 2, 1, 3])?;
            let keys_t = mlx_rs::ops::transpose_axes(&cache, &[0, 2, 3, 1])?;
            let q = Array::from_slice(&q, &[1, h, 1, d]);
            let w = Array::from_slice(&w, &[1, h, 1, l]);
            let run = |a: &Array, b: &Array| -> Result<(Vec<i32>, Vec<f32>)> {
                let p = vector_product(a, b)?.expect("computed here");
                Ok((p.shape().to_vec(), p.as_slice::<f32>().to_vec()))
            };
            Ok((run(&q, &keys_t)?, run(&w, &values)?))
        })
        .unwrap();
        let ((scores_shape, got_scores), (out_shape, got_out)) = got;
        assert_eq!(scores_shape, [1, h, 1, l]);
        assert_eq!(out_shape, [1, h, 1, d]);
        assert_close(
            got_scores
                .iter()
                .zip(&scores)
                .chain(got_out.iter().zip(&out)),
        );
    }

    /// A weight matrix that is a block of columns of a wider one (a fused
    /// query/key/value projection split in three, as a loaded GPT-2 has
    /// them), and its transpose: rows or columns `ld` apart.
    #[test]
    fn one_row_times_a_block_of_a_wider_matrix() {
        let (k, wide, n) = (256usize, 768usize, 256usize);
        let x = sample(k, 8);
        let w = sample(k * wide, 9);
        // the middle block: columns n .. 2n
        let block: Vec<f32> = (0..k * n).map(|i| w[(i / n) * wide + n + i % n]).collect();
        let want = reference(&x, &block, 1, k, n);
        let want_t = {
            // blockᵀ · x: row j of the transpose is column j of the block
            let t: Vec<f32> = (0..n * k).map(|i| block[(i % k) * n + i / k]).collect();
            reference(&t, &x, n, k, 1)
        };
        let (got, got_t) = run_blocking(Device::Cpu, move || {
            let w = Array::from_slice(&w, &[k as i32, wide as i32]);
            let block =
                crate::ops::shape::slice(&w, &[0, n as i64], &[k as i64, 2 * n as i64], &[1, 1])?;
            let x_row = Array::from_slice(&x, &[1, 1, k as i32]);
            let x_col = Array::from_slice(&x, &[k as i32, 1]);
            let p = vector_product(&x_row, &block)?.expect("computed here");
            let block_t = mlx_rs::ops::transpose(&block)?;
            let q = vector_product(&block_t, &x_col)?.expect("computed here");
            assert_eq!(p.shape(), [1, 1, n as i32]);
            assert_eq!(q.shape(), [n as i32, 1]);
            Ok((p.as_slice::<f32>().to_vec(), q.as_slice::<f32>().to_vec()))
        })
        .unwrap();
        assert_close(got.iter().zip(&want).chain(got_t.iter().zip(&want_t)));
    }

    /// Products of at least SPLIT_MIN_ELEMENTS go in parts
    /// (crate::split_work): the same bits whether a helper thread computed
    /// some or not, and the values of the product.
    #[test]
    fn large_products_in_parts_the_same_with_or_without_a_helper() {
        // two blocks, and five (more than SPLIT_PARTS: a larger matrix)
        for (k, n) in [(601usize, 512usize), (1100, 1024)] {
            products_in_parts(k, n);
        }
    }

    fn products_in_parts(k: usize, n: usize) {
        let _one = split_work::one_test_at_a_time();
        assert!(k * n >= SPLIT_MIN_ELEMENTS);
        let x = sample(k, 11);
        let w = sample(k * n, 12);
        let want = reference(&x, &w, 1, k, n);
        let products = move || {
            let (x, w) = (x.clone(), w.clone());
            run_blocking(Device::Cpu, move || {
                let row = Array::from_slice(&x, &[1, k as i32]);
                let wa = Array::from_slice(&w, &[k as i32, n as i32]);
                // its transpose times a column: dot products of stored rows
                let wt = mlx_rs::ops::transpose(&wa)?;
                let wt = crate::ops::shape::contiguous(&wt)?;
                let col = Array::from_slice(&x, &[k as i32, 1]);
                let mut out = vec![];
                for _ in 0..20 {
                    let p = vector_product(&row, &wa)?.expect("computed here");
                    let q = vector_product(&wt, &col)?.expect("computed here");
                    out.push((p.as_slice::<f32>().to_vec(), q.as_slice::<f32>().to_vec()));
                }
                Ok(out)
            })
            .unwrap()
        };
        let alone = products();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let helper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    split_work::help();
                }
            })
        };
        let helped = products();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        helper.join().unwrap();
        let (p0, q0) = &alone[0];
        for (p, q) in alone.iter().chain(&helped) {
            assert_eq!(bits(p), bits(p0));
            assert_eq!(bits(q), bits(q0));
        }
        assert_close(p0.iter().zip(&want).chain(q0.iter().zip(&want)));
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
            // batches: [4, 64, 48] matrices, and rows of other shapes
            let b = Array::from_slice(&vec![1.0f32; 4 * 64 * 48], &[4, 64, 48]);
            let rows = Array::from_slice(&[1.0f32; 4 * 64], &[4, 1, 64]);
            let two_rows = Array::from_slice(&[1.0f32; 4 * 2 * 64], &[4, 2, 64]);
            let other_batch = Array::from_slice(&[1.0f32; 2 * 64], &[2, 1, 64]);
            let small_batch = Array::from_slice(&[1.0f32; 2 * 8 * 8], &[2, 8, 8]);
            let small_rows = Array::from_slice(&[1.0f32; 2 * 8], &[2, 1, 8]);
            // a batch of matrices of neither layout: every other column
            let wide = Array::from_slice(&vec![1.0f32; 4 * 64 * 96], &[4, 64, 96]);
            let gappy = crate::ops::shape::slice(&wide, &[0, 0, 0], &[4, 64, 96], &[1, 1, 2])?;
            Ok(vec![
                vector_product(&square, &square)?.is_none(),
                vector_product(&row32, &small)?.is_none(),
                vector_product(&f64_row, &square)?.is_none(),
                vector_product(&row, &broadcast)?.is_none(),
                vector_product(&row, &square)?.is_some(),
                vector_product(&two_rows, &b)?.is_none(),
                vector_product(&other_batch, &b)?.is_none(),
                vector_product(&small_rows, &small_batch)?.is_none(),
                vector_product(&rows, &gappy)?.is_none(),
                vector_product(&rows, &b)?.is_some(),
            ])
        })
        .unwrap();
        assert_eq!(left, [true; 10]);
    }
}
