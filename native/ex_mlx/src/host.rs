//! Moving data between Elixir binaries and MLX arrays.

use mlx_rs::{Array, Dtype};
use rustler::env::OwnedEnv;
use rustler::{Atom, Binary, Encoder, Env, NifResult, Resource, ResourceArc, Term};

use crate::device::Device;
use crate::dtype;
use crate::error::{Error, Result};
use crate::nif::{submit_reply, ok_or_error};
use crate::tensor::{NewTensor, TensorRef};

/// Reads a shape argument (a list or tuple of non-negative integers).
pub fn decode_shape(name: &'static str, term: Term) -> Result<Vec<i32>> {
    let dims: Vec<Term> = if let Ok(list) = term.decode::<Vec<Term>>() {
        list
    } else if let Ok(tuple) = rustler::types::tuple::get_tuple(term) {
        tuple
    } else {
        return Err(Error::arg(
            name,
            format!("expected a tuple of dimensions, got: {term:?}"),
        ));
    };
    dims.iter()
        .enumerate()
        .map(|(axis, d)| match d.decode::<i64>() {
            Ok(n) if (0..=i32::MAX as i64).contains(&n) => Ok(n as i32),
            Ok(n) => Err(Error::arg(
                name,
                format!("dimension {axis} is {n}; dimensions must be in 0..={}", i32::MAX),
            )),
            Err(_) => Err(Error::arg(
                name,
                format!("dimension {axis} is not an integer: {d:?}"),
            )),
        })
        .collect()
}

/// Number of elements of `shape`, or an error if it overflows.
pub fn element_count(name: &'static str, shape: &[i32]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d as usize)
            .ok_or_else(|| Error::arg(name, format!("{} has too many elements", dtype::display_shape(shape))))
    })
}

/// `from_binary(tag, binary, type, shape, device)`: a new tensor holding a copy
/// of `binary`, read as little-endian elements of `type`.
#[rustler::nif]
fn from_binary<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    data: Term<'a>,
    type_: Term<'a>,
    shape: Term<'a>,
    device: Term<'a>,
) -> NifResult<Atom> {
    ok_or_error((|| {
        let binary: Binary = data
            .decode()
            .map_err(|_| Error::arg("data", "expected a binary"))?;
        let dtype = dtype::decode("type", type_)?;
        let shape = decode_shape("shape", shape)?;
        let device = Device::decode("device", device)?;
        let count = element_count("shape", &shape)?;
        let expected = count
            .checked_mul(dtype::size_of(dtype))
            .ok_or_else(|| Error::arg("shape", "byte size overflows"))?;
        if binary.len() != expected {
            return Err(Error::arg(
                "data",
                format!(
                    "binary has {} bytes, but shape {} of {} needs {expected}",
                    binary.len(),
                    dtype::display_shape(&shape),
                    dtype::display(dtype)
                ),
            ));
        }
        if dtype == Dtype::Bool {
            if let Some(at) = binary.as_slice().iter().position(|&b| b > 1) {
                return Err(Error::arg(
                    "data",
                    format!("byte {at} is {}; :bool elements must be 0 or 1", binary[at]),
                ));
            }
        }
        // The copy into MLX runs on the worker, not on this scheduler; the
        // binary is kept alive by an environment of its own until then.
        let keep = OwnedEnv::new();
        let saved = keep.save(data);
        submit_reply(env, tag, device, move || {
            keep.run(|env| {
                let binary: Binary = saved
                    .load(env)
                    .decode()
                    .map_err(|_| Error::Internal("saved binary vanished".into()))?;
                Ok(NewTensor::new(array_from_bytes(binary.as_slice(), &shape, dtype), device))
            })
        })
    })())
}

