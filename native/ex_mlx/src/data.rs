//! Binaries in and out of tensors.

use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::host::{self, HostBuffer};
use rustler::env::OwnedEnv;
use rustler::{Binary, Encoder, Env, NifResult, Resource, ResourceArc, Term};

use crate::reply::{queued, submit};
use crate::tensor::{NewTensor, TensorRef};
use crate::term::{decode_binary, decode_device, decode_shape, decode_tensor, decode_type};

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
                NewTensor::new(array, device)
            })
        })
    })())
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
        submit(env, tag, tensor.device, move || {
            let buffer = HostBuffer::new(&tensor.array()?)?;
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
            tensor.replace(buffer.array().clone())?;
            Ok((address, len))
        })
    })())
}
