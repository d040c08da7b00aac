//! Wire-format NIFs (docs/wire-format.md): frames of computed CPU tensors
//! encode and decode on the calling thread (a normal scheduler for small
//! frames, a dirty one for large ones), others on the tensor's worker;
//! bundle headers are parsed here.

use std::sync::Mutex;

use ex_mlx_core::device::Device;
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::host::{self, HostBuffer};
use ex_mlx_core::wire;
use rustler::{Binary, Encoder, Env, NifResult, OwnedBinary, Term};

use crate::args::{names, Bytes, DeviceArg, Frame, Tag, Tensor};
use crate::data::{evaluated_host_buffer, SavedBinary, AT_ONCE_MAX};
use crate::reply::{done_at_once, submit, AsyncResult};
use crate::tensor::NewTensor;
use crate::term::{decode_int_in, decode_shape, decode_type, error_tuple, show, TypeTerm};

/// A binary built on a worker, handed to the reply exactly once.
struct BinaryReply(Mutex<Option<OwnedBinary>>);

impl Encoder for BinaryReply {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let taken = self.0.lock().ok().and_then(|mut slot| slot.take());
        match taken {
            Some(owned) => Binary::from_owned(owned, env).encode(env),
            None => "".encode(env),
        }
    }
}

/// The frame of an evaluated, row-contiguous buffer.
fn encode_frame(buffer: &HostBuffer) -> BinaryReply {
    let data = buffer.bytes();
    let shape = buffer.shape().to_vec();
    let len = wire::header_len(shape.len()) + data.len();
    let mut owned = OwnedBinary::new(len);
    wire::write_frame(owned.as_mut_slice(), buffer.dtype(), &shape, data);
    BinaryReply(Mutex::new(Some(owned)))
}

/// The most data bytes `wire_encode` encodes on the normal scheduler. More
/// than [`AT_ONCE_MAX`]: encoding allocates no MLX buffer (the frame is
/// a BEAM binary), so it has none of the cost of fresh pages that makes
/// larger MLX allocations quicker on the worker, and a one-pass copy and
/// checksum of 1 MB stays far below a millisecond
/// (docs/decisions/0008-where-copies-run.md).
const ENCODE_AT_ONCE_MAX: usize = 1 << 20;

/// `wire_encode(tag, t)`: the tensor as one frame. An evaluated CPU tensor of
/// at most [`ENCODE_AT_ONCE_MAX`] bytes is encoded here, on the calling thread
/// (no MLX stream is needed to read computed data); others on the worker.
#[rustler::nif]
fn wire_encode<'a>(env: Env<'a>, tag: Tag<'a>, t: Tensor) -> AsyncResult {
    let t = t.0;
    if let Some(buffer) = evaluated_host_buffer(&t).map_err(error_tuple)? {
        if buffer.bytes().len() <= ENCODE_AT_ONCE_MAX {
            if let Ok(done) = done_at_once(tag, encode_frame(&buffer)) {
                return Ok(done);
            }
        }
    }
    let device = t.device;
    submit(env, tag, device, move || {
        let array = t.array()?;
        let buffer = HostBuffer::new(&array)?;
        t.mark_evaluated();
        Ok(encode_frame(&buffer))
    })
}

/// `wire_encode_dirty(t)`: `{:ok, frame}` for an evaluated CPU tensor,
/// encoded on a dirty scheduler; `:not_evaluated` when the worker must do it
/// (`wire_encode/2`).
#[rustler::nif(schedule = "DirtyCpu")]
fn wire_encode_dirty(env: Env, t: Tensor) -> NifResult<Term> {
    match evaluated_host_buffer(&t.0).map_err(error_tuple)? {
        Some(buffer) => Ok((rustler::types::atom::ok(), encode_frame(&buffer)).encode(env)),
        None => Ok(not_evaluated().encode(env)),
    }
}

rustler::atoms! { not_evaluated }

/// A CPU tensor from a frame, made on the calling thread (see
/// `crate::data::from_binary_at_once` for why no worker is needed).
fn decode_at_once<'a>(env: Env<'a>, binary: Frame<'a>, max_data: usize) -> NifResult<Term<'a>> {
    // (the largest header is that of rank 32)
    if binary.len() > max_data.saturating_add(wire::header_len(32)) {
        return Err(error_tuple(Error::arg(
            "frame",
            format!(
                "{} bytes is more than this NIF decodes on a normal scheduler",
                binary.len()
            ),
        )));
    }
    let tensor = tensor_from_frame(binary.as_slice(), Device::Cpu).map_err(error_tuple)?;
    Ok((rustler::types::atom::ok(), tensor).encode(env))
}