/// An array holding a copy of `bytes` (whose length the caller checked).
fn array_from_bytes(bytes: &[u8], shape: &[i32], dtype: Dtype) -> Array {
    if bytes.is_empty() {
        // mlx_array_new_data wants a valid pointer even for zero elements.
        let one = [0u8; 16];
        // SAFETY: `one` is 16 readable bytes, more than any one element; MLX
        // reads nothing for a shape with zero elements and copies what it reads.
        return unsafe { Array::from_raw_data(one.as_ptr().cast(), shape, dtype) };
    }
    // SAFETY: `bytes` holds exactly product(shape) elements of `dtype` (checked
    // by the caller); MLX copies them into its own buffer before returning, and
    // unaligned input is fine because it copies byte-wise (memcpy).
    unsafe { Array::from_raw_data(bytes.as_ptr().cast(), shape, dtype) }
}

/// An evaluated, row-contiguous array whose bytes an Elixir binary can point at
/// without a copy.
pub struct HostBuffer {
    array: Array,
    len: usize,
}

// SAFETY: a HostBuffer's array is evaluated and row-contiguous before the
// buffer is built, and nothing mutates it afterwards: the only access is
// reading its data pointer. Reading immutable MLX memory from any thread is
// sound, and dropping the handle only decrements an atomic reference count.
unsafe impl Sync for HostBuffer {}

#[rustler::resource_impl]
impl Resource for HostBuffer {}

impl HostBuffer {
    /// Evaluates `array`, copying it into a fresh row-major buffer if it is a
    /// view (slice with offset, transpose, broadcast).
    pub fn new(array: &Array) -> Result<HostBuffer> {
        let array = array.contiguous()?;
        array.eval()?;
        let len = array.size() * dtype::size_of(array.dtype());
        let buffer = HostBuffer { array, len };
        // Check the layout now, so `bytes` never fails later.
        buffer.checked_bytes()?;
        Ok(buffer)
    }

    fn checked_bytes(&self) -> Result<&[u8]> {
        if self.len == 0 {
            return Ok(&[]);
        }
        macro_rules! bytes_of {
            ($t:ty) => {{
                let typed: &[$t] = self.array.try_as_slice::<$t>()?;
                // SAFETY: `typed` is a live slice of plain-old-data elements; we
                // view the same memory as bytes for the same lifetime.
                unsafe {
                    std::slice::from_raw_parts(
                        typed.as_ptr().cast::<u8>(),
                        std::mem::size_of_val(typed),
                    )
                }
            }};
        }
        let bytes: &[u8] = match self.array.dtype() {
            Dtype::Bool => bytes_of!(bool),
            Dtype::Uint8 => bytes_of!(u8),
            Dtype::Uint16 => bytes_of!(u16),
            Dtype::Uint32 => bytes_of!(u32),
            Dtype::Uint64 => bytes_of!(u64),
            Dtype::Int8 => bytes_of!(i8),
            Dtype::Int16 => bytes_of!(i16),
            Dtype::Int32 => bytes_of!(i32),
            Dtype::Int64 => bytes_of!(i64),
            Dtype::Float16 => bytes_of!(half::f16),
            Dtype::Bfloat16 => bytes_of!(half::bf16),
            Dtype::Float32 => bytes_of!(f32),
            Dtype::Float64 => bytes_of!(f64),
            Dtype::Complex64 => bytes_of!(mlx_rs::complex64),
        };
        if bytes.len() != self.len {
            return Err(Error::Internal(format!(
                "array data has {} bytes, expected {}",
                bytes.len(),
                self.len
            )));
        }
        Ok(bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        self.checked_bytes().unwrap_or(&[])
    }
}

/// A binary pointing into a [`HostBuffer`] (no copy).
pub struct HostBinary(pub ResourceArc<HostBuffer>);

impl Encoder for HostBinary {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        self.0.make_binary(env, |buffer| buffer.bytes()).encode(env)
    }
}

/// `to_binary(tag, tensor)`: the tensor's elements, row-major, little-endian.
#[rustler::nif]
fn to_binary<'a>(env: Env<'a>, tag: Term<'a>, tensor: TensorRef) -> NifResult<Atom> {
    ok_or_error(submit_reply(env, tag, tensor.device, move || {
        let buffer = HostBuffer::new(&tensor.array())?;
        Ok(HostBinary(ResourceArc::new(buffer)))
    }))
}
