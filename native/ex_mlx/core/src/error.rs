//! The one error type of ExMLX's native side.
//!
//! The NIF hands every error to Elixir as `{kind, message}`, `kind` being
//! [`Error::kind`] (`:mlx`, `:argument`, `:type`, `:device`,
//! `:out_of_memory`, `:internal`, `:cancelled`, `:distributed`, or a
//! wire-format defect);
//! `ExMLX.Error` turns it into an exception whose message a person can act on.

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
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

    /// A tensor that would take active memory past the memory limit.
    #[error("{0}")]
    OutOfMemory(String),

    /// A bug in ExMLX (e.g. a caught panic); the message says where.
    #[error("{0}")]
    Internal(String),

    /// Work stopped because nobody waits for it any more (a compiled
    /// program's loop whose caller exited).
    #[error("{0}")]
    Cancelled(String),

    /// A distributed call that failed: a backend that is missing or could
    /// not start, a peer that was lost (MLX's message), or calls refused
    /// after an earlier one timed out (`crate::distributed`).
    #[error("{0}")]
    Distributed(String),

    /// Malformed wire-format input; the kind names the defect (`bad_magic`, ...).
    #[error("{0}")]
    Wire(#[from] WireError),
}

pub type Result<T> = std::result::Result<T, Error>;

/// A wire-format decoding error (see [`crate::wire`]): a stable kind (an
/// atom on the Elixir side) and a message. It lives here, with the other
/// errors, so that this module depends on no other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WireError {
    pub kind: &'static str,
    pub message: String,
}

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
            Error::OutOfMemory(_) => "out_of_memory",
            Error::Internal(_) => "internal",
            Error::Cancelled(_) => "cancelled",
            Error::Distributed(_) => "distributed",
            Error::Wire(e) => e.kind,
        }
    }
}

impl From<mlx_rs::error::Exception> for Error {
    fn from(e: mlx_rs::error::Exception) -> Self {
        Error::Mlx(strip_source_location(e.what()).to_string())
    }
}

/// mlx-c appends " at <source file>:<line>" to MLX's messages; that names a
/// file of the build machine, not anything the caller can act on.
pub(crate) fn strip_source_location(message: &str) -> &str {
    match message.rfind(" at ") {
        Some(at) => {
            let tail = &message[at + 4..];
            let is_location = tail.rsplit_once(':').is_some_and(|(file, line)| {
                (file.ends_with(".cpp") || file.ends_with(".h"))
                    && !line.is_empty()
                    && line.bytes().all(|b| b.is_ascii_digit())
            });
            if is_location {
                message[..at].trim_end()
            } else {
                message
            }
        }
        None => message,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlx_source_locations_are_dropped() {
        assert_eq!(
            strip_source_location("[broadcast_shapes] Shapes (2,3) and (2) cannot be broadcast. at /x/mlx-c/mlx/c/ops.cpp:31"),
            "[broadcast_shapes] Shapes (2,3) and (2) cannot be broadcast."
        );
        assert_eq!(strip_source_location("look at me"), "look at me");
        assert_eq!(strip_source_location("plain"), "plain");
    }

    #[test]
    fn argument_errors_name_the_argument() {
        let e = Error::arg("shape", "dimension 1 is negative (-3)");
        assert_eq!(e.kind(), "argument");
        assert_eq!(e.to_string(), "shape: dimension 1 is negative (-3)");
    }
}
