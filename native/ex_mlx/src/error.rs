//! The one error type of the NIF, and how it reaches Elixir.
//!
//! Every error becomes `{kind, message}` with `kind` an atom (`:mlx`,
//! `:argument`, `:type`, `:device`, `:internal`); `ExMLX.Error` turns it into an
//! exception whose message a person can act on.

use rustler::{Encoder, Env, Term};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// MLX raised an exception (its own message, unchanged).
    #[error("{0}")]
    Mlx(String),

    /// A bad argument: which one, and what is wrong with it.
    #[error("{name}: {message}")]
    Argument { name: &'static str, message: String },

    /// A type MLX (or ExMLX) cannot represent, or one that does not fit the operation.
    #[error("{0}")]
    Type(String),

    /// A device that is missing, or tensors on different devices.
    #[error("{0}")]
    Device(String),

    /// A bug in ExMLX (e.g. a caught panic); the message says where.
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Shorthand for [`Error::Argument`].
    pub fn arg(name: &'static str, message: impl Into<String>) -> Self {
        Error::Argument {
            name,
            message: message.into(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Error::Mlx(_) => "mlx",
            Error::Argument { .. } => "argument",
            Error::Type(_) => "type",
            Error::Device(_) => "device",
            Error::Internal(_) => "internal",
        }
    }
}

impl From<mlx_rs::error::Exception> for Error {
    fn from(e: mlx_rs::error::Exception) -> Self {
        Error::Mlx(e.what().to_string())
    }
}

impl From<mlx_rs::error::AsSliceError> for Error {
    fn from(e: mlx_rs::error::AsSliceError) -> Self {
        match e {
            mlx_rs::error::AsSliceError::Exception(e) => e.into(),
            other => Error::Internal(format!("reading array data: {other}")),
        }
    }
}

impl Encoder for Error {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let kind = rustler::Atom::from_str(env, self.kind())
            .map(|a| a.encode(env))
            .unwrap_or_else(|_| "internal".encode(env));
        (kind, self.to_string()).encode(env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_errors_name_the_argument() {
        let e = Error::arg("shape", "dimension 1 is negative (-3)");
        assert_eq!(e.kind(), "argument");
        assert_eq!(e.to_string(), "shape: dimension 1 is negative (-3)");
    }
}
