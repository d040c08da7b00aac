//! Binaries in and out of tensors.

use std::sync::atomic::{AtomicUsize, Ordering};

use ex_mlx_core::device::Device;
use ex_mlx_core::error::{Error, Result};
use ex_mlx_core::host::{self, HostBuffer};
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{Binary, Encoder, Env, NifResult, Resource, ResourceArc, Term};

use crate::args::{Data, DeviceArg, ShapeArg, Tag, Tensor, TypeArg};
use crate::reply::{done_at_once, submit, submit_read, AsyncResult};
use crate::tensor::{NewTensor, TensorRef};
use crate::term::error_tuple;

/// `from_binary(tag, binary, type, shape, device)`: a new tensor holding a copy
/// of `binary`, read as little-endian elements of `type`.
#[rustler::nif]
fn from_binary<'a>(
    env: Env<'a>,
    tag: Tag<'a>,
    data: Data<'a>,
    type_: TypeArg,
    shape: ShapeArg,
    device: DeviceArg,
) -> AsyncResult {
    let (dtype, shape, device) = (type_.0, shape.0, device.0);
    ex_mlx_core::device::check_dtype(dtype, device).map_err(error_tuple)?;
    host::check_bytes(data.as_slice(), &shape, dtype).map_err(error_tuple)?;
    // The copy into MLX runs on the worker, not on this scheduler; the
    // binary counts as waiting until the job has read it (or is dropped
    // unrun).
    let waiting = WaitingBytes::add(data.len());
    let saved = SavedBinary::new(env, &data.0);
    submit(env, tag, device, move || {
        let made = saved.read(|bytes| {
            let array = host::array_from_bytes(bytes, &shape, dtype)?;
            Ok(NewTensor::from_host(array, device))
        });
        drop(waiting);
        made
    })
}

/// Bytes of binaries given to `from_binary` that no worker has copied yet
/// (each kept alive until then): `ExMLX.Op.from_binary_deferred/5` waits
/// for its tensor when they pass its bound, so that a caller making many
/// tensors (loading a model's parameters) never holds more than that in
/// binaries waiting for a worker.
static WAITING_BYTES: AtomicUsize = AtomicUsize::new(0);

/// One binary's share of [`WAITING_BYTES`], given back when dropped.
struct WaitingBytes(usize);

impl WaitingBytes {
    fn add(bytes: usize) -> Self {
        WAITING_BYTES.fetch_add(bytes, Ordering::Relaxed);
        WaitingBytes(bytes)
    }
}

