//! Moving tensors between devices.

use ex_mlx_core::worker;
use rustler::{Env, NifResult, Term};

use crate::reply::{queued, submit, Replier};
use crate::tensor::NewTensor;
use crate::term::{decode_device, decode_tensor};

/// `transfer(tag, t, device)`: the tensor on `device`. Its graph is evaluated
/// by the worker that owns it; the evaluated data then belongs to the other
/// device's worker (MLX arrays with data, unlike lazy ones, can be used from
/// any stream: CPU and GPU share memory on Apple silicon, and MLX's CUDA
/// backend uses managed memory).
#[rustler::nif]
fn transfer<'a>(
    env: Env<'a>,
    tag: Term<'a>,
    t: Term<'a>,
    device: Term<'a>,
) -> NifResult<crate::reply::Submitted> {
    queued((|| {
        let t = decode_tensor("tensor", t)?;
        let to = decode_device("device", device)?;
        let from = t.device;
        if let Some((_, dtype)) = t.info()? {
            ex_mlx_core::device::check_dtype(dtype, to)?;
        }
        if from == to {
            return submit(env, tag, from, move || Ok(NewTensor::Existing(t)));
        }
        // Fail now, with the device named, if the destination has no worker.
        worker::submit(to, Box::new(|| {}))?;
        let replier = Replier::new(env, tag);
        worker::submit(
            from,
            Box::new(move || {
                let evaluated = worker::run_caught(|| {
                    let array = t.array()?;
                    array.eval()?;
                    Ok(array)
                });
                match evaluated {
                    Ok(array) => replier.send(Ok(NewTensor::view(array, to))),
                    Err(e) => replier.send::<NewTensor>(Err(e)),
                }
            }),
        )?;
        Ok(crate::reply::Submitted::Queued)
    })())
}

/// `device_available(device)`: whether this MLX build can run on `device`.
#[rustler::nif]
fn device_available(device: Term) -> NifResult<bool> {
    let device = decode_device("device", device).map_err(crate::term::error_tuple)?;
    Ok(device.is_available())
}
