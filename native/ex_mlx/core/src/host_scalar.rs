//! Integer and boolean scalars a running program knows on the host.
//!
//! A `while` loop reads its condition at every step. Read from MLX, that is
//! an evaluation, which on the CPU hands the work to MLX's stream thread and
//! waits for it: 10 to 60 µs a step on a 2-core machine, which made Nx's
//! threefry (about 60 loop steps) slower than Nx.BinaryBackend. Loop
//! counters and their comparisons are integer scalars computed from
//! constants, so a program computes those here instead: the result is made
//! as an MLX array from its bytes (already evaluated), and its value is known
//! without reading it. Only exact integer and boolean arithmetic is done here,
//! wrapping as MLX's integers wrap; anything else stays with MLX.

use mlx_rs::{Array, Dtype};

use crate::error::Result;
use crate::host;
use crate::item::{self, Number};
use crate::ops::table::Op;

/// An integer or boolean scalar of `dtype` whose value is `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostScalar {
    pub dtype: Dtype,
    pub value: i128,
}

/// Bits and signedness of an integer or boolean type.
fn width(dtype: Dtype) -> Option<(u32, bool)> {
    Some(match dtype {
        Dtype::Bool => (1, false),
        Dtype::Uint8 => (8, false),
        Dtype::Uint16 => (16, false),
        Dtype::Uint32 => (32, false),
        Dtype::Uint64 => (64, false),
        Dtype::Int8 => (8, true),
        Dtype::Int16 => (16, true),
        Dtype::Int32 => (32, true),
        Dtype::Int64 => (64, true),
        _ => return None,
    })
}

/// `value` converted to `dtype` as MLX converts integers: booleans are
/// non-zero, other widths wrap (two's complement).
fn wrap(dtype: Dtype, value: i128) -> Option<i128> {
    let (bits, signed) = width(dtype)?;
    if dtype == Dtype::Bool {
        return Some((value != 0) as i128);
    }
    let modulus = 1i128 << bits;
    let v = value.rem_euclid(modulus);
    Some(if signed && v >= modulus / 2 {
        v - modulus
    } else {
        v
    })
}

impl HostScalar {
    /// The value of `a` if it is one integer or boolean element (`a` is
    /// evaluated for it: call this for arrays that are, such as constants).
    pub fn read(a: &Array) -> Option<HostScalar> {
        if a.size() != 1 || a.ndim() != 0 {
            return None;
        }
        width(a.dtype())?;
        let value = match item::item(a).ok()? {
            Number::Bool(b) => b as i128,
            Number::Int(i) => i as i128,
            Number::UInt(u) => u as i128,
            _ => return None,
        };
        Some(HostScalar {
            dtype: a.dtype(),
            value,
        })
    }

    /// An evaluated MLX array holding this scalar.
    pub fn to_array(self) -> Result<Array> {
        let (bits, _) = width(self.dtype).unwrap_or((64, true));
        // (two's complement: the low bytes of the value)
        let bytes = (self.value as u64).to_le_bytes();
        let n = bits.div_ceil(8) as usize;
        host::array_from_bytes(&bytes[..n], &[], self.dtype)
    }

    /// Whether the scalar is non-zero.
    pub fn truthy(self) -> bool {
        self.value != 0
    }
}

