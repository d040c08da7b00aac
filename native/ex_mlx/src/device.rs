//! NIFs about devices: whether one is available, and moving a tensor to one.

use ex_mlx_core::worker;
use rustler::{Env, Term};

use crate::args::{DeviceArg, Tag, Tensor};
use crate::reply::{submit, AsyncResult, Replier, Submitted};
use crate::tensor::{self, NewTensor};
use crate::term::{error_tuple, show, DeviceTerm};

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
    tensor::eval_on_worker(t, move |evaluated| {
        replier.send(evaluated.map(|array| NewTensor::view(array, to)))
    })
    .map_err(error_tuple)?;
    Ok(Submitted::Queued)
}

/// `device_available(device)`: whether this MLX build runs on `device`.
#[rustler::nif]
fn device_available(device: DeviceArg) -> bool {
    device.0.is_available()
}

/// `device_evaluate_ahead(device, setting)`: whether workers of `device`'s
/// kind evaluate ahead of reads (`ex_mlx_core::ahead`) before this call;
/// `setting` is `true`, `false`, or `nil` to leave it as it is.
#[rustler::nif]
fn device_evaluate_ahead(device: DeviceArg, setting: Term) -> Result<bool, rustler::Error> {
    let setting: Option<bool> = setting.decode().map_err(|_| {
        error_tuple(ex_mlx_core::Error::arg(
            "setting",
            format!("expected true, false or nil, got: {}", show(setting)),
        ))
    })?;
    let kind = device.0.kind();
    let before = ex_mlx_core::ahead::enabled(kind);
    if let Some(on) = setting {
        ex_mlx_core::ahead::set_enabled(kind, on);
    }
    Ok(before)
}

/// `stream_new(device)`: a new stream on `device`'s kind, with a worker
/// thread of its own (`ex_mlx_core::worker::new_stream`): `{kind, n}`, or
/// `{:error, reason}`.
#[rustler::nif]
fn stream_new(device: DeviceArg) -> Result<DeviceTerm, rustler::Error> {
    let stream = worker::new_stream(device.0.on_stream(0)).map_err(error_tuple)?;
    Ok(DeviceTerm(stream))
}

/// `stream_synchronize(tag, device)`: `:ok` once every op queued on
/// `device`'s stream before this call has run and MLX has finished the work
/// it queued there.
#[rustler::nif]
fn stream_synchronize<'a>(env: Env<'a>, tag: Tag<'a>, device: DeviceArg) -> AsyncResult {
    submit(env, tag, device.0, move || {
        worker::synchronize_own_stream()?;
        Ok(rustler::types::atom::ok())
    })
}
