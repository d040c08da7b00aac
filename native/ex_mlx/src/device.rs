//! NIFs about devices: whether one is available, and moving a tensor to one.

use ex_mlx_core::worker;
use rustler::Env;

use crate::args::{DeviceArg, Tag, Tensor};
use crate::reply::{submit, AsyncResult, Replier, Submitted};
use crate::tensor::NewTensor;
use crate::term::error_tuple;

/// `transfer(tag, t, device)`: `t` on `device`. The array is evaluated on its
/// own device's worker first, then handed over (the device's worker is
/// started first, so a missing device fails here).
#[rustler::nif]
fn transfer<'a>(env: Env<'a>, tag: Tag<'a>, t: Tensor, device: DeviceArg) -> AsyncResult {
    let (t, to) = (t.0, device.0);
    let from = t.device;
    if let Some((_, dtype)) = t.info().map_err(error_tuple)? {
        ex_mlx_core::device::check_dtype(dtype, to).map_err(error_tuple)?;
    }
    if from == to {
        return submit(env, tag, from, move || Ok(NewTensor::Existing(t)));
    }
    worker::submit(to, Box::new(|| {})).map_err(error_tuple)?;
    let replier = Replier::new(env, tag.0);
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
    )
    .map_err(error_tuple)?;
    Ok(Submitted::Queued)
}

/// `device_available(device)`: whether this MLX build runs on `device`.
#[rustler::nif]
fn device_available(device: DeviceArg) -> bool {
    device.0.is_available()
}
