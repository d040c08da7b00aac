//! The non-tensor arguments of the ops in [`super::table`]: what kinds there
//! are ([`ParamKind`]), the values ([`Param`]) a caller decodes from its own
//! representation (Elixir terms in the NIF, a compiled program's bytes), and
//! how an op's body takes them back as Rust types ([`FromParam`]).

use mlx_rs::Dtype;

use super::creation::Scalar;
use crate::device::Device;
use crate::error::{Error, Result};

/// The kind of a parameter, which fixes its Rust type (the alias of the same
/// name in [`kinds`]) and how callers decode it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// An integer.
    Int,
    /// An integer or none (`nil`).
    OptInt,
    /// A list of integers (a tuple is accepted too).
    Ints,
    /// A list of integers or none (`nil`).
    OptInts,
    /// A boolean.
    Bool,
    /// A real number.
    Float,
    /// An element type (`{:f, 32}`, `:bool`, ...).
    Type,
    /// A shape: non-negative dimensions.
    Shape,
    /// `{low, high}` pairs, one per axis, or none (`nil`).
    OptPairs,
    /// `{low, high}` or `{low, high, interior}` per axis.
    PadConfig,
    /// A number to fill with: integer, float, NaN or an infinity, `{re, im}`.
    Scalar,
    /// A device.
    Device,
    /// A sort direction: `:asc` or `:desc` (`true` when descending).
    Direction,
    /// A matrix's shape for a solver: none (`nil`), `:lower` or `:upper`
    /// (`Some(true)` when upper triangular).
    Triangular,
    /// A string.
    Str,
}

impl ParamKind {
    /// The kind's name, as the op table writes it (and Elixir reads it).
    pub fn name(self) -> &'static str {
        match self {
            ParamKind::Int => "Int",
            ParamKind::OptInt => "OptInt",
            ParamKind::Ints => "Ints",
            ParamKind::OptInts => "OptInts",
            ParamKind::Bool => "Bool",
            ParamKind::Float => "Float",
            ParamKind::Type => "Type",
            ParamKind::Shape => "Shape",
            ParamKind::OptPairs => "OptPairs",
            ParamKind::PadConfig => "PadConfig",
            ParamKind::Scalar => "Scalar",
            ParamKind::Device => "Device",
            ParamKind::Direction => "Direction",
            ParamKind::Triangular => "Triangular",
            ParamKind::Str => "Str",
        }
    }
}

/// The Rust type of each [`ParamKind`], by the same name: an op's body gets
/// its parameters as these.
pub mod kinds {
    pub type Int = i64;
    pub type OptInt = Option<i64>;
    pub type Ints = Vec<i64>;
    pub type OptInts = Option<Vec<i64>>;
    pub type Bool = bool;
    pub type Float = f64;
    pub type Type = mlx_rs::Dtype;
    pub type Shape = Vec<i32>;
    pub type OptPairs = Option<Vec<(i64, i64)>>;
    pub type PadConfig = Vec<(i64, i64, i64)>;
    pub type Scalar = super::Scalar;
    pub type Device = crate::device::Device;
    pub type Direction = bool;
    pub type Triangular = Option<bool>;
    pub type Str = String;
}

/// A decoded parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    Int(i64),
    OptInt(Option<i64>),
    Ints(Vec<i64>),
    OptInts(Option<Vec<i64>>),
    Bool(bool),
    Float(f64),
    Type(Dtype),
    Shape(Vec<i32>),
    OptPairs(Option<Vec<(i64, i64)>>),
    PadConfig(Vec<(i64, i64, i64)>),
    Scalar(Scalar),
    Device(Device),
    Direction(bool),
    Triangular(Option<bool>),
    Str(String),
}

impl Param {
    /// The kind of this value.
    pub fn kind(&self) -> ParamKind {
        match self {
            Param::Int(_) => ParamKind::Int,
            Param::OptInt(_) => ParamKind::OptInt,
            Param::Ints(_) => ParamKind::Ints,
            Param::OptInts(_) => ParamKind::OptInts,
            Param::Bool(_) => ParamKind::Bool,
            Param::Float(_) => ParamKind::Float,
            Param::Type(_) => ParamKind::Type,
            Param::Shape(_) => ParamKind::Shape,
            Param::OptPairs(_) => ParamKind::OptPairs,
            Param::PadConfig(_) => ParamKind::PadConfig,
            Param::Scalar(_) => ParamKind::Scalar,
            Param::Device(_) => ParamKind::Device,
            Param::Direction(_) => ParamKind::Direction,
            Param::Triangular(_) => ParamKind::Triangular,
            Param::Str(_) => ParamKind::Str,
        }
    }
}

/// Takes a parameter of the expected kind back as its Rust type.
pub trait FromParam: Sized {
    fn from_param(name: &'static str, param: Param) -> Result<Self>;
}

macro_rules! from_param {
    ($($variant:ident => $ty:ty),* $(,)?) => {
        $(impl FromParam for $ty {
            fn from_param(name: &'static str, param: Param) -> Result<Self> {
                match param {
                    Param::$variant(v) => Ok(v),
                    other => Err(wrong_kind(name, ParamKind::$variant, &other)),
                }
            }
        })*
    };
}

// (Direction is a bool and Triangular an Option<bool>, like Bool and no
// other kind: their values come back through the impls of those types.)
from_param! {
    Int => i64,
    OptInt => Option<i64>,
    Ints => Vec<i64>,
    OptInts => Option<Vec<i64>>,
    Float => f64,
    Type => Dtype,
    Shape => Vec<i32>,
    OptPairs => Option<Vec<(i64, i64)>>,
    PadConfig => Vec<(i64, i64, i64)>,
    Scalar => Scalar,
    Device => Device,
    Str => String,
}

impl FromParam for bool {
    fn from_param(name: &'static str, param: Param) -> Result<Self> {
        match param {
            Param::Bool(v) | Param::Direction(v) => Ok(v),
            other => Err(wrong_kind(name, ParamKind::Bool, &other)),
        }
    }
}

impl FromParam for Option<bool> {
    fn from_param(name: &'static str, param: Param) -> Result<Self> {
        match param {
            Param::Triangular(v) => Ok(v),
            other => Err(wrong_kind(name, ParamKind::Triangular, &other)),
        }
    }
}

fn wrong_kind(name: &'static str, expected: ParamKind, got: &Param) -> Error {
    Error::Internal(format!(
        "parameter {name}: expected a {} value, got a {} value",
        expected.name(),
        got.kind().name()
    ))
}

/// `n` ones (the default strides and dilations).
pub fn ones(n: usize) -> Vec<i64> {
    vec![1; n]
}

/// Every axis of a rank-`rank` array, in order.
pub fn all_axes(rank: usize) -> Vec<i64> {
    (0..rank as i64).collect()
}

/// A dimension argument as MLX takes it.
pub fn dim(name: &'static str, n: i64) -> Result<i32> {
    i32::try_from(n)
        .ok()
        .filter(|&d| d >= 0)
        .ok_or_else(|| Error::arg(name, format!("{n} is out of range")))
}
