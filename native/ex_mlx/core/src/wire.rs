//! The wire format (docs/wire-format.md): frames for one tensor, bundles in
//! the safetensors layout. Pure byte handling; the NIF moves data in and out
//! of MLX.
//!
//! The decoders distrust their input: every size is checked against the bytes
//! actually present before anything is allocated.

pub use crate::error::WireError;
use mlx_rs::Dtype;

use crate::dtype::size_of;

/// The one dtype-code table: `(code, dtype, safetensors name)`. A test checks
/// it against the table in docs/wire-format.md.
pub const CODES: &[(u8, Dtype, &str)] = &[
    (1, Dtype::Bool, "BOOL"),
    (2, Dtype::Uint8, "U8"),
    (3, Dtype::Uint16, "U16"),
    (4, Dtype::Uint32, "U32"),
    (5, Dtype::Uint64, "U64"),
    (6, Dtype::Int8, "I8"),
    (7, Dtype::Int16, "I16"),
    (8, Dtype::Int32, "I32"),
    (9, Dtype::Int64, "I64"),
    (10, Dtype::Float16, "F16"),
    (11, Dtype::Bfloat16, "BF16"),
    (12, Dtype::Float32, "F32"),
    (13, Dtype::Float64, "F64"),
    (14, Dtype::Complex64, "C64"),
];

pub const MAGIC: &[u8; 4] = b"EXMX";
pub const VERSION: u8 = 1;
pub const MAX_RANK: usize = 32;
/// The largest bundle header ExMLX reads (safetensors uses the same bound).
pub const MAX_HEADER: u64 = 100_000_000;

fn fail<T>(kind: &'static str, message: impl Into<String>) -> Result<T, WireError> {
    Err(WireError {
        kind,
        message: message.into(),
    })
}

pub fn code_of(dtype: Dtype) -> u8 {
    CODES
        .iter()
        .find(|(_, d, _)| *d == dtype)
        .map(|(c, _, _)| *c)
        .unwrap_or(0)
}

pub fn dtype_of_code(code: u8) -> Option<Dtype> {
    CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, d, _)| *d)
}

pub fn safetensors_name(dtype: Dtype) -> &'static str {
    CODES
        .iter()
        .find(|(_, d, _)| *d == dtype)
        .map(|(_, _, n)| *n)
        .unwrap_or("?")
}

pub fn dtype_of_safetensors(name: &str) -> Option<Dtype> {
    CODES
        .iter()
        .find(|(_, _, n)| *n == name)
        .map(|(_, d, _)| *d)
}

// -----------------------------------------------------------------------------
// Frames
// -----------------------------------------------------------------------------

/// Size of a frame's header, checksum included, for rank `rank`.
pub fn header_len(rank: usize) -> usize {
    20 + 8 * rank
}

/// The header bytes before the checksum field.
pub fn frame_header(dtype: Dtype, shape: &[i32], data_len: usize) -> Vec<u8> {
    let mut header = Vec::with_capacity(header_len(shape.len()));
    header.extend_from_slice(MAGIC);
    header.push(VERSION);
    header.push(code_of(dtype));
    header.push(shape.len() as u8);
    header.push(0);
    for &d in shape {
        header.extend_from_slice(&(d as u64).to_le_bytes());
    }
    header.extend_from_slice(&(data_len as u64).to_le_bytes());
    header
}

/// CRC-32 of the header (before the checksum) followed by the data.
pub fn checksum(header: &[u8], data: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header);
    hasher.update(data);
    hasher.finalize()
}