/// A tensor on `device` from a frame's bytes, checked as the wire format
/// says (docs/wire-format.md); the checksum runs on a second thread beside
/// the copy for large frames (`wire::decode_frame_with`).
fn tensor_from_frame(bytes: &[u8], device: Device) -> Result<NewTensor> {
    let array = wire::decode_frame_with(bytes, |frame| {
        ex_mlx_core::device::check_dtype(frame.dtype, device)?;
        host::array_from_bytes(frame.data, &frame.shape, frame.dtype)
    })?;
    Ok(NewTensor::from_host(array, device))
}

crate::at_once_and_dirty! {
    /// `wire_decode_at_once(frame)`: `{:ok, tensor}` on the CPU, decoded on the
    /// calling thread; frames of at most [`AT_ONCE_MAX`] data bytes on
    /// the normal scheduler, any size on a dirty one (`wire_decode_at_once_dirty`).
    wire_decode_at_once / wire_decode_at_once_dirty(frame: Frame<'a>)
        limit AT_ONCE_MAX => decode_at_once
}

/// `wire_decode(tag, frame, device)`: a tensor from one frame, made on the
/// device's worker.
#[rustler::nif]
fn wire_decode<'a>(env: Env<'a>, tag: Tag<'a>, frame: Frame<'a>, to: DeviceArg) -> AsyncResult {
    let device = to.0;
    let saved = SavedBinary::new(env, &frame.0);
    submit(env, tag, device, move || {
        saved.read(|bytes| tensor_from_frame(bytes, device))
    })
}

/// `bundle_header(tensors, metadata)`: the 8-byte length and JSON header for
/// `[{name, type, shape}]` laid out in order; returns `{header, [{begin, end}]}`.
#[rustler::nif]
fn bundle_header<'a>(env: Env<'a>, tensors: Term<'a>, metadata: Term<'a>) -> NifResult<Term<'a>> {
    let items: Vec<(String, Term, Term)> = tensors.decode().map_err(|_| {
        error_tuple(Error::arg(
            "tensors",
            format!(
                "expected a list of {{name, type, shape}}, got: {}",
                show(tensors)
            ),
        ))
    })?;
    let mut specs = Vec::with_capacity(items.len());
    for (name, type_, shape) in items {
        let dtype = decode_type("type", type_).map_err(error_tuple)?;
        let shape = decode_shape("shape", shape).map_err(error_tuple)?;
        specs.push((name, dtype, shape));
    }
    let metadata: Vec<(String, String)> = metadata.decode().map_err(|_| {
        error_tuple(Error::arg(
            "metadata",
            format!(
                "expected a list of {{string, string}}, got: {}",
                show(metadata)
            ),
        ))
    })?;
    let (header, offsets) = wire::build_bundle_header(&specs, &metadata);
    let mut owned = OwnedBinary::new(header.len());
    owned.as_mut_slice().copy_from_slice(&header);
    Ok((Binary::from_owned(owned, env), offsets).encode(env))
}

/// `bundle_header_length(first_8_bytes, total_size)`: the JSON header's length.
#[rustler::nif]
fn bundle_header_length(prefix: Bytes<names::Prefix>, total: Term) -> NifResult<u64> {
    let total = decode_int_in("total", total, 0..=u64::MAX).map_err(error_tuple)?;
    wire::bundle_header_len(prefix.as_slice(), total).map_err(|e| error_tuple(e.into()))
}

/// `bundle_parse_header(json, data_len)`: `{[{name, type, shape, begin, end}], [{key, value}]}`.
/// A header can be up to 100 MB of JSON: parsed off the normal schedulers.
#[rustler::nif(schedule = "DirtyCpu")]
fn bundle_parse_header<'a>(
    env: Env<'a>,
    json: Bytes<'a, names::Json>,
    data_len: Term<'a>,
) -> NifResult<Term<'a>> {
    let data_len = decode_int_in("data_len", data_len, 0..=u64::MAX).map_err(error_tuple)?;
    let header =
        wire::parse_bundle_header(json.as_slice(), data_len).map_err(|e| error_tuple(e.into()))?;
    let entries: Vec<Term> = header
        .entries
        .iter()
        .map(|e| {
            let shape: Vec<i64> = e.shape.iter().map(|&d| d as i64).collect();
            (
                e.name.as_str(),
                TypeTerm(e.dtype),
                crate::term::shape_term(env, &shape),
                e.begin,
                e.end,
            )
                .encode(env)
        })
        .collect();
    Ok((entries, header.metadata).encode(env))
}
