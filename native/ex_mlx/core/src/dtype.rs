//! The one table between Elixir type names and MLX dtypes.
//!
//! Elixir names types the way Nx does, `{kind, bits}` (`{:f, 32}`, `{:bf, 16}`,
//! `{:c, 64}`, ...), plus the atom `:bool` for MLX's boolean dtype, which Nx
//! has no name for.

use crate::error::{Error, Result};
use mlx_rs::Dtype;

/// `(kind, bits, dtype)`; `kind` "bool" stands for the `:bool` atom.
pub const TYPES: &[(&str, u32, Dtype)] = &[
    ("bool", 8, Dtype::Bool),
    ("u", 8, Dtype::Uint8),
    ("u", 16, Dtype::Uint16),
    ("u", 32, Dtype::Uint32),
    ("u", 64, Dtype::Uint64),
    ("s", 8, Dtype::Int8),
    ("s", 16, Dtype::Int16),
    ("s", 32, Dtype::Int32),
    ("s", 64, Dtype::Int64),
    ("f", 16, Dtype::Float16),
    ("bf", 16, Dtype::Bfloat16),
    ("f", 32, Dtype::Float32),
    ("f", 64, Dtype::Float64),
    ("c", 64, Dtype::Complex64),
];

/// Looks a type name up; the error names the type.
pub fn from_name(kind: &str, bits: u32) -> Result<Dtype> {
    TYPES
        .iter()
        .find(|(k, b, _)| *k == kind && *b == bits)
        .map(|(_, _, d)| *d)
        .ok_or_else(|| Error::Type(format!("unsupported type {{:{kind}, {bits}}}")))
}

/// The name of a dtype, `(kind, bits)`.
pub fn name(dtype: Dtype) -> (&'static str, u32) {
    TYPES
        .iter()
        .find(|(_, _, d)| *d == dtype)
        .map(|(k, b, _)| (*k, *b))
        .unwrap_or(("unknown", 0))
}

/// A dtype written the way Elixir code writes it: `{:f, 32}` or `:bool`.
pub fn display(dtype: Dtype) -> String {
    match name(dtype) {
        ("bool", _) => ":bool".to_string(),
        (kind, bits) => format!("{{:{kind}, {bits}}}"),
    }
}

/// A shape written the way Elixir code writes it: `{2, 3}`.
pub fn display_shape<T: std::fmt::Display>(shape: &[T]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{{{}}}", dims.join(", "))
}

/// NumPy broadcasting of two shapes (an argument error naming `b` when
/// they do not broadcast).
pub fn broadcast_shape(a: &[i32], b: &[i32]) -> Result<Vec<i32>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[i32], i: usize| {
        let offset = rank - s.len();
        if i < offset {
            1
        } else {
            s[i - offset]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            _ => Err(Error::arg(
                "b",
                format!(
                    "shapes {} and {} do not broadcast",
                    display_shape(a),
                    display_shape(b)
                ),
            )),
        })
        .collect()
}

/// Whether `dtype` is a signed or unsigned integer type (not boolean).
pub fn is_integer(dtype: Dtype) -> bool {
    !(dtype.is_float() || dtype.is_complex() || dtype == Dtype::Bool)
}

/// Bytes per element.
pub fn size_of(dtype: Dtype) -> usize {
    match dtype {
        Dtype::Bool | Dtype::Uint8 | Dtype::Int8 => 1,
        Dtype::Uint16 | Dtype::Int16 | Dtype::Float16 | Dtype::Bfloat16 => 2,
        Dtype::Uint32 | Dtype::Int32 | Dtype::Float32 => 4,
        Dtype::Uint64 | Dtype::Int64 | Dtype::Float64 | Dtype::Complex64 => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_has_exactly_one_name() {
        for (kind, bits, dtype) in TYPES {
            assert_eq!(name(*dtype), (*kind, *bits));
            assert_eq!(from_name(kind, *bits).ok(), Some(*dtype));
        }
        let mut dtypes: Vec<u32> = TYPES.iter().map(|(_, _, d)| (*d).into()).collect();
        dtypes.sort();
        dtypes.dedup();
        assert_eq!(dtypes.len(), TYPES.len());
    }

    #[test]
    fn sizes_match_bits() {
        for (kind, bits, dtype) in TYPES {
            let expected = if *kind == "bool" {
                1
            } else {
                (*bits / 8) as usize
            };
            assert_eq!(size_of(*dtype), expected, "{kind}{bits}");
        }
    }

    #[test]
    fn unsupported_types_are_named() {
        let err = from_name("f", 8).unwrap_err();
        assert_eq!(err.to_string(), "unsupported type {:f, 8}");
        assert!(from_name("c", 128).is_err());
    }
}
