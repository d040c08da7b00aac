//! Host-side f64 linear algebra on row-major matrices: the Householder QR
//! that Nx defines, and the sign and order conventions ExMLX applies to
//! MLX's eigen- and singular-vectors. Plain Rust on slices, so it is tested
//! without MLX.

/// Two magnitudes within this relative distance of the largest count as
/// tied when picking the component that fixes a vector's sign (components
/// that are equal in exact arithmetic differ by a few f64 ulps here).
const PIVOT_TIE: f64 = 1e-8;

/// The QR factors of one matrix, row-major: `q` is `m × q_cols`, `r` is
/// `r_rows × n`.
#[derive(Debug, Clone, PartialEq)]
pub struct Qr {
    pub q: Vec<f64>,
    pub r: Vec<f64>,
    pub q_cols: usize,
    pub r_rows: usize,
}

/// One Householder reflection `I - scale · v · vᵀ` acting on rows `row..`.
struct Reflector {
    row: usize,
    v: Vec<f64>,
    scale: f64,
}

/// `a · b` with four running sums, which the compiler keeps in vector
/// registers (a single running sum must be added in order, one at a time).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut sums = [0.0; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let rest: f64 = a4
        .remainder()
        .iter()
        .zip(b4.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a4.zip(b4) {
        for k in 0..4 {
            sums[k] += x[k] * y[k];
        }
    }
    (sums[0] + sums[1]) + (sums[2] + sums[3]) + rest
}

impl Reflector {
    /// Applies the reflection to `column` (one whole column, `m` long).
    fn apply(&self, column: &mut [f64]) {
        let tail = &mut column[self.row..];
        let f = self.scale * dot(&self.v, tail);
        for (c, v) in tail.iter_mut().zip(&self.v) {
            *c -= f * v;
        }
    }
}

/// QR of the `m × n` row-major matrix `a` by Householder reflections, with
/// the choices of Nx's own QR:
///
/// * column `i` (for `i < min(m, n)`) is reflected onto `+‖x‖·eᵢ`, where `x`
///   is its part from row `i` down, so R's diagonal is non-negative there;
/// * a column whose part below the diagonal has squared norm under `eps`
///   (or is empty: the last column of a square matrix, the last row of a
///   wide one) is left as it is, keeping its diagonal's sign;
/// * entries of `q` and `r` of magnitude at most `eps` are set to `0.0`.
///
/// `complete` gives `q` as `m × m` and `r` as `m × n`; otherwise `q` is
/// `m × k` and `r` is `k × n`, `k = min(m, n)`.
pub fn householder_qr(a: &[f64], m: usize, n: usize, complete: bool, eps: f64) -> Qr {
    let k = m.min(n);
    // Column-major working copy: column j is r[j*m .. (j+1)*m].
    let mut r = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            r[j * m + i] = a[i * n + j];
        }
    }

    let mut reflectors = Vec::with_capacity(k);
    for i in 0..k {
        let column = &r[i * m..(i + 1) * m];
        let x_i = column[i];
        let below = dot(&column[i + 1..], &column[i + 1..]);
        if below == 0.0 || below < eps {
            continue;
        }
        let norm = (x_i * x_i + below).sqrt();
        // v = x - ‖x‖·eᵢ, its first entry computed without cancellation,
        // then scaled so that v[0] = 1.
        let v0 = if x_i <= 0.0 {
            x_i - norm
        } else {
            -below / (x_i + norm)
        };
        let mut v: Vec<f64> = column[i..].to_vec();
        v[0] = v0;
        for t in v.iter_mut() {
            *t /= v0;
        }
        let v_sq = dot(&v, &v);
        let reflector = Reflector {
            row: i,
            v,
            scale: 2.0 / v_sq,
        };
        // Column i becomes ‖x‖·eᵢ exactly; the columns after it are reflected.
        r[i * m + i] = norm;
        for t in r[i * m + i + 1..(i + 1) * m].iter_mut() {
            *t = 0.0;
        }
        for j in i + 1..n {
            reflector.apply(&mut r[j * m..(j + 1) * m]);
        }
        reflectors.push(reflector);
    }

    let q_cols = if complete { m } else { k };
    let r_rows = if complete { m } else { k };

    // q = H₀·H₁·…, applied to the first q_cols columns of the identity, last
    // reflection first. Column j < row is still eⱼ when H_row reaches it, and
    // H_row leaves it alone.
    let mut q = vec![0.0; m * q_cols];
    for j in 0..q_cols {
        q[j * m + j] = 1.0;
    }
    for reflector in reflectors.iter().rev() {
        for j in reflector.row..q_cols {
            reflector.apply(&mut q[j * m..(j + 1) * m]);
        }
    }

    let clean = |x: f64| if x.abs() <= eps { 0.0 } else { x };
    let mut q_out = vec![0.0; m * q_cols];
    for i in 0..m {
        for j in 0..q_cols {
            q_out[i * q_cols + j] = clean(q[j * m + i]);
        }
    }
    let mut r_out = vec![0.0; r_rows * n];
    for i in 0..r_rows {
        for j in 0..n {
            r_out[i * n + j] = clean(r[j * m + i]);
        }
    }
    Qr {
        q: q_out,
        r: r_out,
        q_cols,
        r_rows,
    }
}

