//! Elixir terms in and out: decoding argument values (with errors that name
//! them) and encoding types, devices, numbers and errors. Tensors are
//! decoded by `crate::tensor`; `crate::args` wraps these decoders as typed
//! NIF arguments.

use ex_mlx_core::device::{Device, Kind};
use ex_mlx_core::dtype;
use ex_mlx_core::error::Error;
use ex_mlx_core::ops::params::{Param, ParamKind};
use mlx_rs::Dtype;
use rustler::types::tuple::{get_tuple, make_tuple};
use rustler::{Atom, Binary, Encoder, Env, Term, TermType};

/// A term written the way Elixir's `inspect` would (for error messages):
/// atoms as `:name`, short binaries quoted, tuples and lists recursively.
pub fn show(term: Term) -> String {
    match term.get_type() {
        TermType::Atom => match term.atom_to_string() {
            Ok(name) if matches!(name.as_str(), "nil" | "true" | "false") => name,
            Ok(name) => format!(":{name}"),
            Err(_) => format!("{term:?}"),
        },
        TermType::Binary => match term.decode::<Binary>() {
            Ok(b) if b.len() <= 64 => match std::str::from_utf8(b.as_slice()) {
                Ok(s) => format!("{s:?}"),
                Err(_) => format!("<<{} bytes>>", b.len()),
            },
            Ok(b) => format!("<<{} bytes>>", b.len()),
            Err(_) => format!("{term:?}"),
        },
        TermType::Tuple => match get_tuple(term) {
            Ok(items) => format!("{{{}}}", join(items)),
            Err(_) => format!("{term:?}"),
        },
        TermType::List => match term.decode::<Vec<Term>>() {
            Ok(items) => format!("[{}]", join(items)),
            Err(_) => format!("{term:?}"),
        },
        // (Rust's shortest round-trip digits: 1.5, 0.1, 1e300)
        TermType::Float => match term.decode::<f64>() {
            Ok(f) => format!("{f:?}"),
            Err(_) => format!("{term:?}"),
        },
        _ => format!("{term:?}"),
    }
}

fn join(items: Vec<Term>) -> String {
    items.into_iter().map(show).collect::<Vec<_>>().join(", ")
}

// -----------------------------------------------------------------------------
// Decoding arguments
// -----------------------------------------------------------------------------

rustler::atoms! { f, bf, s, u, c, bool, cpu, gpu }

/// The kind of a type (`:f`, `:s`, ...) by atom, without building its name:
/// types are decoded on every deferred op.
fn type_kind(atom: Atom) -> Option<&'static str> {
    [(f(), "f"), (bf(), "bf"), (s(), "s"), (u(), "u"), (c(), "c")]
        .into_iter()
        .find(|(a, _)| *a == atom)
        .map(|(_, name)| name)
}

/// A type argument: `{kind, bits}` as Nx writes it, or `:bool`.
pub fn decode_type(name: &'static str, term: Term) -> Result<Dtype, Error> {
    if let Ok((kind, bits)) = term.decode::<(Atom, u32)>() {
        if let Some(kind) = type_kind(kind) {
            return dtype::from_name(kind, bits);
        }
    }
    if let Ok(atom) = term.decode::<Atom>() {
        if atom == bool() {
            return Ok(Dtype::Bool);
        }
        let atom_name = atom
            .to_term(term.get_env())
            .atom_to_string()
            .unwrap_or_default();
        return Err(Error::Type(format!("unsupported type :{atom_name}")));
    }
    // (a kind that is not one of the types': the error names it)
    if let Ok((kind, bits)) = term.decode::<(Atom, u32)>() {
        let kind = kind
            .to_term(term.get_env())
            .atom_to_string()
            .unwrap_or_default();
        return dtype::from_name(&kind, bits);
    }
    Err(Error::arg(
        name,
        format!(
            "expected a type such as {{:f, 32}} or :bool, got: {}",
            show(term)
        ),
    ))
}

