//! The forms the op table (`super`, ops/table.rs) is written in: the type
//! rules, inputs, parameters and results of an entry, and the `op_table!`
//! macro that makes [`super::Op`] and its methods from the entries.

use mlx_rs::{Array, Dtype};

use super::Op;
use crate::error::{Error, Result};
use crate::ops::params::{Param, ParamKind};

/// How an op's result type follows from its inputs and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtypeRule {
    /// The first input's type.
    Same,
    /// MLX's promotion of the inputs' types.
    Promote,
    /// `:bool`.
    Bool,
    /// The first input's type if it is floating or complex, else `{:f, 32}`.
    Float,
    /// `{:u, 32}`, MLX's index type.
    Index,
    /// The real type of the first input (`{:c, 64}` gives `{:f, 32}`).
    Real,
    /// `{:c, 64}`.
    Complex,
    /// The parameter named `type` or `out_type`.
    Typed,
    /// What MLX's reduction gives for the first input's type (sums of
    /// booleans and small integers widen).
    Accumulate,
    /// The second input's type (dequantized values take their scales').
    Second,
}

impl DtypeRule {
    pub fn name(self) -> &'static str {
        match self {
            DtypeRule::Same => "same",
            DtypeRule::Promote => "promote",
            DtypeRule::Bool => "bool",
            DtypeRule::Float => "float",
            DtypeRule::Index => "index",
            DtypeRule::Real => "real",
            DtypeRule::Complex => "complex",
            DtypeRule::Typed => "typed",
            DtypeRule::Accumulate => "accumulate",
            DtypeRule::Second => "second",
        }
    }

    /// The result type this rule gives, where it does not depend on MLX's
    /// promotion tables (`None` for `Promote` and `Accumulate`).
    pub fn result(self, inputs: &[Dtype], params: &[Param]) -> Option<Dtype> {
        let first = inputs.first().copied();
        match self {
            DtypeRule::Same => first,
            DtypeRule::Bool => Some(Dtype::Bool),
            DtypeRule::Index => Some(Dtype::Uint32),
            DtypeRule::Complex => Some(Dtype::Complex64),
            DtypeRule::Float => first.map(|d| {
                if d.is_float() || d.is_complex() {
                    d
                } else {
                    Dtype::Float32
                }
            }),
            DtypeRule::Real => first.map(|d| {
                if d == Dtype::Complex64 {
                    Dtype::Float32
                } else {
                    d
                }
            }),
            DtypeRule::Typed => params.iter().find_map(|p| match p {
                Param::Type(d) => Some(*d),
                _ => None,
            }),
            DtypeRule::Second => inputs.get(1).copied(),
            DtypeRule::Promote | DtypeRule::Accumulate => None,
        }
    }
}

/// An op's tensor inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inputs {
    /// Exactly these, by name.
    Fixed(&'static [&'static str]),
    /// A list of one or more tensors, under this name.
    List(&'static str),
}

/// An op's parameter: its name, kind, and the Elixir API's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// The name in the table, where a trailing `_` avoids a Rust keyword
    /// (`type_`); [`ParamSpec::name`] is the name without it.
    pub ident: &'static str,
    pub kind: ParamKind,
    pub default: Option<&'static str>,
}

impl ParamSpec {
    /// The parameter's name, as Elixir callers and error messages use it.
    pub fn name(&self) -> &'static str {
        self.ident.strip_suffix('_').unwrap_or(self.ident)
    }
}

/// The results of an op: one array (most ops, kept out of a `Vec`: this is
/// the hot path), or several.
#[derive(Debug)]
pub enum Outputs {
    One(Array),
    Many(Vec<Array>),
}

impl Outputs {
    /// The results as a list.
    pub fn into_vec(self) -> Vec<Array> {
        match self {
            Outputs::One(a) => vec![a],
            Outputs::Many(v) => v,
        }
    }
}

/// What an op's body returns, as its results.
pub trait IntoOutputs {
    fn into_outputs(self) -> Result<Outputs>;
}

impl<E: Into<Error>> IntoOutputs for std::result::Result<Array, E> {
    fn into_outputs(self) -> Result<Outputs> {
        Ok(Outputs::One(self.map_err(Into::into)?))
    }
}

impl<E: Into<Error>> IntoOutputs for std::result::Result<(Array, Array), E> {
    fn into_outputs(self) -> Result<Outputs> {
        let (a, b) = self.map_err(Into::into)?;
        Ok(Outputs::Many(vec![a, b]))
    }
}

impl<E: Into<Error>> IntoOutputs for std::result::Result<(Array, Array, Array), E> {
    fn into_outputs(self) -> Result<Outputs> {
        let (a, b, c) = self.map_err(Into::into)?;
        Ok(Outputs::Many(vec![a, b, c]))
    }
}