/// The index that fixes a vector's sign: the first component whose
/// magnitude is (within [`PIVOT_TIE`]) the largest. `None` for a zero (or
/// NaN) vector.
fn sign_pivot(values: impl Iterator<Item = f64> + Clone) -> Option<usize> {
    let largest = values.clone().fold(0.0_f64, |m, x| m.max(x.abs()));
    if largest == 0.0 || largest.is_nan() {
        return None;
    }
    let threshold = largest * (1.0 - PIVOT_TIE);
    values.into_iter().position(|x| x.abs() >= threshold)
}

/// `x + 0.0`: turns `-0.0` into `0.0` and leaves every other value as it is.
fn positive_zero(x: f64) -> f64 {
    x + 0.0
}

/// Orders one symmetric eigendecomposition as ExMLX.Backend returns it:
/// `w` (`n` eigenvalues, any order) and `v` (`n × n` row-major, eigenvectors
/// in columns) become eigenvalues by decreasing magnitude (ties: the larger
/// value first), as Nx orders them, and each eigenvector has its largest
/// component (the first of equal ones) positive.
pub fn order_eigh(w: &[f64], v: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        w[b].abs()
            .total_cmp(&w[a].abs())
            .then(w[b].total_cmp(&w[a]))
    });
    let w_out: Vec<f64> = order.iter().map(|&i| w[i]).collect();
    let mut v_out = vec![0.0; n * n];
    for (j, &c) in order.iter().enumerate() {
        let column = (0..n).map(|i| v[i * n + c]);
        let flip = sign_pivot(column).is_some_and(|p| v[p * n + c] < 0.0);
        for i in 0..n {
            let x = v[i * n + c];
            v_out[i * n + j] = positive_zero(if flip { -x } else { x });
        }
    }
    (w_out, v_out)
}

