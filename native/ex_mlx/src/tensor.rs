//! The tensor resource: an MLX array, the device whose worker owns it, and its
//! shape and dtype (kept in Rust so queries need no trip to the worker).

use std::sync::Mutex;

use ex_mlx_core::device::Device;
use ex_mlx_core::dtype;
use ex_mlx_core::error::{Error, Result};
use mlx_rs::{Array, Dtype};
use rustler::{Encoder, Env, Resource, ResourceArc, Term};

use crate::term::{shape_term, DeviceTerm, TypeTerm};

pub struct Tensor {
    // `Array` is `Send` but not `Sync`; the mutex makes the resource shareable.
    // It is held only to clone the handle (a reference-count increment); MLX
    // work on the clone happens on the device's worker thread.
    // `None` once `deallocate` freed the data early.
    array: Mutex<Option<Array>>,
    pub device: Device,
    pub dtype: Dtype,
    pub shape: Vec<i64>,
}

#[rustler::resource_impl]
impl Resource for Tensor {}

pub type TensorRef = ResourceArc<Tensor>;

impl Tensor {
    pub fn wrap(array: Array, device: Device) -> TensorRef {
        let dtype = array.dtype();
        let shape = array.shape().iter().map(|&d| d as i64).collect();
        ResourceArc::new(Tensor {
            array: Mutex::new(Some(array)),
            device,
            dtype,
            shape,
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Array>> {
        self.array
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A handle to the array (shares its data and graph), or an error if the
    /// tensor was deallocated.
    pub fn array(&self) -> Result<Array> {
        self.slot().clone().ok_or_else(|| {
            Error::arg(
                "tensor",
                "the tensor was deallocated (Nx.backend_deallocate/1); it has no data any more",
            )
        })
    }

    /// Replaces the array by an equal one (e.g. its evaluated, contiguous
    /// copy), unless the tensor was deallocated meanwhile.
    pub fn replace(&self, array: Array) -> Result<()> {
        let mut slot = self.slot();
        match slot.as_mut() {
            Some(current) => {
                *current = array;
                Ok(())
            }
            None => Err(Error::arg("tensor", "the tensor was deallocated")),
        }
    }

    /// Drops this tensor's reference to its array now instead of at garbage
    /// collection; `false` if it was already deallocated.
    pub fn deallocate(&self) -> bool {
        self.slot().take().is_some()
    }

    pub fn size(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    pub fn byte_size(&self) -> u64 {
        self.size() * dtype::size_of(self.dtype) as u64
    }
}

/// The device all `tensors` are on, or an error naming the mismatch.
pub fn common_device(tensors: &[&TensorRef]) -> Result<Device> {
    let first = tensors
        .first()
        .map(|t| t.device)
        .ok_or_else(|| Error::Internal("common_device of no tensors".into()))?;
    match tensors.iter().find(|t| t.device != first) {
        None => Ok(first),
        Some(other) => Err(Error::Device(format!(
            "tensors are on different devices ({} and {}); transfer one first",
            first.name(),
            other.device.name()
        ))),
    }
}

/// A new tensor as Elixir receives it: `{resource, shape, type, device}`.
pub struct NewTensor(pub TensorRef);

impl NewTensor {
    pub fn new(array: Array, device: Device) -> Self {
        NewTensor(Tensor::wrap(array, device))
    }
}

impl Encoder for NewTensor {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let t = &self.0;
        (
            t.encode(env),
            shape_term(env, &t.shape),
            TypeTerm(t.dtype),
            DeviceTerm(t.device),
        )
            .encode(env)
    }
}

// -----------------------------------------------------------------------------
// Queries (synchronous: they read Rust fields only)
// -----------------------------------------------------------------------------

#[rustler::nif]
fn tensor_info<'a>(env: Env<'a>, tensor: TensorRef) -> Term<'a> {
    (
        shape_term(env, &tensor.shape),
        TypeTerm(tensor.dtype),
        DeviceTerm(tensor.device),
    )
        .encode(env)
}

#[rustler::nif]
fn tensor_size(tensor: TensorRef) -> (u64, u64) {
    (tensor.size(), tensor.byte_size())
}

/// `deallocate(t)`: frees the tensor's data now (synchronous: dropping an
/// array handle only decrements a reference count). `true` if it had data.
#[rustler::nif]
fn deallocate(tensor: TensorRef) -> bool {
    tensor.deallocate()
}
