//! Typed NIF arguments: rustler decoders for what ExMLX's NIFs take, so a
//! NIF declares `t: Tensor, type_: TypeArg` and gets checked values. A term
//! that does not decode makes the NIF return `{:error, {:argument, message}}`,
//! the message naming the argument (as the `term` decoders do), never a bare
//! `badarg`.

use ex_mlx_core::device::Device;
use ex_mlx_core::error::Error;
use ex_mlx_core::ops::table::Op;
use std::collections::HashMap;

use mlx_rs::Dtype;
use rustler::{Atom, Binary, Decoder, NifResult, Term};

use crate::tensor::{self, TensorRef};
use crate::term::{self, error_tuple};

/// The first argument of an asynchronous NIF: how the result is delivered
/// (`crate::reply` reads it).
#[derive(Clone, Copy)]
pub struct Tag<'a>(pub Term<'a>);

impl<'a> Decoder<'a> for Tag<'a> {
    fn decode(term: Term<'a>) -> NifResult<Self> {
        Ok(Tag(term))
    }
}

/// Declares a typed argument: its name in errors and its decoder.
macro_rules! typed_arg {
    ($(#[$doc:meta])* $name:ident($ty:ty) = $decode:expr, $arg:literal) => {
        $(#[$doc])*
        pub struct $name(pub $ty);

        impl<'a> Decoder<'a> for $name {
            fn decode(term: Term<'a>) -> NifResult<Self> {
                let decode: fn(&'static str, Term) -> Result<$ty, Error> = $decode;
                decode($arg, term).map($name).map_err(error_tuple)
            }
        }
    };
}

typed_arg!(
    /// A usable tensor (see [`tensor::decode`]).
    Tensor(TensorRef) = tensor::decode, "tensor"
);
typed_arg!(
    /// A tensor in any state (deallocated or failed too), for queries that
    /// report those themselves.
    AnyTensor(TensorRef) = tensor::decode_any, "tensor"
);
typed_arg!(
    /// An element type: `{:f, 32}`, `:bool`, ...
    TypeArg(Dtype) = term::decode_type, "type"
);
typed_arg!(
    /// A shape: a tuple of non-negative integers.
    ShapeArg(Vec<i32>) = term::decode_shape, "shape"
);
typed_arg!(
    /// `:cpu` or `:gpu`.
    DeviceArg(Device) = term::decode_device, "device"
);

/// A binary argument named `data`, `frame`, ... by `N` (see [`BinaryName`]).
pub struct Bytes<'a, N: BinaryName>(pub Binary<'a>, std::marker::PhantomData<N>);

/// The name a binary argument has in errors.
pub trait BinaryName {
    const NAME: &'static str;
}

/// Binary argument names.
pub mod names {
    macro_rules! binary_names {
        ($($ty:ident = $name:literal),*) => {
            $(pub struct $ty;
            impl super::BinaryName for $ty {
                const NAME: &'static str = $name;
            })*
        };
    }
    binary_names!(
        Data = "data",
        Frame = "frame",
        Json = "json",
        Prefix = "prefix",
        Source = "binary"
    );
}

impl<'a, N: BinaryName + 'a> Decoder<'a> for Bytes<'a, N> {
    fn decode(term: Term<'a>) -> NifResult<Self> {
        term::decode_binary(N::NAME, term)
            .map(|b| Bytes(b, std::marker::PhantomData))
            .map_err(error_tuple)
    }
}

/// The binary of `from_binary`: a tensor's elements.
pub type Data<'a> = Bytes<'a, names::Data>;
/// A wire-format frame.
pub type Frame<'a> = Bytes<'a, names::Frame>;

impl<'a, N: BinaryName> Bytes<'a, N> {
    pub fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An op of ex_mlx_core's op table, named by an atom.
pub struct OpArg(pub Op);

impl<'a> Decoder<'a> for OpArg {
    fn decode(term: Term<'a>) -> NifResult<Self> {
        op_of(term).map(OpArg).map_err(error_tuple)
    }
}

/// Hashes an atom by its term, which is unique to the atom: the hot path of
/// every op call looks its op up with it.
#[derive(Default)]
struct AtomHasher(u64);

impl std::hash::Hasher for AtomHasher {
    fn finish(&self) -> u64 {
        // (spread the bits: terms share their low tag bits)
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type AtomMap = HashMap<Atom, Op, std::hash::BuildHasherDefault<AtomHasher>>;

/// The op an atom names, looked up by the atom itself (no string is built)
/// in a map of every op's atom, made once.
pub fn op_of(term: Term) -> Result<Op, Error> {
    static ATOMS: std::sync::OnceLock<AtomMap> = std::sync::OnceLock::new();
    let unknown = || {
        Error::arg(
            "op",
            format!(
                "unknown op {} (ExMLX.Native.op_table/0 lists them)",
                term::show(term)
            ),
        )
    };
    let atom = term.decode::<Atom>().map_err(|_| unknown())?;
    let atoms = ATOMS.get_or_init(|| {
        Op::ALL
            .iter()
            .filter_map(|&op| {
                Atom::from_str(term.get_env(), op.name())
                    .ok()
                    .map(|a| (a, op))
            })
            .collect()
    });
    atoms.get(&atom).copied().ok_or_else(unknown)
}

/// Declares a NIF that copies data on the calling (normal) scheduler and
/// its twin on a dirty CPU scheduler: both call `$body(env, args..., max)`,
/// `max` being the most bytes the copy may take there (`$limit` on the
/// normal scheduler, unlimited on the dirty one).
#[macro_export]
macro_rules! at_once_and_dirty {
    (
        $(#[$doc:meta])*
        $normal:ident / $dirty:ident ($($arg:ident: $ty:ident $(<$lt:lifetime>)?),*)
            limit $limit:expr => $body:path
    ) => {
        $(#[$doc])*
        #[rustler::nif]
        fn $normal<'a>(
            env: rustler::Env<'a>,
            $($arg: $ty $(<$lt>)?),*
        ) -> rustler::NifResult<rustler::Term<'a>> {
            $body(env, $($arg,)* $limit)
        }

        /// The same on a dirty CPU scheduler, for data of any size.
        #[rustler::nif(schedule = "DirtyCpu")]
        fn $dirty<'a>(
            env: rustler::Env<'a>,
            $($arg: $ty $(<$lt>)?),*
        ) -> rustler::NifResult<rustler::Term<'a>> {
            $body(env, $($arg,)* usize::MAX)
        }
    };
}