macro_rules! op_table {
    (
        $(
            $family:ident {
                $(
                    $(#[doc = $doc:literal])*
                    $name:ident (
                        $($input:ident),* $(.. $list:ident)?
                        $(; $( $(#[$pos:ident])? $param:ident : $kind:ident $(= $default:literal)? ),* )?
                    ) -> $rule:tt $([$($flag:ident),*])? => $body:expr;
                )*
            }
        )*
    ) => {
        /// Every op of the table.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub enum Op {
            $($($name,)*)*
        }

        impl Op {
            /// All ops, in table order.
            pub const ALL: &'static [Op] = &[$($(Op::$name,)*)*];

            /// The op's name (its Elixir function's name).
            pub fn name(self) -> &'static str {
                match self { $($(Op::$name => stringify!($name),)*)* }
            }

            /// The family (section of the table) the op belongs to.
            pub fn family(self) -> &'static str {
                match self { $($(Op::$name => stringify!($family),)*)* }
            }

            /// The op's tensor inputs.
            pub fn inputs(self) -> Inputs {
                match self {
                    $($(Op::$name => op_table!(@inputs [$($input),*] $($list)?),)*)*
                }
            }

            /// The op's parameters, in order.
            pub fn params(self) -> &'static [ParamSpec] {
                match self {
                    $($(Op::$name => &[$($(ParamSpec {
                        ident: stringify!($param),
                        kind: ParamKind::$kind,
                        default: op_table!(@default $($default)?),
                    },)*)?],)*)*
                }
            }

            /// The type rule of each result (one per result).
            pub fn results(self) -> &'static [DtypeRule] {
                match self { $($(Op::$name => op_table!(@rules $rule),)*)* }
            }

            /// The op's flags (`view`, `cpu`, `nx`).
            pub fn flags(self) -> &'static [&'static str] {
                match self { $($(Op::$name => &[$($(stringify!($flag),)*)?],)*)* }
            }

            /// [`Op::apply`] on this thread's stream.
            fn apply_on_stream(self, inputs: &[Array], params: Vec<Param>) -> Result<Outputs> {
                check_arity(self, inputs, &params)?;
                #[allow(unused_mut, unused_variables)]
                let mut params = params.into_iter();
                match self {
                    $($(Op::$name => {
                        op_table!(@bind inputs [$($input),*] $($list)?);
                        $($(
                            #[allow(unused_variables)]
                            let $param: super::params::kinds::$kind = FromParam::from_param(
                                stringify!($param),
                                params.next().ok_or_else(|| missing(stringify!($param)))?,
                            )?;
                        )*)?
                        IntoOutputs::into_outputs($body)
                    })*)*
                }
            }
        }
    };
    (@inputs [$($input:ident),*]) => { Inputs::Fixed(&[$(stringify!($input)),*]) };
    (@inputs [] $list:ident) => { Inputs::List(stringify!($list)) };
    (@bind $inputs:ident [$($input:ident),*]) => {
        #[allow(unused_variables)]
        let [$($input),*] = $inputs else {
            return Err(Error::Internal("wrong number of inputs".into()));
        };
    };
    (@bind $inputs:ident [] $list:ident) => { let $list: &[Array] = $inputs; };
    (@default) => { None };
    (@default $default:literal) => { Some($default) };
    (@rules [$($rule:ident),*]) => { &[$(op_table!(@rule $rule)),*] };
    (@rules $rule:ident) => { &[op_table!(@rule $rule)] };
    (@rule same) => { DtypeRule::Same };
    (@rule promote) => { DtypeRule::Promote };
    (@rule bool) => { DtypeRule::Bool };
    (@rule float) => { DtypeRule::Float };
    (@rule index) => { DtypeRule::Index };
    (@rule real) => { DtypeRule::Real };
    (@rule complex) => { DtypeRule::Complex };
    (@rule typed) => { DtypeRule::Typed };
    (@rule accumulate) => { DtypeRule::Accumulate };
    (@rule second) => { DtypeRule::Second };
}

pub(crate) use op_table;

pub(super) fn missing(name: &'static str) -> Error {
    Error::Internal(format!("parameter {name} is missing"))
}

/// The inputs and parameters match the op's signature (callers decode them
/// by it, so a mismatch is ExMLX's bug or a malformed program).
pub(super) fn check_arity(op: Op, inputs: &[Array], params: &[Param]) -> Result<()> {
    if op.takes_inputs(inputs.len()) && op.takes_params(params) {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "{}: got {} inputs and parameters of kinds {:?}",
            op.name(),
            inputs.len(),
            params.iter().map(|p| p.kind().name()).collect::<Vec<_>>()
        )))
    }
}