/// Fixes the signs of one SVD in place: `u` is `m × m`, `vt` is `n × n`
/// (row-major), singular vector `i` being column `i` of `u` and row `i` of
/// `vt`. For a tall or square matrix (`m ≥ n`) each right singular vector
/// has its largest component positive, for a wide one each left singular
/// vector (the pair is flipped together, so u·diag(s)·vt is unchanged); the
/// vectors without a partner (u's columns past n, vt's rows past m) get the
/// same rule on their own.
pub fn orient_svd(u: &mut [f64], vt: &mut [f64], m: usize, n: usize) {
    let k = m.min(n);
    let flip_u_column = |u: &mut [f64], j: usize| {
        for i in 0..m {
            u[i * m + j] = -u[i * m + j];
        }
    };
    let flip_vt_row = |vt: &mut [f64], i: usize| {
        for x in vt[i * n..(i + 1) * n].iter_mut() {
            *x = -*x;
        }
    };
    let u_column_negative = |u: &[f64], j: usize| {
        sign_pivot((0..m).map(|i| u[i * m + j])).is_some_and(|p| u[p * m + j] < 0.0)
    };
    let vt_row_negative = |vt: &[f64], i: usize| {
        let row = &vt[i * n..(i + 1) * n];
        sign_pivot(row.iter().copied()).is_some_and(|p| row[p] < 0.0)
    };
    for i in 0..k {
        let flip = if m >= n {
            vt_row_negative(vt, i)
        } else {
            u_column_negative(u, i)
        };
        if flip {
            flip_u_column(u, i);
            flip_vt_row(vt, i);
        }
    }
    for j in k..m {
        if u_column_negative(u, j) {
            flip_u_column(u, j);
        }
    }
    for i in k..n {
        if vt_row_negative(vt, i) {
            flip_vt_row(vt, i);
        }
    }
    for x in u.iter_mut().chain(vt.iter_mut()) {
        *x = positive_zero(*x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul_f64 as matmul;

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn an_upper_triangular_matrix_is_its_own_r() {
        // No column has anything below its diagonal: no reflection at all,
        // negative diagonal entries included.
        let a = [-3.0, 2.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, -1.0];
        let qr = householder_qr(&a, 3, 3, false, 1e-10);
        assert_eq!(qr.q, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(qr.r, a);
    }

    #[test]
    fn reflected_columns_get_a_positive_diagonal() {
        // a = [[0, 1], [3, 2]]: column 0 (0, 3) is reflected onto (3, 0) by
        // the swap-like reflection [[0, 1], [1, 0]], so q = [[0, 1], [1, 0]]
        // and r = [[3, 2], [0, 1]] (the last column of a square matrix is
        // not reflected: its diagonal keeps the sign it has, here +1).
        let qr = householder_qr(&[0.0, 1.0, 3.0, 2.0], 2, 2, false, 1e-10);
        assert_close(&qr.q, &[0.0, 1.0, 1.0, 0.0], 1e-15);
        assert_close(&qr.r, &[3.0, 2.0, 0.0, 1.0], 1e-15);

        // a = [[1, 2], [1, 0]]: r₀₀ = √2, q's first column (1, 1)/√2; the
        // second column of q is then (1, -1)/√2 (det q = -1 for one
        // reflection), and r₀₁ = q₀ · a₁ = √2, r₁₁ = q₁ · a₁ = √2.
        let s = std::f64::consts::FRAC_1_SQRT_2;
        let qr = householder_qr(&[1.0, 2.0, 1.0, 0.0], 2, 2, false, 1e-10);
        assert_close(&qr.q, &[s, s, s, -s], 1e-15);
        let r2 = std::f64::consts::SQRT_2;
        assert_close(&qr.r, &[r2, r2, 0.0, r2], 1e-15);
    }

    #[test]
    fn tall_matrices_reduced_and_complete() {
        // [[3, 2, 1], [0, 1, 1], [0, 0, 1], [0, 0, 1]]: only the last column
        // has something below its diagonal, (1, 1) → (√2, 0).
        let a = [3.0, 2.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let s = std::f64::consts::FRAC_1_SQRT_2;
        let reduced = householder_qr(&a, 4, 3, false, 1e-10);
        assert_eq!((reduced.q_cols, reduced.r_rows), (3, 3));
        assert_close(
            &reduced.q,
            &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, s, 0.0, 0.0, s],
            1e-15,
        );
        let r2 = std::f64::consts::SQRT_2;
        assert_close(
            &reduced.r,
            &[3.0, 2.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, r2],
            1e-15,
        );

        let complete = householder_qr(&a, 4, 3, true, 1e-10);
        assert_eq!((complete.q_cols, complete.r_rows), (4, 4));
        // q orthonormal and q·r = a
        let qt_q = matmul(&transpose(&complete.q, 4, 4), &complete.q, 4, 4, 4);
        assert_close(&qt_q, &identity(4), 1e-15);
        assert_close(&matmul(&complete.q, &complete.r, 4, 4, 3), &a, 1e-15);
        // the last row of r is zero
        assert_eq!(&complete.r[9..], &[0.0, 0.0, 0.0]);
    }

    #[test]
    fn wide_matrices() {
        // 2 × 3: q is 2 × 2, r is 2 × 3, q·r = a, r upper triangular.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let qr = householder_qr(&a, 2, 3, false, 1e-10);
        assert_eq!((qr.q_cols, qr.r_rows), (2, 2));
        assert_close(&matmul(&qr.q, &qr.r, 2, 2, 3), &a, 1e-14);
        assert_eq!(qr.r[3], 0.0);
        // column 0, (1, 4), is reflected onto (√17, 0)
        assert_close(&qr.r[..1], &[17f64.sqrt()], 1e-15);
    }

    #[test]
    fn random_matrices_reconstruct() {
        // A fixed pseudo-random 5 × 4 matrix (a linear congruential sequence).
        let mut state = 12345u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        let a: Vec<f64> = (0..20).map(|_| next()).collect();
        let qr = householder_qr(&a, 5, 4, false, 1e-10);
        assert_close(&matmul(&qr.q, &qr.r, 5, 4, 4), &a, 1e-14);
        let qt_q = matmul(&transpose(&qr.q, 5, 4), &qr.q, 4, 5, 4);
        assert_close(&qt_q, &identity(4), 1e-14);
        for i in 0..4 {
            assert!(qr.r[i * 4 + i] > 0.0, "diagonal {i} of {:?}", qr.r);
            for j in 0..i {
                assert_eq!(qr.r[i * 4 + j], 0.0);
            }
        }
    }

    #[test]
    fn eigh_order_and_signs() {
        // eigenvalues -5 (vector (1, -1)/√2... given as (-0.7, 0.7)) and 1
        // ((0.7, 0.7)): by magnitude -5 comes first, its vector flipped so
        // its first (tied) largest component is positive.
        let s = std::f64::consts::FRAC_1_SQRT_2;
        let w = [-5.0, 1.0];
        let v = [-s, s, s, s];
        let (w2, v2) = order_eigh(&w, &v, 2);
        assert_eq!(w2, [-5.0, 1.0]);
        assert_eq!(v2, [s, s, -s, s]);

        // ascending [1, 3] becomes [3, 1]; (0, -1) becomes (0, 1)
        let (w2, v2) = order_eigh(&[1.0, 3.0], &[1.0, 0.0, 0.0, -1.0], 2);
        assert_eq!(w2, [3.0, 1.0]);
        assert_eq!(v2, [0.0, 1.0, 1.0, 0.0]);

        // equal magnitudes: the positive eigenvalue first
        let (w2, _) = order_eigh(&[-2.0, 2.0], &[1.0, 0.0, 0.0, 1.0], 2);
        assert_eq!(w2, [2.0, -2.0]);
    }

    #[test]
    fn svd_signs_follow_the_right_vectors_of_tall_matrices() {
        // 2 × 2: vt's rows (-0.6, -0.8) and (0.8, -0.6) become (0.6, 0.8)
        // and (0.8, -0.6); u's first column flips with the first row.
        let mut u = [-1.0, 0.0, 0.0, 1.0];
        let mut vt = [-0.6, -0.8, 0.8, -0.6];
        orient_svd(&mut u, &mut vt, 2, 2);
        assert_eq!(vt, [0.6, 0.8, 0.8, -0.6]);
        assert_eq!(u, [1.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn svd_signs_follow_the_left_vectors_of_wide_matrices() {
        // m = 1, n = 2: u = [[-1]], vt = [[-0.6, -0.8], [0.8, -0.6]]: the
        // pair (u₀, vt₀) flips on u's sign; vt's second row, without a
        // partner, gets its largest component (0.8) positive: unchanged.
        let mut u = [-1.0];
        let mut vt = [-0.6, -0.8, 0.8, -0.6];
        orient_svd(&mut u, &mut vt, 1, 2);
        assert_eq!(u, [1.0]);
        assert_eq!(vt, [0.6, 0.8, 0.8, -0.6]);
    }

    #[test]
    fn negative_zeros_become_positive() {
        let mut u = [1.0, -0.0, -0.0, 1.0];
        let mut vt = [1.0, 0.0, -0.0, 1.0];
        orient_svd(&mut u, &mut vt, 2, 2);
        assert!(u.iter().chain(&vt).all(|x| x.is_sign_positive()));
    }

    fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
        let mut t = vec![0.0; rows * cols];
        for i in 0..rows {
            for j in 0..cols {
                t[j * rows + i] = a[i * cols + j];
            }
        }
        t
    }

    fn identity(n: usize) -> Vec<f64> {
        let mut e = vec![0.0; n * n];
        for i in 0..n {
            e[i * n + i] = 1.0;
        }
        e
    }
}
