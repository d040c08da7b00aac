//! Reference measurements for bench/: what the hardware does without ExMLX,
//! timed from Rust in the same run as the measurements of ExMLX.

use ex_mlx_core::error::Error;
use rustler::{NifResult, Term};

use crate::args::{names, Bytes, DeviceArg, Tag};
use crate::term::{decode_int_in, error_tuple};

/// The most bytes one call copies (the time is bounded: it runs on a dirty
/// scheduler, but a call should not take seconds).
const MAX_BYTES: usize = 1 << 30;

/// `memcpy_seconds(binary, reps)`: the seconds each of `reps` plain copies of
/// `binary` into one destination buffer took. The buffer is written once
/// before timing, so its pages are mapped: this is the copy alone, the
/// fastest a transfer of these bytes can be.
#[rustler::nif(schedule = "DirtyCpu")]
fn memcpy_seconds(binary: Bytes<names::Source>, reps: Term) -> NifResult<Vec<f64>> {
    let reps = decode_int_in("reps", reps, 1..=1000).map_err(error_tuple)? as usize;
    let source = binary.as_slice();
    if source.len() > MAX_BYTES {
        return Err(error_tuple(Error::arg(
            "binary",
            format!("at most {MAX_BYTES} bytes, got: {}", source.len()),
        )));
    }
    let mut destination = vec![0u8; source.len()];
    destination.copy_from_slice(source);
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = std::time::Instant::now();
        destination.copy_from_slice(std::hint::black_box(source));
        std::hint::black_box(&mut destination);
        samples.push(start.elapsed().as_secs_f64());
    }
    Ok(samples)
}

/// `worker_chain_seconds(tag, device, n, elements, reps)`: on `device`'s
/// worker, without Elixir, `reps` times: build `n` chained adds of f32
/// arrays of `elements` elements (0: 0-d arrays) and evaluate them; replies
/// `{build, total}` seconds for each. The lazy-op benchmark's floor in this
/// VM: what MLX takes on ExMLX's worker thread, for arrays of the size the
/// benchmark adds (on a GPU, 0-d arrays take MLX's small-buffer pool, a
/// slower path than 16-element arrays take).
#[rustler::nif]
fn worker_chain_seconds<'a>(
    env: rustler::Env<'a>,
    tag: Tag<'a>,
    device: DeviceArg,
    n: Term<'a>,
    elements: Term<'a>,
    reps: Term<'a>,
) -> crate::reply::AsyncResult {
    let n = decode_int_in("n", n, 1..=100_000).map_err(error_tuple)? as usize;
    let elements = decode_int_in("elements", elements, 0..=1 << 20).map_err(error_tuple)? as usize;
    let reps = decode_int_in("reps", reps, 1..=1000).map_err(error_tuple)? as usize;
    crate::reply::submit(
        env,
        tag,
        device.0,
        move || -> ex_mlx_core::Result<Vec<(f64, f64)>> {
            let one = if elements == 0 {
                mlx_rs::Array::from_f32(1.0)
            } else {
                mlx_rs::Array::from_slice(&vec![1.0f32; elements], &[elements as i32])
            };
            one.eval()?;
            let mut samples = Vec::with_capacity(reps);
            for _ in 0..reps {
                let start = std::time::Instant::now();
                let mut acc = one.clone();
                for _ in 0..n {
                    acc = mlx_rs::ops::add(&acc, &one)?;
                }
                let built = start.elapsed().as_secs_f64();
                acc.eval()?;
                samples.push((built, start.elapsed().as_secs_f64()));
            }
            Ok(samples)
        },
    )
}
