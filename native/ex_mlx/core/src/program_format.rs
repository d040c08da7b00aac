//! The program format (docs/program-format.md): a compiled program as bytes,
//! written by `ExMLX.ProgramFormat` in Elixir and read here. Ops are named
//! by their op-table names and parameters carry their op-table kinds, so
//! the reader checks every instruction against the table it was built with.
//!
//! The reader distrusts its input: every count and length is checked
//! against the bytes present before anything is allocated, the CRC-32 of
//! the whole is checked first, and the result is checked as any program is
//! ([`Program::new`]). Errors name the byte offset or the instruction.

use mlx_rs::Dtype;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::creation::Scalar;
use crate::ops::params::{Param, ParamKind};
use crate::ops::table::Op;
use crate::program::{Block, Branch, Instruction, Loop, OpCall, Program, MAX_DEPTH};
use crate::wire;

pub const MAGIC: &[u8; 8] = b"EXMLXPRG";
pub const VERSION: u16 = 2;

/// The kinds in the order of their tags in the format.
pub const KIND_TAGS: &[ParamKind] = &[
    ParamKind::Int,
    ParamKind::OptInt,
    ParamKind::Ints,
    ParamKind::OptInts,
    ParamKind::Bool,
    ParamKind::Float,
    ParamKind::Type,
    ParamKind::Shape,
    ParamKind::OptPairs,
    ParamKind::PadConfig,
    ParamKind::Scalar,
    ParamKind::Device,
    ParamKind::Direction,
    ParamKind::Triangular,
    ParamKind::Str,
];

/// A constant of a program: element type, shape and data (from its frame).
#[derive(Debug)]
pub struct Constant {
    pub dtype: Dtype,
    pub shape: Vec<i32>,
    pub data: Vec<u8>,
}

/// What a program's bytes hold.
#[derive(Debug)]
pub struct Decoded {
    pub device: Device,
    pub program: Program,
    pub constants: Vec<Constant>,
}

