//! Memory statistics, limits and device facts (synchronous NIFs: MLX's
//! allocator is global and takes its own lock; none of this needs a stream).

use ex_mlx_core::memory::{self, Fact};
use rustler::{Encoder, Env, NifResult, Term};

use crate::args::DeviceArg;
use crate::term::error_tuple;

rustler::atoms! { active, peak, cache, memory_limit, cache_limit }

fn or_error<T>(r: ex_mlx_core::Result<T>) -> NifResult<T> {
    r.map_err(error_tuple)
}

/// `memory_stats()`: `%{active:, peak:, cache:, memory_limit:, cache_limit:}` in bytes.
#[rustler::nif]
fn memory_stats(env: Env) -> NifResult<Term> {
    let s = or_error(memory::stats())?;
    let cache_limit_value = or_error(memory::cache_limit())?;
    let pairs = [
        (active().encode(env), s.active.encode(env)),
        (peak().encode(env), s.peak.encode(env)),
        (cache().encode(env), s.cache.encode(env)),
        (memory_limit().encode(env), s.memory_limit.encode(env)),
        (cache_limit().encode(env), cache_limit_value.encode(env)),
    ];
    Term::map_from_pairs(env, &pairs).map_err(|_| rustler::Error::BadArg)
}

#[rustler::nif]
fn memory_reset_peak() -> NifResult<rustler::Atom> {
    or_error(memory::reset_peak())?;
    Ok(rustler::types::atom::ok())
}

/// Freeing a large cache can take a while: off the normal schedulers.
#[rustler::nif(schedule = "DirtyCpu")]
fn memory_clear_cache() -> NifResult<rustler::Atom> {
    or_error(memory::clear_cache())?;
    Ok(rustler::types::atom::ok())
}

/// `memory_set_limit(:memory_limit | :cache_limit | :collect_after, bytes)`:
/// the previous limit (`:collect_after`: the garbage-collection hints'
/// threshold, `crate::collect`).
#[rustler::nif]
fn memory_set_limit(which: Term, bytes: Term) -> NifResult<usize> {
    let bytes: u64 = bytes.decode().map_err(|_| {
        error_tuple(ex_mlx_core::Error::arg(
            "bytes",
            format!(
                "expected a non-negative integer, got: {}",
                crate::term::show(bytes)
            ),
        ))
    })?;
    let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    match which.atom_to_string().ok().as_deref() {
        Some("memory_limit") => or_error(memory::set_memory_limit(bytes)),
        Some("cache_limit") => or_error(memory::set_cache_limit(bytes)),
        Some("collect_after") => Ok(ex_mlx_core::collect::set_threshold(bytes as u64) as usize),
        _ => or_error(Err(ex_mlx_core::Error::arg(
            "limit",
            format!(
                "expected :memory_limit, :cache_limit or :collect_after, got: {}",
                crate::term::show(which)
            ),
        ))),
    }
}

/// `memory_mlx_cache_limit()`: the cache limit MLX's allocator started with.
#[rustler::nif]
fn memory_mlx_cache_limit() -> NifResult<usize> {
    or_error(memory::mlx_cache_limit())
}

/// `device_info(device)`: a map of what MLX (and the OS) report about it.
#[rustler::nif]
fn device_info(env: Env, device: DeviceArg) -> NifResult<Term> {
    let device = device.0;
    let facts = or_error(memory::device_info(device))?;
    let pairs: Vec<(Term, Term)> = facts
        .into_iter()
        .map(|(k, v)| {
            let key = rustler::Atom::from_str(env, &k)
                .map(|a| a.encode(env))
                .unwrap_or_else(|_| k.encode(env));
            let value = match v {
                Fact::Size(n) => n.encode(env),
                Fact::Text(s) => s.encode(env),
            };
            (key, value)
        })
        .collect();
    Term::map_from_pairs(env, &pairs).map_err(|_| rustler::Error::BadArg)
}