/// A shape argument: a tuple (or list) of non-negative integers.
pub fn decode_shape(name: &'static str, term: Term) -> Result<Vec<i32>, Error> {
    let dims: Vec<Term> = if let Ok(tuple) = get_tuple(term) {
        tuple
    } else if let Ok(list) = term.decode::<Vec<Term>>() {
        list
    } else {
        return Err(Error::arg(
            name,
            format!("expected a tuple of dimensions, got: {}", show(term)),
        ));
    };
    let dims = dims
        .iter()
        .enumerate()
        .map(|(axis, d)| {
            d.decode::<i64>().map_err(|_| {
                Error::arg(
                    name,
                    format!("dimension {axis} is not an integer: {}", show(*d)),
                )
            })
        })
        .collect::<Result<Vec<i64>, Error>>()?;
    ex_mlx_core::host::check_shape(name, &dims)
}

/// A device argument: `:cpu` or `:gpu`.
pub fn decode_device(name: &'static str, term: Term) -> Result<Device, Error> {
    let kind = |t: Term| {
        t.decode::<Atom>()
            .ok()
            .and_then(|a| a.to_term(term.get_env()).atom_to_string().ok())
            .and_then(|n| Device::from_name(&n))
    };
    let expected = || {
        Error::arg(
            name,
            format!(
                "expected a device, :cpu, :gpu or a stream ({{:gpu, 1}}), got: {}",
                show(term)
            ),
        )
    };
    let device = match kind(term) {
        Some(device) => device,
        None => match term.decode::<(Term, u32)>() {
            Ok((k, n)) if n > 0 => kind(k).ok_or_else(expected)?.on_stream(n),
            _ => return Err(expected()),
        },
    };
    if !ex_mlx_core::worker::stream_exists(device) {
        return Err(Error::arg(
            name,
            format!(
                "there is no {} ({}): ExMLX.Stream.new/1 makes streams",
                device.describe(),
                show(term)
            ),
        ));
    }
    Ok(device)
}

// -----------------------------------------------------------------------------
// Encoding results
// -----------------------------------------------------------------------------

/// An error as Elixir receives it: `{kind, message}`.
pub struct ErrorTerm(pub Error);

/// A NIF's error return: `{:error, {kind, message}}`.
pub fn error_tuple(e: Error) -> rustler::Error {
    rustler::Error::Term(Box::new(ErrorTerm(e)))
}

impl Encoder for ErrorTerm {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let kind = Atom::from_str(env, self.0.kind())
            .map(|a| a.encode(env))
            .unwrap_or_else(|_| "internal".encode(env));
        (kind, self.0.to_string()).encode(env)
    }
}

/// A dtype as Elixir names it: `{:f, 32}` or `:bool`.
pub struct TypeTerm(pub Dtype);

impl Encoder for TypeTerm {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let (kind, bits) = dtype::name(self.0);
        match Atom::from_str(env, kind) {
            Ok(atom) if kind == "bool" => atom.encode(env),
            Ok(atom) => (atom, bits).encode(env),
            Err(_) => rustler::types::atom::error().encode(env),
        }
    }
}

/// A device as Elixir names it: `:cpu` or `:gpu`, or `{:gpu, n}` for its
/// stream `n`.
pub struct DeviceTerm(pub Device);

impl Encoder for DeviceTerm {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let kind = match self.0.kind() {
            Kind::Cpu => cpu(),
            Kind::Gpu => gpu(),
        };
        match self.0.stream() {
            0 => kind.encode(env),
            n => (kind, n).encode(env),
        }
    }
}

/// A shape as a tuple of integers.
pub fn shape_term<'a>(env: Env<'a>, shape: &[i64]) -> Term<'a> {
    let dims: Vec<Term> = shape.iter().map(|d| d.encode(env)).collect();
    make_tuple(env, &dims)
}

/// A boolean argument.
pub fn decode_bool(name: &'static str, term: Term) -> Result<bool, Error> {
    term.decode::<bool>()
        .map_err(|_| Error::arg(name, format!("expected true or false, got: {}", show(term))))
}

/// An integer argument.
pub fn decode_int(name: &'static str, term: Term) -> Result<i64, Error> {
    term.decode::<i64>()
        .map_err(|_| Error::arg(name, format!("expected an integer, got: {}", show(term))))
}

/// An integer in `range` (inclusive).
pub fn decode_int_in(
    name: &'static str,
    term: Term,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, Error> {
    match term.decode::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(Error::arg(
            name,
            format!(
                "expected an integer from {} to {}, got: {}",
                range.start(),
                range.end(),
                show(term)
            ),
        )),
    }
}