/// Writes a complete frame into `out` (which must be exactly
/// `header_len(rank) + data.len()` bytes).
pub fn write_frame(out: &mut [u8], dtype: Dtype, shape: &[i32], data: &[u8]) {
    let header = frame_header(dtype, shape, data.len());
    let h = header.len();
    out[..h].copy_from_slice(&header);
    let body = &mut out[h + 4..];
    // Copy and checksum in one pass, a cache-sized chunk at a time: the CRC
    // reads each chunk while it is still in cache from the copy. (This beat
    // a second thread computing the CRC beside the copy at every size
    // measured: docs/decisions/0008-where-copies-run.md.)
    const CHUNK: usize = 128 * 1024;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header);
    for (dst, src) in body.chunks_mut(CHUNK).zip(data.chunks(CHUNK)) {
        dst.copy_from_slice(src);
        hasher.update(dst);
    }
    let crc = hasher.finalize();
    out[h..h + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A frame as a vector (tests and small tensors).
pub fn encode_frame(dtype: Dtype, shape: &[i32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; header_len(shape.len()) + data.len()];
    write_frame(&mut out, dtype, shape, data);
    out
}

/// A decoded frame, borrowing its data from the input.
#[derive(Debug, PartialEq)]
pub struct Frame<'a> {
    pub dtype: Dtype,
    pub shape: Vec<i32>,
    pub data: &'a [u8],
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Decodes a frame: every header field, the sizes, the CRC-32 and (for
/// `:bool`) the element values are checked before the data is handed out.
pub fn decode_frame(bytes: &[u8]) -> Result<Frame<'_>, WireError> {
    let (frame, crc) = parse_frame(bytes)?;
    check_frame(bytes, &frame, crc)?;
    Ok(frame)
}

/// Data sections from this size on are checksummed on a second thread while
/// `build` copies them. Below it, starting a thread costs more than it
/// saves, and checking first leaves the data in cache for the copy.
const CONCURRENT_CHECK_BYTES: usize = 16 << 20;

/// Decodes a frame and passes it to `build` (which typically copies the data
/// into an MLX array), checksumming the data meanwhile on a second thread
/// when it is large: the copy and the CRC then take the time of one pass.
/// `build`'s result is returned only if the frame is valid; otherwise it is
/// dropped and the decoding error returned, exactly as from [`decode_frame`].
pub fn decode_frame_with<T, E>(
    bytes: &[u8],
    build: impl FnOnce(&Frame<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<WireError>,
{
    let (frame, crc) = parse_frame(bytes)?;
    if frame.data.len() < CONCURRENT_CHECK_BYTES {
        check_frame(bytes, &frame, crc)?;
        return build(&frame);
    }
    let (checked, built) = std::thread::scope(|scope| {
        let checker = scope.spawn(|| check_frame(bytes, &frame, crc));
        let built = build(&frame);
        (checker.join(), built)
    });
    match checked {
        Ok(Ok(())) => built,
        Ok(Err(e)) => Err(e.into()),
        // check_frame does not panic; were it to, the frame counts as bad.
        Err(_) => Err(WireError {
            kind: "checksum_mismatch",
            message: "the checksum could not be computed".into(),
        }
        .into()),
    }
}

/// Where the CRC-32 sits in a frame's bytes.
struct CrcField {
    at: usize,
    stored: u32,
}

/// Checks the header and the sizes; the data is not read yet.
fn parse_frame(bytes: &[u8]) -> Result<(Frame<'_>, CrcField), WireError> {
    if bytes.len() < 4 || &bytes[..4] != MAGIC {
        return fail(
            "bad_magic",
            "not an ExMLX frame: it does not start with \"EXMX\"",
        );
    }
    if bytes.len() < 8 {
        return fail(
            "truncated",
            format!(
                "the frame ends after {} bytes, inside its header",
                bytes.len()
            ),
        );
    }
    if bytes[4] != VERSION {
        return fail(
            "unsupported_version",
            format!(
                "frame format version {} is not supported (this ExMLX reads version {VERSION})",
                bytes[4]
            ),
        );
    }
    let dtype = match dtype_of_code(bytes[5]) {
        Some(d) => d,
        None => {
            return fail(
                "unknown_dtype",
                format!("unknown data type code {}", bytes[5]),
            )
        }
    };
    let rank = bytes[6] as usize;
    if rank > MAX_RANK {
        return fail(
            "bad_rank",
            format!("rank {rank} is above the maximum of {MAX_RANK}"),
        );
    }
    if bytes[7] != 0 {
        return fail(
            "bad_rank",
            format!("the reserved byte is {}, not 0", bytes[7]),
        );
    }
    let header = header_len(rank);
    if bytes.len() < header {
        return fail(
            "truncated",
            format!(
                "the frame has {} bytes, its rank-{rank} header alone needs {header}",
                bytes.len()
            ),
        );
    }
    let mut shape = Vec::with_capacity(rank);
    let mut count: u64 = 1;
    for i in 0..rank {
        let d = read_u64(bytes, 8 + 8 * i);
        if d > i32::MAX as u64 {
            return fail(
                "size_overflow",
                format!(
                    "dimension {i} is {d}; MLX dimensions are at most {}",
                    i32::MAX
                ),
            );
        }
        count = match count.checked_mul(d) {
            Some(c) => c,
            None => return fail("size_overflow", "the dimensions' product overflows 64 bits"),
        };
        shape.push(d as i32);
    }
    let expected = match count.checked_mul(size_of(dtype) as u64) {
        Some(n) => n,
        None => return fail("size_overflow", "the data size overflows 64 bits"),
    };
    let data_len = read_u64(bytes, 8 + 8 * rank);
    if data_len != expected {
        return fail(
            "length_mismatch",
            format!("the header announces {data_len} data bytes, but the shape and type need {expected}"),
        );
    }
    let available = (bytes.len() - header) as u64;
    if available < data_len {
        return fail(
            "truncated",
            format!("the frame has {available} data bytes of {data_len}"),
        );
    }
    if available > data_len {
        return fail(
            "trailing_bytes",
            format!("{} bytes follow the frame's data", available - data_len),
        );
    }
    let at = header - 4;
    let stored = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let data = &bytes[header..];
    Ok((Frame { dtype, shape, data }, CrcField { at, stored }))
}

/// Checks the data of a parsed frame: its CRC-32 and, for `:bool`, that each
/// element is 0 or 1.
fn check_frame(bytes: &[u8], frame: &Frame<'_>, crc: CrcField) -> Result<(), WireError> {
    let CrcField { at, stored } = crc;
    let (dtype, data) = (frame.dtype, frame.data);
    let actual = checksum(&bytes[..at], data);
    if stored != actual {
        return fail(
            "checksum_mismatch",
            format!(
                "CRC-32 mismatch: the frame says {stored:#010x}, its bytes give {actual:#010x}"
            ),
        );
    }
    if dtype == Dtype::Bool {
        if let Some(at) = data.iter().position(|&b| b > 1) {
            return fail(
                "invalid_bool",
                format!("bool element {at} is {}, not 0 or 1", data[at]),
            );
        }
    }
    Ok(())
}

// -----------------------------------------------------------------------------
// Bundles (safetensors layout)
// -----------------------------------------------------------------------------

/// One tensor of a bundle: name, type, shape and its byte range in the data section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<i32>,
    pub begin: u64,
    pub end: u64,
}

/// The header of a bundle, with the data section's size already known
/// (`data_len`: the file size minus 8 minus the header length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleHeader {
    pub entries: Vec<Entry>,
    pub metadata: Vec<(String, String)>,
}

/// The header length from a bundle's first 8 bytes, checked against the
/// total size.
pub fn bundle_header_len(prefix: &[u8], total_len: u64) -> Result<u64, WireError> {
    if prefix.len() < 8 {
        return fail(
            "bad_header_length",
            "a bundle starts with an 8-byte header length",
        );
    }
    let h = read_u64(prefix, 0);
    if h > MAX_HEADER {
        return fail(
            "bad_header_length",
            format!("header length {h} is above the limit of {MAX_HEADER}"),
        );
    }
    if h > total_len.saturating_sub(8) {
        return fail(
            "bad_header_length",
            format!("header length {h} goes beyond the bundle's {total_len} bytes"),
        );
    }
    Ok(h)
}

/// Parses and checks a bundle's JSON header against a data section of
/// `data_len` bytes.
pub fn parse_bundle_header(json: &[u8], data_len: u64) -> Result<BundleHeader, WireError> {
    let value: serde_json::Value = match serde_json::from_slice(json) {
        Ok(v) => v,
        Err(e) => {
            return fail(
                "invalid_header",
                format!("the bundle header is not valid JSON: {e}"),
            )
        }
    };
    let object = match value.as_object() {
        Some(o) => o,
        None => return fail("invalid_header", "the bundle header is not a JSON object"),
    };
    let mut entries = Vec::new();
    let mut metadata = Vec::new();
    for (name, spec) in object {
        if name == "__metadata__" {
            let map = match spec.as_object() {
                Some(m) => m,
                None => return fail("invalid_header", "__metadata__ is not an object"),
            };
            for (k, v) in map {
                match v.as_str() {
                    Some(s) => metadata.push((k.clone(), s.to_string())),
                    None => {
                        return fail(
                            "invalid_header",
                            format!("metadata value of {k:?} is not a string"),
                        )
                    }
                }
            }
            continue;
        }
        let bad = |what: &str| WireError {
            kind: "invalid_header",
            message: format!("tensor {name:?}: {what}"),
        };
        let dtype_name = match spec.get("dtype").and_then(|d| d.as_str()) {
            Some(n) => n,
            None => return Err(bad("no \"dtype\" string")),
        };
        let dtype = match dtype_of_safetensors(dtype_name) {
            Some(d) => d,
            None => {
                return fail(
                    "unknown_dtype",
                    format!("tensor {name:?}: unknown dtype {dtype_name:?}"),
                )
            }
        };
        let shape_values = match spec.get("shape").and_then(|s| s.as_array()) {
            Some(s) => s,
            None => return Err(bad("no \"shape\" list")),
        };
        let mut shape = Vec::with_capacity(shape_values.len());
        let mut count: u64 = 1;
        for d in shape_values {
            let d = match d.as_u64() {
                Some(d) if d <= i32::MAX as u64 => d,
                _ => return Err(bad("a dimension is not an integer in 0..=2147483647")),
            };
            count = match count.checked_mul(d) {
                Some(c) => c,
                None => {
                    return fail(
                        "size_overflow",
                        format!("tensor {name:?}: the shape's size overflows"),
                    )
                }
            };
            shape.push(d as i32);
        }
        let offsets = match spec.get("data_offsets").and_then(|o| o.as_array()) {
            Some(o) if o.len() == 2 => o,
            _ => return Err(bad("\"data_offsets\" is not a [begin, end] pair")),
        };
        let (begin, end) = match (offsets[0].as_u64(), offsets[1].as_u64()) {
            (Some(b), Some(e)) => (b, e),
            _ => return Err(bad("offsets are not non-negative integers")),
        };
        if begin > end || end > data_len {
            return fail(
                "offsets_out_of_range",
                format!("tensor {name:?}: bytes {begin}..{end} are outside the data section (0..{data_len})"),
            );
        }
        let expected = count.checked_mul(size_of(dtype) as u64);
        if expected != Some(end - begin) {
            return fail(
                "length_mismatch",
                format!(
                    "tensor {name:?}: {} bytes for shape {:?} of {dtype_name}, which needs {}",
                    end - begin,
                    shape,
                    expected
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "more than 2^64".into())
                ),
            );
        }
        entries.push(Entry {
            name: name.clone(),
            dtype,
            shape,
            begin,
            end,
        });
    }
    let mut by_offset: Vec<&Entry> = entries.iter().filter(|e| e.end > e.begin).collect();
    by_offset.sort_by_key(|e| (e.begin, e.end));
    for pair in by_offset.windows(2) {
        if pair[1].begin < pair[0].end {
            return fail(
                "overlapping_offsets",
                format!(
                    "tensors {:?} and {:?} share bytes",
                    pair[0].name, pair[1].name
                ),
            );
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    metadata.sort();
    Ok(BundleHeader { entries, metadata })
}

/// A bundle header for tensors laid out in the given order, contiguously:
/// the 8-byte length followed by the JSON, padded with spaces to a multiple
/// of 8. Returns the bytes and each tensor's `(begin, end)`.
pub fn build_bundle_header(
    tensors: &[(String, Dtype, Vec<i32>)],
    metadata: &[(String, String)],
) -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut object = serde_json::Map::new();
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut at = 0u64;
    for (name, dtype, shape) in tensors {
        let len = shape.iter().map(|&d| d as u64).product::<u64>() * size_of(*dtype) as u64;
        offsets.push((at, at + len));
        object.insert(
            name.clone(),
            serde_json::json!({
                "dtype": safetensors_name(*dtype),
                "shape": shape,
                "data_offsets": [at, at + len],
            }),
        );
        at += len;
    }
    if !metadata.is_empty() {
        let meta: serde_json::Map<String, serde_json::Value> = metadata
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        object.insert("__metadata__".into(), serde_json::Value::Object(meta));
    }
    let mut json = serde_json::Value::Object(object).to_string().into_bytes();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    (out, offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_table_matches_the_spec() {
        let spec = include_str!("../../../../docs/wire-format.md");
        let mut rows = Vec::new();
        for line in spec.lines() {
            let cells: Vec<&str> = line.split('|').map(|c| c.trim()).collect();
            // | code | type | Nx name | safetensors | bytes | layout |
            if cells.len() >= 7 {
                if let Ok(code) = cells[1].parse::<u8>() {
                    rows.push((
                        code,
                        cells[2].to_string(),
                        cells[4].to_string(),
                        cells[5].parse::<usize>().ok(),
                    ));
                }
            }
        }
        assert_eq!(
            rows.len(),
            CODES.len(),
            "rows in the spec's table: {rows:?}"
        );
        for (code, dtype, st) in CODES {
            let row = rows
                .iter()
                .find(|r| r.0 == *code)
                .unwrap_or_else(|| panic!("code {code} missing from the spec"));
            let (kind, bits) = crate::dtype::name(*dtype);
            let short = if kind == "bool" {
                "bool".to_string()
            } else {
                format!("{kind}{bits}")
            };
            assert_eq!(row.1, short, "code {code}");
            assert_eq!(row.2, *st, "code {code}");
            assert_eq!(row.3, Some(size_of(*dtype)), "code {code}");
        }
    }

    fn sample() -> Vec<u8> {
        encode_frame(Dtype::Int16, &[2, 3], &[1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0])
    }

    #[test]
    fn frames_round_trip() {
        let bytes = sample();
        assert_eq!(bytes.len(), header_len(2) + 12);
        let frame = decode_frame(&bytes).unwrap();
        assert_eq!(frame.dtype, Dtype::Int16);
        assert_eq!(frame.shape, vec![2, 3]);
        assert_eq!(frame.data, &[1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0]);
        // the checksum is zlib's CRC-32 of header and data
        // rank 2: 32 header bytes, then the CRC, then the data
        let crc = u32::from_le_bytes(bytes[32..36].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(&[&bytes[..32], &bytes[36..]].concat()));
    }

    fn kind_of(bytes: &[u8]) -> &'static str {
        decode_frame(bytes).unwrap_err().kind
    }

    #[test]
    fn each_malformation_has_its_own_error() {
        let good = sample();
        // the error of a copy of `good` that `change` changed
        let changed = |change: fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            change(&mut b);
            kind_of(&b)
        };
        assert_eq!(changed(|b| b[0] = b'X'), "bad_magic");
        assert_eq!(kind_of(b"EX"), "bad_magic");
        assert_eq!(changed(|b| b[4] = 2), "unsupported_version");
        assert_eq!(changed(|b| b[5] = 99), "unknown_dtype");
        assert_eq!(changed(|b| b[6] = 33), "bad_rank");
        assert_eq!(changed(|b| b[7] = 1), "bad_rank");
        assert_eq!(kind_of(&good[..10]), "truncated");
        assert_eq!(kind_of(&good[..good.len() - 1]), "truncated");
        assert_eq!(changed(|b| b.push(0)), "trailing_bytes");
        assert_eq!(
            changed(|b| b[8..16].copy_from_slice(&u64::MAX.to_le_bytes())),
            "size_overflow"
        );
        assert_eq!(
            changed(|b| b[24..32].copy_from_slice(&13u64.to_le_bytes())),
            "length_mismatch"
        );
        assert_eq!(
            changed(|b| *b.last_mut().unwrap() ^= 1),
            "checksum_mismatch"
        );
        let bools = encode_frame(Dtype::Bool, &[2], &[1, 2]);
        assert_eq!(kind_of(&bools), "invalid_bool");
    }

    #[test]
    fn large_frames_are_checked_while_they_are_built() {
        // Above the size where the CRC runs on a second thread.
        let n = CONCURRENT_CHECK_BYTES + (1 << 20);
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 4096) as u8).collect();
        let good = encode_frame(Dtype::Uint8, &[n as i32], &data);
        // the CRC computed on the side equals zlib's CRC-32 of header and data
        let at = header_len(1) - 4;
        let crc = u32::from_le_bytes(good[at..at + 4].try_into().unwrap());
        assert_eq!(
            crc,
            crc32fast::hash(&[&good[..at], &good[at + 4..]].concat())
        );
        let copy = |f: &Frame<'_>| Ok::<_, WireError>(f.data.to_vec());
        assert_eq!(decode_frame_with(&good, copy).unwrap(), data);

        // one flipped bit anywhere in the data: refused, as by decode_frame
        for at in [header_len(1), good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            let mut built = false;
            let err = decode_frame_with(&bad, |f| {
                built = true;
                copy(f)
            })
            .unwrap_err();
            assert!(built, "the data is copied while the CRC runs");
            assert_eq!(err.kind, "checksum_mismatch");
            assert_eq!(err, decode_frame(&bad).unwrap_err());
        }

        // a large :bool frame with a 2 in its last element
        let mut flags = vec![1u8; n];
        flags[n - 1] = 2;
        let bools = encode_frame(Dtype::Bool, &[n as i32], &flags);
        assert_eq!(
            decode_frame_with(&bools, copy).unwrap_err().kind,
            "invalid_bool"
        );
        // header errors come before anything is built
        let mut b = good.clone();
        b[5] = 99;
        let err = decode_frame_with(&b, |_| -> Result<(), WireError> {
            panic!("built a frame with a bad header")
        });
        assert_eq!(err.unwrap_err().kind, "unknown_dtype");
    }

    #[test]
    fn a_huge_announced_size_allocates_nothing() {
        // rank 3 of 2^31-1 each: the product overflows before anything is read
        let mut b = encode_frame(Dtype::Uint8, &[1, 1, 1], &[7]);
        for i in 0..3 {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&(i32::MAX as u64).to_le_bytes());
        }
        assert!(matches!(kind_of(&b), "size_overflow" | "length_mismatch"));
    }

    #[test]
    fn bundles_round_trip_and_reject_bad_headers() {
        let tensors = vec![
            ("b".to_string(), Dtype::Float32, vec![2]),
            ("a".to_string(), Dtype::Uint8, vec![3]),
        ];
        let meta = vec![("format".to_string(), "pt".to_string())];
        let (header, offsets) = build_bundle_header(&tensors, &meta);
        assert_eq!(offsets, vec![(0, 8), (8, 11)]);
        let h = bundle_header_len(&header, header.len() as u64 + 11).unwrap();
        assert_eq!(h % 8, 0);
        let parsed = parse_bundle_header(&header[8..], 11).unwrap();
        assert_eq!(parsed.entries[0].name, "a");
        assert_eq!(parsed.entries[0].begin, 8);
        assert_eq!(parsed.metadata, meta);

        let kind =
            |json: &str, len: u64| parse_bundle_header(json.as_bytes(), len).unwrap_err().kind;
        assert_eq!(kind("{not json", 8), "invalid_header");
        assert_eq!(kind("[1, 2]", 8), "invalid_header");
        assert_eq!(
            kind(
                r#"{"x": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}"#,
                8
            ),
            "unknown_dtype"
        );
        assert_eq!(
            kind(
                r#"{"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 12]}}"#,
                8
            ),
            "offsets_out_of_range"
        );
        assert_eq!(
            kind(
                r#"{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}"#,
                8
            ),
            "length_mismatch"
        );
        assert_eq!(
            kind(
                r#"{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "y": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}"#,
                8
            ),
            "overlapping_offsets"
        );
        assert_eq!(
            bundle_header_len(&[1, 0, 0, 0, 0, 0, 0, 0], 8)
                .unwrap_err()
                .kind,
            "bad_header_length"
        );
        assert_eq!(
            bundle_header_len(&u64::MAX.to_le_bytes(), 1 << 40)
                .unwrap_err()
                .kind,
            "bad_header_length"
        );
    }

    /// Seeded mutation fuzzing of the frame and bundle decoders: they must
    /// return (never panic, never allocate past their input). Iterations come
    /// from EX_MLX_FUZZ_ITERATIONS (default 50,000).
    #[test]
    fn fuzz_decoders() {
        let iterations: u64 = std::env::var("EX_MLX_FUZZ_ITERATIONS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(50_000);
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds: Vec<Vec<u8>> = vec![
            sample(),
            encode_frame(Dtype::Float64, &[], &1.5f64.to_le_bytes()),
            encode_frame(Dtype::Bool, &[0, 4], &[]),
            encode_frame(Dtype::Complex64, &[1], &[0; 8]),
        ];
        let (bundle, _) = build_bundle_header(&[("t".into(), Dtype::Float32, vec![2])], &[]);
        let mut accepted = 0u64;
        for i in 0..iterations {
            let mut input = if i % 10 == 0 {
                // pure noise, sometimes with a valid magic
                let len = (next() % 64) as usize;
                let mut v: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                if next() % 2 == 0 && v.len() >= 4 {
                    v[..4].copy_from_slice(MAGIC);
                }
                v
            } else {
                seeds[(next() % seeds.len() as u64) as usize].clone()
            };
            // a few mutations: flip, overwrite with extremes, truncate, extend
            for _ in 0..(1 + next() % 4) {
                if input.is_empty() {
                    break;
                }
                let at = (next() % input.len() as u64) as usize;
                match next() % 5 {
                    0 => input[at] ^= 1 << (next() % 8),
                    1 => input[at] = [0u8, 1, 0x7F, 0x80, 0xFF][(next() % 5) as usize],
                    2 => input.truncate(at),
                    3 => input.extend((0..next() % 16).map(|_| next() as u8)),
                    _ => {
                        if input.len() >= at + 8 {
                            let v = [0u64, 1, u32::MAX as u64, i32::MAX as u64 + 1, u64::MAX]
                                [(next() % 5) as usize];
                            input[at..at + 8].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            if decode_frame(&input).is_ok() {
                accepted += 1;
            }
            // the bundle header parser on the mutated bytes as JSON, and its length check
            let _ = bundle_header_len(&input, input.len() as u64);
            let _ = parse_bundle_header(&input, next() % 1024);
            let mut b = bundle.clone();
            let at = (next() % b.len() as u64) as usize;
            b[at] = next() as u8;
            if let Ok(h) = bundle_header_len(&b, b.len() as u64 + 8) {
                let end = (8 + h as usize).min(b.len());
                let _ = parse_bundle_header(&b[8..end], 8);
            }
        }
        println!("fuzz_decoders: {iterations} inputs, {accepted} decoded as valid frames");
    }
}