impl Drop for WaitingBytes {
    fn drop(&mut self) {
        WAITING_BYTES.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// `from_binary_waiting_bytes()`: bytes of binaries given to `from_binary`
/// that no worker has copied yet, on every device.
#[rustler::nif]
fn from_binary_waiting_bytes() -> usize {
    WAITING_BYTES.load(Ordering::Relaxed)
}

/// A binary kept alive, in an environment of its own, until a worker reads
/// it (the caller's environment ends when its NIF returns).
pub struct SavedBinary {
    env: OwnedEnv,
    term: SavedTerm,
}

impl SavedBinary {
    pub fn new(env: Env, binary: &Binary) -> Self {
        let owned = OwnedEnv::new();
        let term = owned.save(binary.to_term(env));
        SavedBinary { env: owned, term }
    }

    /// `read(bytes)` on the binary's bytes.
    pub fn read<T>(self, read: impl FnOnce(&[u8]) -> Result<T>) -> Result<T> {
        let SavedBinary { env, term } = self;
        env.run(|env| {
            let binary: Binary = term
                .load(env)
                .decode()
                .map_err(|_| Error::Internal("the saved binary vanished".into()))?;
            read(binary.as_slice())
        })
    }
}

crate::at_once_and_dirty! {
    /// `from_binary_at_once(binary, type, shape)`: a new CPU tensor holding a
    /// copy of `binary`, made on the calling thread: `{:ok, tensor}` or
    /// `{:error, reason}`. Up to [`AT_ONCE_MAX`] bytes on the normal
    /// scheduler; `from_binary_at_once_dirty` takes any size.
    ///
    /// No worker is needed: making an array from host bytes runs no MLX
    /// stream. MLX allocates a buffer (its allocator takes a lock, so any
    /// thread may) and copies the bytes; the array is born evaluated, with no
    /// graph node, so nothing ever evaluates it on this thread, and the CPU
    /// worker may use it like any other array afterwards. (Only the CPU
    /// device: the worker path stays for `:gpu`.)
    from_binary_at_once / from_binary_at_once_dirty(data: Data<'a>, type_: TypeArg, shape: ShapeArg)
        limit AT_ONCE_MAX => from_binary_on_caller
}

/// The most bytes a NIF copies on a normal scheduler (`from_binary_at_once`,
/// `wire_encode`, `wire_decode_at_once`): a few microseconds of copying. Where
/// larger copies run is chosen by `ExMLX.Call.copy_path/2` (whose `at_once_max`
/// equals this).
pub const AT_ONCE_MAX: usize = 64 * 1024;

fn from_binary_on_caller<'a>(
    env: Env<'a>,
    binary: Data<'a>,
    type_: TypeArg,
    shape: ShapeArg,
    max_bytes: usize,
) -> NifResult<Term<'a>> {
    let (dtype, shape) = (type_.0, shape.0);
    let made = (|| -> Result<NewTensor> {
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

impl HostBinary {
    fn new(buffer: HostBuffer) -> Self {
        HostBinary(ResourceArc::new(HostBufferResource(buffer)))
    }
}

impl Encoder for HostBinary {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        self.0
            .make_binary(env, |buffer| buffer.0.bytes())
            .encode(env)
    }
}

/// `to_binary(tag, tensor)`: the tensor's elements, row-major, little-endian.
#[rustler::nif]
fn to_binary<'a>(env: Env<'a>, tag: Tag<'a>, tensor: Tensor) -> AsyncResult {
    let tensor = tensor.0;
    // An evaluated, row-contiguous CPU array is read in place here: no copy
    // and no MLX stream (see `HostBuffer::in_place`).
    if let Some(buffer) = evaluated_host_buffer(&tensor).map_err(error_tuple)? {
        if let Ok(done) = done_at_once(tag, HostBinary::new(buffer)) {
            return Ok(done);
        }
    }
    on_host_buffer(env, tag, tensor, |tensor, buffer| {
        tensor.mark_evaluated();
        Ok(HostBinary::new(buffer))
    })
}

/// `data_pointer(tag, t)`: `{address, byte_size}` of the tensor's data in
/// host memory. The tensor is evaluated and, if it was a view, replaced by a
/// contiguous copy, so the address stays valid for as long as the tensor
/// lives (and is not deallocated).
#[rustler::nif]
fn data_pointer<'a>(env: Env<'a>, tag: Tag<'a>, tensor: Tensor) -> AsyncResult {
    on_host_buffer(env, tag, tensor.0, |tensor, buffer| {
        let bytes = buffer.bytes();
        let address = bytes.as_ptr() as u64;
        let len = bytes.len() as u64;
        // the tensor now holds the evaluated, contiguous array whose bytes
        // these are, so the address lives as long as the tensor
        tensor.replace_evaluated(buffer.array().clone())?;
        Ok((address, len))
    })
}

/// Runs `read(tensor, buffer)` on the worker, `buffer` being the tensor's
/// evaluated, contiguous data ([`HostBuffer::new`]).
fn on_host_buffer<'a, T, F>(env: Env<'a>, tag: Tag<'a>, tensor: TensorRef, read: F) -> AsyncResult
where
    T: Encoder + Send + 'static,
    F: FnOnce(&TensorRef, HostBuffer) -> Result<T> + Send + 'static,
{
    submit_read(env, tag, tensor, |tensor| {
        let buffer = HostBuffer::new(&tensor.array()?)?;
        read(tensor, buffer)
    })
}