/// A binary argument.
pub fn decode_binary<'a>(name: &'static str, term: Term<'a>) -> Result<Binary<'a>, Error> {
    term.decode::<Binary>()
        .map_err(|_| Error::arg(name, format!("expected a binary, got: {}", show(term))))
}

/// A real number argument: a float or an integer.
pub fn decode_number(name: &'static str, term: Term) -> Result<f64, Error> {
    if let Ok(f) = term.decode::<f64>() {
        return Ok(f);
    }
    term.decode::<i64>()
        .map(|i| i as f64)
        .map_err(|_| Error::arg(name, format!("expected a number, got: {}", show(term))))
}

/// An integer, or `nil` for "none".
pub fn decode_opt_int(name: &'static str, term: Term) -> Result<Option<i64>, Error> {
    if is_nil(term) {
        Ok(None)
    } else {
        decode_int(name, term).map(Some)
    }
}

/// A list (or tuple) of integers such as axes.
pub fn decode_ints(name: &'static str, term: Term) -> Result<Vec<i64>, Error> {
    let items: Vec<Term> = if let Ok(tuple) = get_tuple(term) {
        tuple
    } else {
        term.decode::<Vec<Term>>().map_err(|_| {
            Error::arg(
                name,
                format!("expected a list of integers, got: {}", show(term)),
            )
        })?
    };
    items
        .iter()
        .map(|t| {
            t.decode::<i64>().map_err(|_| {
                Error::arg(
                    name,
                    format!("expected a list of integers, got: {}", show(term)),
                )
            })
        })
        .collect()
}

/// A list of integers, or `nil` for "all".
pub fn decode_opt_ints(name: &'static str, term: Term) -> Result<Option<Vec<i64>>, Error> {
    if is_nil(term) {
        Ok(None)
    } else {
        decode_ints(name, term).map(Some)
    }
}

fn is_nil(term: Term) -> bool {
    term.decode::<Atom>()
        .is_ok_and(|a| a == rustler::types::atom::nil())
}

/// A number: an integer, a float, `:nan`, `:infinity`, `:neg_infinity`, or `{re, im}`.
pub fn decode_scalar(
    name: &'static str,
    term: Term,
) -> Result<ex_mlx_core::ops::creation::Scalar, Error> {
    use ex_mlx_core::ops::creation::Scalar;
    fn real(term: Term) -> Option<f64> {
        if let Ok(f) = term.decode::<f64>() {
            return Some(f);
        }
        if let Ok(i) = term.decode::<i64>() {
            return Some(i as f64);
        }
        match term.atom_to_string().ok()?.as_str() {
            "nan" => Some(f64::NAN),
            "infinity" => Some(f64::INFINITY),
            "neg_infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        }
    }
    if let Ok(i) = term.decode::<i64>() {
        return Ok(Scalar::Int(i as i128));
    }
    if let Ok(u) = term.decode::<u64>() {
        return Ok(Scalar::Int(u as i128));
    }
    if let Some(f) = real(term) {
        return Ok(Scalar::Float(f));
    }
    if let Ok((re, im)) = term.decode::<(Term, Term)>() {
        if let (Some(re), Some(im)) = (real(re), real(im)) {
            return Ok(Scalar::Complex(re, im));
        }
    }
    Err(Error::arg(
        name,
        format!(
            "expected a number, :nan, :infinity, :neg_infinity or {{re, im}}, got: {}",
            show(term)
        ),
    ))
}

/// A number as Elixir reads it back: integers, floats, and the atoms Nx uses
/// for NaN and the infinities; `{re, im}` for complex; booleans for `:bool`.
pub struct NumberTerm(pub ex_mlx_core::item::Number);

fn float_term<'a>(env: Env<'a>, f: f64) -> Term<'a> {
    let atom = |name: &str| {
        Atom::from_str(env, name)
            .map(|a| a.encode(env))
            .unwrap_or_else(|_| f.encode(env))
    };
    if f.is_nan() {
        atom("nan")
    } else if f == f64::INFINITY {
        atom("infinity")
    } else if f == f64::NEG_INFINITY {
        atom("neg_infinity")
    } else {
        f.encode(env)
    }
}