/// `op` on `args`, computed here when it is exact integer or boolean
/// arithmetic on scalars of one type (a type conversion between such types
/// too), its result being of type `out` (MLX's); `None` otherwise.
pub fn apply(op: Op, args: &[HostScalar], out: Dtype) -> Option<HostScalar> {
    width(out)?;
    let value = match args {
        [a] => match op {
            Op::as_type => a.value,
            Op::logical_not => (a.value == 0) as i128,
            _ => return None,
        },
        [a, b] if a.dtype == b.dtype => {
            let (x, y) = (a.value, b.value);
            match op {
                Op::add => x + y,
                Op::subtract => x - y,
                Op::multiply => x.checked_mul(y)?,
                Op::min => x.min(y),
                Op::max => x.max(y),
                Op::equal => (x == y) as i128,
                Op::not_equal => (x != y) as i128,
                Op::less => (x < y) as i128,
                Op::less_equal => (x <= y) as i128,
                Op::greater => (x > y) as i128,
                Op::greater_equal => (x >= y) as i128,
                Op::logical_and => (x != 0 && y != 0) as i128,
                Op::logical_or => (x != 0 || y != 0) as i128,
                Op::bitwise_and => x & y,
                Op::bitwise_or => x | y,
                Op::bitwise_xor => x ^ y,
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(HostScalar {
        dtype: out,
        value: wrap(out, value)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::ops::params::Param;
    use crate::worker::run_blocking;

    fn s(dtype: Dtype, value: i128) -> HostScalar {
        HostScalar { dtype, value }
    }

    #[test]
    fn integers_wrap_as_mlx_wraps_them() {
        assert_eq!(wrap(Dtype::Int8, 130), Some(-126));
        assert_eq!(wrap(Dtype::Uint8, -1), Some(255));
        assert_eq!(wrap(Dtype::Int32, 1 << 31), Some(-(1 << 31)));
        assert_eq!(wrap(Dtype::Bool, 7), Some(1));
        assert_eq!(wrap(Dtype::Float32, 1), None);
    }

    #[test]
    fn host_results_match_mlx() {
        // every op this module computes, on values near the types' limits,
        // against MLX computing the same op
        let cases: Vec<(Dtype, i128, i128)> = vec![
            (Dtype::Int32, i32::MAX as i128, 1),
            (Dtype::Int32, -7, 3),
            (Dtype::Uint8, 250, 9),
            (Dtype::Uint32, 0, 1),
            (Dtype::Int64, i64::MIN as i128, -1),
            (Dtype::Int16, -300, 300),
            (Dtype::Bool, 1, 0),
        ];
        let binary = [
            Op::add,
            Op::subtract,
            Op::multiply,
            Op::min,
            Op::max,
            Op::equal,
            Op::not_equal,
            Op::less,
            Op::less_equal,
            Op::greater,
            Op::greater_equal,
            Op::logical_and,
            Op::logical_or,
            Op::bitwise_and,
            Op::bitwise_or,
            Op::bitwise_xor,
        ];
        run_blocking(Device::Cpu, move || {
            for &(dtype, x, y) in &cases {
                let (a, b) = (s(dtype, x), s(dtype, y));
                let (xa, ya) = (a.to_array()?, b.to_array()?);
                assert_eq!(HostScalar::read(&xa), Some(a));
                for op in binary {
                    let Ok(mlx) = op.apply(&[xa.clone(), ya.clone()], vec![]) else {
                        continue;
                    };
                    let mlx = mlx.into_vec().remove(0);
                    let expected = HostScalar::read(&mlx);
                    let got = apply(op, &[a, b], mlx.dtype());
                    if let Some(got) = got {
                        assert_eq!(Some(got), expected, "{op:?} {dtype:?} {x} {y}");
                    }
                }
                for to in [Dtype::Int8, Dtype::Uint16, Dtype::Int64, Dtype::Bool] {
                    let mlx =
                        Op::as_type.apply(std::slice::from_ref(&xa), vec![Param::Type(to)])?;
                    let expected = HostScalar::read(&mlx.into_vec()[0]);
                    assert_eq!(
                        apply(Op::as_type, &[a], to),
                        expected,
                        "{dtype:?} {x} -> {to:?}"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn other_types_and_mixed_types_stay_with_mlx() {
        let a = s(Dtype::Int32, 1);
        let b = s(Dtype::Int64, 1);
        assert_eq!(apply(Op::add, &[a, b], Dtype::Int64), None);
        assert_eq!(apply(Op::add, &[a, a], Dtype::Float32), None);
        assert_eq!(apply(Op::quotient, &[a, a], Dtype::Int32), None);
    }
}