fn bad(message: impl Into<String>) -> Error {
    Error::arg("program", message)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.at..end];
                self.at = end;
                Ok(out)
            }
            None => Err(bad(format!(
                "truncated: {what} at byte {} needs {n} bytes, {} are left",
                self.at,
                self.bytes.len() - self.at
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A count of items of at least `item_bytes` each, checked against the
    /// bytes left before anything is allocated for them.
    fn count(&mut self, what: &str, item_bytes: usize) -> Result<usize> {
        let n = self.u32(what)? as usize;
        let left = self.bytes.len() - self.at;
        if n.saturating_mul(item_bytes.max(1)) > left {
            return Err(bad(format!(
                "{what} at byte {} says {n}, more than the {left} bytes left can hold",
                self.at - 4
            )));
        }
        Ok(n)
    }

    fn flag(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(bad(format!(
                "{what} at byte {} is {other}, not 0 or 1",
                self.at - 1
            ))),
        }
    }

    fn ints(&mut self, what: &str) -> Result<Vec<i64>> {
        let n = self.count(what, 8)?;
        (0..n).map(|_| self.i64(what)).collect()
    }

    /// A type as its Elixir name: the kind's length and text, then the bits
    /// (`f` 32, `bool` 8), looked up in the type table (`crate::dtype`).
    fn dtype(&mut self, what: &str) -> Result<Dtype> {
        let n = self.u8(what)? as usize;
        let kind = std::str::from_utf8(self.take(n, what)?)
            .map_err(|_| bad(format!("{what}: a type name is not UTF-8")))?;
        let bits = self.u8(what)?;
        crate::dtype::from_name(kind, u32::from(bits)).map_err(|e| bad(format!("{what}: {e}")))
    }

    fn param(&mut self, kind: ParamKind) -> Result<Param> {
        let tag = self.u8("parameter kind")?;
        match KIND_TAGS.get(tag as usize) {
            Some(&k) if k == kind => {}
            _ => {
                return Err(bad(format!(
                    "parameter kind {tag} at byte {}, the op table says {}",
                    self.at - 1,
                    kind.name()
                )))
            }
        }
        let w = "parameter";
        Ok(match kind {
            ParamKind::Int => Param::Int(self.i64(w)?),
            ParamKind::OptInt => Param::OptInt(if self.flag(w)? {
                Some(self.i64(w)?)
            } else {
                None
            }),
            ParamKind::Ints => Param::Ints(self.ints(w)?),
            ParamKind::OptInts => Param::OptInts(if self.flag(w)? {
                Some(self.ints(w)?)
            } else {
                None
            }),
            ParamKind::Bool => Param::Bool(self.flag(w)?),
            ParamKind::Float => Param::Float(self.f64(w)?),
            ParamKind::Type => Param::Type(self.dtype(w)?),
            ParamKind::Shape => {
                let dims = self.ints(w)?;
                Param::Shape(crate::host::check_shape("shape", &dims)?)
            }
            ParamKind::OptPairs => Param::OptPairs(if self.flag(w)? {
                let n = self.count(w, 16)?;
                Some(
                    (0..n)
                        .map(|_| Ok((self.i64(w)?, self.i64(w)?)))
                        .collect::<Result<_>>()?,
                )
            } else {
                None
            }),
            ParamKind::PadConfig => {
                let n = self.count(w, 24)?;
                Param::PadConfig(
                    (0..n)
                        .map(|_| Ok((self.i64(w)?, self.i64(w)?, self.i64(w)?)))
                        .collect::<Result<_>>()?,
                )
            }
            ParamKind::Scalar => Param::Scalar(match self.u8("scalar kind")? {
                0 => Scalar::Int(i128::from_le_bytes(self.array(w)?)),
                1 => Scalar::Float(self.f64(w)?),
                2 => Scalar::Complex(self.f64(w)?, self.f64(w)?),
                other => return Err(bad(format!("unknown scalar kind {other}"))),
            }),
            ParamKind::Device => Param::Device(match self.u8(w)? {
                0 => Device::Cpu,
                1 => Device::Gpu,
                other => return Err(bad(format!("unknown device {other}"))),
            }),
            ParamKind::Direction => Param::Direction(self.flag(w)?),
            ParamKind::Triangular => Param::Triangular(match self.u8(w)? {
                0 => None,
                1 => Some(false),
                2 => Some(true),
                other => return Err(bad(format!("unknown triangle {other}"))),
            }),
            ParamKind::Str => {
                let n = self.count(w, 1)?;
                let text = std::str::from_utf8(self.take(n, w)?)
                    .map_err(|_| bad("a string parameter is not UTF-8"))?;
                Param::Str(text.to_string())
            }
        })
    }
}

/// Reads blocks of instructions: ops (by their index in the program's op
/// names), loops and branches (version 2 and later; version 1 has ops only,
/// without a kind byte).
struct Blocks {
    ops: Vec<Op>,
    version: u16,
}

impl Blocks {
    fn block(&mut self, r: &mut Reader, place: &str, depth: usize) -> Result<Block> {
        if depth > MAX_DEPTH {
            return Err(bad(format!(
                "{place}: loops and branches nest deeper than {MAX_DEPTH}"
            )));
        }
        let count = r.count("instruction count", 8)?;
        let mut instructions = Vec::with_capacity(count);
        for i in 0..count {
            let kind = if self.version == 1 {
                0
            } else {
                r.u8("instruction kind")?
            };
            let place = format!("{place}: instruction {i}");
            instructions.push(match kind {
                0 => Instruction::Op(self.op(r, &place)?),
                1 => {
                    let initial = slots(r, "loop state")?;
                    let condition = self.block(r, &format!("{place} condition"), depth + 1)?;
                    let body = self.block(r, &format!("{place} body"), depth + 1)?;
                    Instruction::Loop(Loop::new(initial, condition, body))
                }
                2 => {
                    let n = r.count("clause count", 16)?;
                    let mut clauses = Vec::with_capacity(n);
                    for k in 0..n {
                        let here = format!("{place} clause {k}");
                        let pred = self.block(r, &format!("{here} predicate"), depth + 1)?;
                        let body = self.block(r, &here, depth + 1)?;
                        clauses.push((pred, body));
                    }
                    let last = self.block(r, &format!("{place} last clause"), depth + 1)?;
                    Instruction::Branch(Branch::new(clauses, last))
                }
                other => return Err(bad(format!("{place}: unknown instruction kind {other}"))),
            });
        }
        let outputs = slots(r, "output")?;
        Ok(Block {
            instructions,
            outputs,
        })
    }

    fn op(&mut self, r: &mut Reader, place: &str) -> Result<OpCall> {
        let index = r.u16("op index")? as usize;
        let op = *self
            .ops
            .get(index)
            .ok_or_else(|| bad(format!("{place}: op index {index} out of range")))?;
        let input_count = r.u16("input count")? as usize;
        let inputs = (0..input_count)
            .map(|_| Ok(r.u32("input slot")? as usize))
            .collect::<Result<Vec<_>>>()?;
        let param_count = r.u16("parameter count")? as usize;
        let specs = op.params();
        if param_count != specs.len() {
            return Err(bad(format!(
                "{place} ({}): {param_count} parameters, the op takes {}",
                op.name(),
                specs.len()
            )));
        }
        let params = specs
            .iter()
            .map(|spec| r.param(spec.kind))
            .collect::<Result<Vec<_>>>()?;
        let cast = if r.flag("cast")? {
            Some(r.dtype("cast")?)
        } else {
            None
        };
        let results = r.u8("result count")? as usize;
        Ok(OpCall::new(op, inputs, params, cast, results))
    }
}

/// A `u32` count, then as many `u32` slots.
fn slots(r: &mut Reader, what: &str) -> Result<Vec<usize>> {
    let n = r.count(&format!("{what} count"), 4)?;
    (0..n)
        .map(|_| Ok(r.u32(&format!("{what} slot"))? as usize))
        .collect()
}

/// Reads a program's bytes (see the module documentation).
pub fn decode(bytes: &[u8]) -> Result<Decoded> {
    if bytes.len() < MAGIC.len() + 4 + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not an ExMLX program (bad magic)"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(body) != stored {
        return Err(bad("checksum mismatch: the program's bytes are damaged"));
    }
    let mut r = Reader {
        bytes: body,
        at: MAGIC.len(),
    };
    let version = r.u16("version")?;
    if !(1..=VERSION).contains(&version) {
        return Err(bad(format!(
            "version {version}; this ExMLX reads versions 1 to {VERSION}"
        )));
    }
    let device = match r.u8("device")? {
        0 => Device::Cpu,
        1 => Device::Gpu,
        other => return Err(bad(format!("unknown device {other}"))),
    };
    let inputs = r.u32("input count")? as usize;

    let constant_count = r.count("constant count", 8)?;
    let mut constants = Vec::with_capacity(constant_count);
    for _ in 0..constant_count {
        let len = r.u32("constant length")? as usize;
        let frame = r.take(len, "constant frame")?;
        let constant = wire::decode_frame_with(frame, |f| -> Result<Constant> {
            Ok(Constant {
                dtype: f.dtype,
                shape: f.shape.clone(),
                data: f.data.to_vec(),
            })
        })?;
        constants.push(constant);
    }

    let name_count = r.count("op name count", 2)?;
    let mut ops = Vec::with_capacity(name_count);
    for _ in 0..name_count {
        let n = r.u16("op name length")? as usize;
        let name = std::str::from_utf8(r.take(n, "op name")?).unwrap_or("");
        ops.push(Op::from_name(name).ok_or_else(|| {
            bad(format!(
                "unknown op {name:?} (not in this ExMLX's op table)"
            ))
        })?);
    }

    let mut blocks = Blocks { ops, version };
    let main = blocks.block(&mut r, "program", 0)?;
    if r.at != body.len() {
        return Err(bad(format!(
            "{} bytes after the outputs",
            body.len() - r.at
        )));
    }
    let program = Program::new(inputs, constants.len(), main.instructions, main.outputs)?;
    Ok(Decoded {
        device,
        program,
        constants,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // A program by hand: out = x + 1 (constant 1 of f32), as version 1 of
    // the format says.
    fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&1u16.to_le_bytes());
        b.push(0); // cpu
        b.extend_from_slice(&1u32.to_le_bytes()); // one input
        let mut frame = vec![0u8; wire::header_len(0) + 4];
        wire::write_frame(&mut frame, Dtype::Float32, &[], &1.0f32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        b.extend_from_slice(&frame);
        b.extend_from_slice(&1u32.to_le_bytes()); // one op name
        b.extend_from_slice(&3u16.to_le_bytes());
        b.extend_from_slice(b"add");
        b.extend_from_slice(&1u32.to_le_bytes()); // one instruction
        b.extend_from_slice(&0u16.to_le_bytes()); // op 0
        b.extend_from_slice(&2u16.to_le_bytes()); // inputs 0, 1
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes()); // no parameters
        b.push(0); // no cast
        b.push(1); // one result
        b.extend_from_slice(&1u32.to_le_bytes()); // one output: slot 2
        b.extend_from_slice(&2u32.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    fn u32s(b: &mut Vec<u8>, values: &[u32]) {
        for v in values {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }

    // Version 2 by hand: while x < 10 { x = x + 3 }, x an s32 input and 10,
    // 3 constants: slots 0 (x), 1 (10), 2 (3); state 3; condition 4; body
    // 5; result 6.
    fn looping() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&2u16.to_le_bytes());
        b.push(0);
        u32s(&mut b, &[1, 2]); // one input, two constants
        for c in [10i32, 3] {
            let mut frame = vec![0u8; wire::header_len(0) + 4];
            wire::write_frame(&mut frame, Dtype::Int32, &[], &c.to_le_bytes());
            u32s(&mut b, &[frame.len() as u32]);
            b.extend_from_slice(&frame);
        }
        u32s(&mut b, &[2]); // op names
        for name in ["less", "add"] {
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
        }
        let op = |b: &mut Vec<u8>, index: u16, a: u32, c: u32| {
            b.push(0);
            b.extend_from_slice(&index.to_le_bytes());
            b.extend_from_slice(&2u16.to_le_bytes());
            u32s(b, &[a, c]);
            b.extend_from_slice(&0u16.to_le_bytes());
            b.extend_from_slice(&[0, 1]);
        };
        u32s(&mut b, &[1]); // main: one instruction, a loop
        b.push(1);
        u32s(&mut b, &[1, 0]); // state from slot 0
        u32s(&mut b, &[1]); // condition: less(3, 1) -> 4
        op(&mut b, 0, 3, 1);
        u32s(&mut b, &[1, 4]);
        u32s(&mut b, &[1]); // body: add(3, 2) -> 5
        op(&mut b, 1, 3, 2);
        u32s(&mut b, &[1, 5]);
        u32s(&mut b, &[1, 6]); // main's output: the loop's result
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn reads_loops_in_version_2() {
        use crate::worker::run_blocking;
        use mlx_rs::Array;
        let decoded = decode(&looping()).unwrap();
        let out = run_blocking(Device::Cpu, move || {
            let constants = [10, 3].iter().map(|&c| Array::from_int(c)).collect();
            let out = decoded.program.run(vec![Array::from_int(1)], constants)?;
            Ok(out[0].as_slice::<i32>()[0])
        })
        .unwrap();
        assert_eq!(out, 10); // 1, 4, 7, 10
        damage(&looping());
    }

    /// Every truncation of `good` is refused, and every single-byte change:
    /// the checksum catches those; with the checksum fixed up, the parser
    /// must not panic.
    fn damage(good: &[u8]) {
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "truncated to {len}");
        }
        for at in 0..good.len() - 4 {
            for delta in [1u8, 0x80, 0xFF] {
                let mut bytes = good.to_vec();
                bytes[at] = bytes[at].wrapping_add(delta);
                assert!(decode(&bytes).is_err(), "byte {at} changed");
                let n = bytes.len() - 4;
                let crc = crc32fast::hash(&bytes[..n]);
                bytes[n..].copy_from_slice(&crc.to_le_bytes());
                let _ = decode(&bytes);
            }
        }
    }

    #[test]
    fn reads_a_program_written_by_hand() {
        let decoded = decode(&sample()).unwrap();
        assert_eq!(decoded.device, Device::Cpu);
        assert_eq!(decoded.program.inputs(), 1);
        assert_eq!(decoded.constants.len(), 1);
        assert_eq!(decoded.constants[0].data, 1.0f32.to_le_bytes().to_vec());
    }

    #[test]
    fn damaged_bytes_are_errors_never_panics() {
        damage(&sample());
        let e = decode(b"EXMLXPRG\x03\x00garbage!").unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
    }
}