impl Encoder for NumberTerm {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        use ex_mlx_core::item::Number;
        match self.0 {
            Number::Bool(b) => b.encode(env),
            Number::Int(i) => i.encode(env),
            Number::UInt(u) => u.encode(env),
            Number::Float(f) => float_term(env, f),
            Number::Complex(re, im) => (float_term(env, re), float_term(env, im)).encode(env),
        }
    }
}

// -----------------------------------------------------------------------------
// Op parameters (by the kinds of ex_mlx_core's op table)
// -----------------------------------------------------------------------------

/// A parameter of kind `kind`, named `name` in errors.
pub fn decode_param(name: &'static str, kind: ParamKind, term: Term) -> Result<Param, Error> {
    Ok(match kind {
        ParamKind::Int => Param::Int(decode_int(name, term)?),
        ParamKind::OptInt => Param::OptInt(decode_opt_int(name, term)?),
        ParamKind::Ints => Param::Ints(decode_ints(name, term)?),
        ParamKind::OptInts => Param::OptInts(decode_opt_ints(name, term)?),
        ParamKind::Bool => Param::Bool(decode_bool(name, term)?),
        ParamKind::Float => Param::Float(decode_number(name, term)?),
        ParamKind::Type => Param::Type(decode_type(name, term)?),
        ParamKind::Shape => Param::Shape(decode_shape(name, term)?),
        ParamKind::OptPairs => Param::OptPairs(decode_opt_pairs(name, term)?),
        ParamKind::PadConfig => Param::PadConfig(decode_pad_config(name, term)?),
        ParamKind::Scalar => Param::Scalar(decode_scalar(name, term)?),
        ParamKind::Device => Param::Device(decode_device(name, term)?),
        ParamKind::Direction => Param::Direction(decode_choice(
            name,
            term,
            &[("asc", false), ("desc", true)],
        )?),
        ParamKind::Triangular => Param::Triangular(decode_choice(
            name,
            term,
            &[("nil", None), ("lower", Some(false)), ("upper", Some(true))],
        )?),
        ParamKind::Str => Param::Str(
            term.decode::<String>()
                .map_err(|_| Error::arg(name, format!("expected a string, got: {}", show(term))))?,
        ),
    })
}

/// One of the atoms `choices` names, as its value.
fn decode_choice<T: Copy>(
    name: &'static str,
    term: Term,
    choices: &[(&str, T)],
) -> Result<T, Error> {
    let atom = term.atom_to_string().ok();
    choices
        .iter()
        .find(|(n, _)| Some(*n) == atom.as_deref())
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<String> = choices
                .iter()
                .map(|(n, _)| {
                    if *n == "nil" {
                        "nil".to_string()
                    } else {
                        format!(":{n}")
                    }
                })
                .collect();
            Error::arg(
                name,
                format!("expected one of {}, got: {}", names.join(", "), show(term)),
            )
        })
}

/// `{low, high}` pairs, or `nil`.
fn decode_opt_pairs(name: &'static str, term: Term) -> Result<Option<Vec<(i64, i64)>>, Error> {
    if is_nil(term) {
        return Ok(None);
    }
    term.decode::<Vec<(i64, i64)>>().map(Some).map_err(|_| {
        Error::arg(
            name,
            format!(
                "expected a list of {{low, high}} pairs, got: {}",
                show(term)
            ),
        )
    })
}

/// `{low, high}` or `{low, high, interior}` per axis.
fn decode_pad_config(name: &'static str, term: Term) -> Result<Vec<(i64, i64, i64)>, Error> {
    let bad = || {
        Error::arg(
            name,
            format!(
                "expected a list of {{low, high}} or {{low, high, interior}} integers, got: {}",
                show(term)
            ),
        )
    };
    let items: Vec<Term> = term.decode().map_err(|_| bad())?;
    items
        .iter()
        .map(|item| {
            if let Ok((lo, hi)) = item.decode::<(i64, i64)>() {
                Ok((lo, hi, 0))
            } else {
                item.decode::<(i64, i64, i64)>().map_err(|_| bad())
            }
        })
        .collect()
}
