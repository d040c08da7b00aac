//! Reference measurements for bench/: what the hardware does without ExMLX,
//! timed from Rust in the same run as the measurements of ExMLX.

use rustler::{Binary, Error, NifResult};

/// The most bytes one call copies (the time is bounded: it runs on a dirty
/// scheduler, but a call should not take seconds).
const MAX_BYTES: usize = 1 << 30;

/// `memcpy_seconds(binary, reps)`: the seconds each of `reps` plain copies of
/// `binary` into one destination buffer took. The buffer is written once
/// before timing, so its pages are mapped: this is the copy alone, the
/// fastest a transfer of these bytes can be.
#[rustler::nif(schedule = "DirtyCpu")]
fn memcpy_seconds(binary: Binary, reps: usize) -> NifResult<Vec<f64>> {
    let source = binary.as_slice();
    if source.len() > MAX_BYTES || !(1..=1000).contains(&reps) {
        return Err(Error::BadArg);
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
