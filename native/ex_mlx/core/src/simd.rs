//! Loops compiled for the widest vectors the CPU has: [`multiversion`]
//! makes, from one `#[inline(always)]` function, copies compiled for
//! AVX-512F and AVX2 and a function that runs the best one the CPU has
//! (checked at run time), else the plain copy. The copies run the same
//! operations (no fused multiply-add: Rust does not contract `a * b + c`),
//! so they give the same bits; only the width of the vectors differs.

/// `multiversion!(fn best = avx512, avx2, plain(arg: Type, ...));` defines
/// `best`, which runs `plain` (an `#[inline(always)]` function of those
/// arguments, returning nothing) compiled for AVX-512F or AVX2 where the CPU
/// has it, and on x86-64 the `unsafe` copies `avx512` and `avx2` themselves
/// (for tests that compare them; safe only on a CPU with that feature).
macro_rules! multiversion {
    ($(#[$doc:meta])* fn $best:ident = $avx512:ident, $avx2:ident, $plain:ident ($($arg:ident: $ty:ty),* $(,)?);) => {
        $(#[$doc])*
        fn $best($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked just above).
                    return unsafe { $avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked just above).
                    return unsafe { $avx2($($arg),*) };
                }
            }
            $plain($($arg),*)
        }

        /// The plain copy compiled for AVX-512F.
        ///
        /// # Safety
        /// Only on a CPU that has AVX-512F.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn $avx512($($arg: $ty),*) {
            $plain($($arg),*)
        }

        /// The plain copy compiled for AVX2.
        ///
        /// # Safety
        /// Only on a CPU that has AVX2.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2($($arg: $ty),*) {
            $plain($($arg),*)
        }
    };
}

pub(crate) use multiversion;
