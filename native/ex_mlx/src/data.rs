//! Binaries in and out of tensors.

use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::host::{self, HostBuffer};
use rustler::env::OwnedEnv;
use rustler::{Binary, Encoder, Env, NifResult, Resource, ResourceArc, Term};

use crate::reply::{done_here, queued, submit};
use crate::tensor::{NewTensor, TensorRef};
use ex_mlx_core::device::Device;

use crate::term::{
    decode_binary, decode_device, decode_shape, decode_tensor, decode_type, error_tuple,
};

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
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let binary = decode_binary("data", data)?;
        let dtype = decode_type("type", type_)?;
        let shape = decode_shape("shape", shape)?;
        let device = decode_device("device", device)?;
        ex_mlx_core::device::check_dtype(dtype, device)?;
        host::check_bytes(binary.as_slice(), &shape, dtype)?;
        // The copy into MLX runs on the worker, not on this scheduler; the
        // binary stays alive in an environment of its own until then.
        let keep = OwnedEnv::new();
        let saved = keep.save(data);
        submit(env, tag, device, move || {
            keep.run(|env| {
                let binary: Binary = saved
                    .load(env)
                    .decode()
                    .map_err(|_| Error::Internal("the saved binary vanished".into()))?;
                let array = host::array_from_bytes(binary.as_slice(), &shape, dtype)?;
                Ok(NewTensor::from_host(array, device))
            })
        })
    })())
}

/// `from_binary_here(binary, type, shape)`: a new CPU tensor holding a copy of
/// `binary`, made on the calling thread: `{:ok, tensor}` or `{:error, reason}`.
///
/// No worker is needed: making an array from host bytes runs no MLX stream.
/// MLX allocates a buffer (its allocator takes a lock, so any thread may) and
/// copies the bytes; the array is born evaluated, with no graph node, so
/// nothing ever evaluates it on this thread, and the CPU worker may use it
/// like any other array afterwards. (Only the CPU device: the worker path
/// stays for `:gpu`.) Up to [`HERE_NORMAL_MAX`] bytes, on the normal
/// scheduler; large ones through `from_binary_here_dirty`.
#[rustler::nif]
fn from_binary_here<'a>(
    env: Env<'a>,
    data: Term<'a>,
    type_: Term<'a>,
    shape: Term<'a>,
) -> NifResult<Term<'a>> {
    from_binary_on_caller(env, data, type_, shape, HERE_NORMAL_MAX)
}

/// `from_binary_here_dirty(binary, type, shape)`: `from_binary_here` on a
/// dirty CPU scheduler, for binaries of any size.
#[rustler::nif(schedule = "DirtyCpu")]
fn from_binary_here_dirty<'a>(
    env: Env<'a>,
    data: Term<'a>,
    type_: Term<'a>,
    shape: Term<'a>,
) -> NifResult<Term<'a>> {
    from_binary_on_caller(env, data, type_, shape, usize::MAX)
}

/// The most bytes a NIF copies on a normal scheduler (`from_binary_here`,
/// `wire_encode`, `wire_decode_here`): a few microseconds of copying. Where
/// larger copies run is chosen by `ExMLX.Call.copy_path/2` (whose `here_max`
/// equals this).
pub const HERE_NORMAL_MAX: usize = 64 * 1024;

fn from_binary_on_caller<'a>(
    env: Env<'a>,
    data: Term<'a>,
    type_: Term<'a>,
    shape: Term<'a>,
    max_bytes: usize,
) -> NifResult<Term<'a>> {
    let made = (|| -> Result<NewTensor> {
        let binary = decode_binary("data", data)?;
        let dtype = decode_type("type", type_)?;
        let shape = decode_shape("shape", shape)?;
        if binary.len() > max_bytes {
            return Err(Error::arg(
                "data",
                format!(
                    "{} bytes is more than this NIF copies on a normal scheduler ({max_bytes})",
                    binary.len()
                ),
            ));
        }
        ex_mlx_core::device::check_dtype(dtype, Device::Cpu)?;
        let array = host::array_from_bytes(binary.as_slice(), &shape, dtype)?;
        Ok(NewTensor::from_host(array, Device::Cpu))
    })();
    match made {
        Ok(tensor) => Ok((rustler::types::atom::ok(), tensor).encode(env)),
        Err(e) => Err(error_tuple(e)),
    }
}

/// The bytes of `tensor` readable on the calling thread: its array is on the
/// CPU, known to be evaluated, and row-contiguous. `None` otherwise (then
/// the worker evaluates it, or makes a contiguous copy).
pub fn evaluated_host_buffer(tensor: &TensorRef) -> Result<Option<HostBuffer>> {
    if tensor.device != Device::Cpu {
        return Ok(None);
    }
    match tensor.evaluated_array() {
        Some(array) => HostBuffer::in_place(&array),
        None => Ok(None),
    }
}

/// Keeps a [`HostBuffer`] alive for as long as a binary points into it.
struct HostBufferResource(HostBuffer);

#[rustler::resource_impl]
impl Resource for HostBufferResource {}

/// A binary pointing into a [`HostBuffer`] (no copy).
struct HostBinary(ResourceArc<HostBufferResource>);

impl Encoder for HostBinary {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        self.0
            .make_binary(env, |buffer| buffer.0.bytes())
            .encode(env)
    }
}

/// `to_binary(tag, tensor)`: the tensor's elements, row-major, little-endian.
#[rustler::nif]
fn to_binary<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    tensor: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let tensor: TensorRef = decode_tensor("tensor", tensor)?;
        // An evaluated, row-contiguous CPU array is read in place here: no
        // copy and no MLX stream (see `HostBuffer::in_place`).
        if let Some(buffer) = evaluated_host_buffer(&tensor)? {
            let binary = HostBinary(ResourceArc::new(HostBufferResource(buffer)));
            if let Ok(done) = done_here(tag, binary) {
                return Ok(done);
            }
        }
        submit(env, tag, tensor.device, move || {
            let array = tensor.array()?;
            let buffer = HostBuffer::new(&array)?;
            tensor.mark_evaluated();
            Ok(HostBinary(ResourceArc::new(HostBufferResource(buffer))))
        })
    })())
}

/// `data_pointer(tag, t)`: `{address, byte_size}` of the tensor's data in
/// host memory. The tensor is evaluated and, if it was a view, replaced by a
/// contiguous copy, so the address stays valid for as long as the tensor
/// lives (and is not deallocated).
#[rustler::nif]
fn data_pointer<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    tensor: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| -> Result<crate::reply::Submitted> {
        let tensor: TensorRef = decode_tensor("tensor", tensor)?;
        submit(env, tag, tensor.device, move || {
            // HostBuffer evaluates and makes contiguous; the tensor then holds
            // that array, so the address lives as long as the tensor.
            let buffer = HostBuffer::new(&tensor.array()?)?;
            let bytes = buffer.bytes();
            let address = bytes.as_ptr() as u64;
            let len = bytes.len() as u64;
            tensor.replace_evaluated(buffer.array().clone())?;
            Ok((address, len))
        })
    })())
}
