//! Reading one element as a number, exactly.
//!
//! MLX can hand back a rank-0 array that is still a view into a larger buffer
//! (slice, then squeeze). Reading it with the wrong element size once returned
//! 4,088,808,866,743 instead of 951 in a public bug report. Here the array is
//! evaluated and made contiguous ([`HostBuffer`]) and the element is read with
//! the array's own dtype, then converted.

use half::{bf16, f16};
use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};
use crate::host::HostBuffer;

/// One element, in the widest Rust type of its kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Complex(f64, f64),
}

/// The only element of `a` (which must have exactly one).
pub fn item(a: &Array) -> Result<Number> {
    if a.size() != 1 {
        return Err(Error::arg(
            "tensor",
            format!(
                "item needs exactly one element, the tensor has {}",
                a.size()
            ),
        ));
    }
    let buffer = HostBuffer::new(a)?;
    read(buffer.bytes(), buffer.dtype())
}

/// The elements of `a`, an integer or boolean array, as `i128` (`a` is
/// evaluated for it: call this for arrays that are, or small ones); `None`
/// for other types.
pub fn integers(a: &Array) -> Option<Vec<i128>> {
    let buffer = HostBuffer::new(a).ok()?;
    let n = crate::dtype::size_of(a.dtype());
    buffer
        .bytes()
        .chunks_exact(n)
        .map(|b| match read(b, a.dtype()).ok()? {
            Number::Bool(b) => Some(b as i128),
            Number::Int(i) => Some(i as i128),
            Number::UInt(u) => Some(u as i128),
            _ => None,
        })
        .collect()
}

/// Decodes one little-endian element of `dtype` from `bytes`.
pub fn read(bytes: &[u8], dtype: Dtype) -> Result<Number> {
    fn take<const N: usize>(bytes: &[u8]) -> Result<[u8; N]> {
        bytes
            .get(..N)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::Internal(format!("element needs {N} bytes, got {}", bytes.len())))
    }
    Ok(match dtype {
        Dtype::Bool => Number::Bool(take::<1>(bytes)?[0] != 0),
        Dtype::Uint8 => Number::UInt(take::<1>(bytes)?[0] as u64),
        Dtype::Uint16 => Number::UInt(u16::from_le_bytes(take(bytes)?) as u64),
        Dtype::Uint32 => Number::UInt(u32::from_le_bytes(take(bytes)?) as u64),
        Dtype::Uint64 => Number::UInt(u64::from_le_bytes(take(bytes)?)),
        Dtype::Int8 => Number::Int(take::<1>(bytes)?[0] as i8 as i64),
        Dtype::Int16 => Number::Int(i16::from_le_bytes(take(bytes)?) as i64),
        Dtype::Int32 => Number::Int(i32::from_le_bytes(take(bytes)?) as i64),
        Dtype::Int64 => Number::Int(i64::from_le_bytes(take(bytes)?)),
        Dtype::Float16 => Number::Float(f16::from_le_bytes(take(bytes)?).to_f64()),
        Dtype::Bfloat16 => Number::Float(bf16::from_le_bytes(take(bytes)?).to_f64()),
        Dtype::Float32 => Number::Float(f32::from_le_bytes(take(bytes)?) as f64),
        Dtype::Float64 => Number::Float(f64::from_le_bytes(take(bytes)?)),
        Dtype::Complex64 => {
            let b: [u8; 8] = take(bytes)?;
            let re = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let im = f32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            Number::Complex(re as f64, im as f64)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;
    use mlx_rs::ops;

    /// The reported case: a large arange, sliced at 951 and squeezed to rank 0.
    #[test]
    fn a_squeezed_slice_of_a_large_arange_reads_its_own_value() {
        let got = run_blocking(Device::Cpu, || {
            let a = ops::arange::<i32, i64>(0, 4096, None)?;
            let mut out = vec![];
            for i in [0, 951, 998, 4095] {
                let idx = Array::from_slice(&[i], &[1]);
                let v = a.take_axis(&idx, 0)?.squeeze()?;
                out.push(item(&v)?);
            }
            Ok(out)
        })
        .unwrap();
        assert_eq!(
            got,
            vec![
                Number::Int(0),
                Number::Int(951),
                Number::Int(998),
                Number::Int(4095)
            ]
        );
    }

    #[test]
    fn half_types_and_complex_decode() {
        assert_eq!(
            read(&[0x00, 0x3C], Dtype::Float16).unwrap(),
            Number::Float(1.0)
        );
        assert_eq!(
            read(&[0xC0, 0x3F], Dtype::Bfloat16).unwrap(),
            Number::Float(1.5)
        );
        let mut c = 1.0f32.to_le_bytes().to_vec();
        c.extend_from_slice(&(-2.0f32).to_le_bytes());
        assert_eq!(
            read(&c, Dtype::Complex64).unwrap(),
            Number::Complex(1.0, -2.0)
        );
        assert_eq!(read(&[0xFF], Dtype::Int8).unwrap(), Number::Int(-1));
        assert_eq!(read(&[0xFF], Dtype::Uint8).unwrap(), Number::UInt(255));
    }
}
