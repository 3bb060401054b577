//! GGUF, llama.cpp's single-file format (versions 2 and 3): header, metadata and tensor table
//! parsed and validated alone; each tensor's bytes are then read on demand and dequantized to f32.
//!
//! Layout, all little-endian:
//!
//! ```text
//! "GGUF"  u32 version  u64 tensor_count  u64 kv_count
//! kv_count × { string key, u32 value_type, value }           (metadata)
//! tensor_count × { string name, u32 n_dims, n_dims × u64 ne, u32 ggml_type, u64 offset }
//! padding to `general.alignment` (32 by default)
//! tensor data: each tensor at data_start + offset, offset a multiple of the alignment
//! ```
//!
//! A string is a u64 byte length and UTF-8 bytes; an array is a u32 element type, a u64 count and
//! the elements. **Dimensions are listed innermost first**: `ne[0]` is the contiguous one (ggml's
//! convention), so a matrix of `ne[1]` rows of `ne[0]` values is `[ne[1], ne[0]]` row-major.
//! [`GgufTensor::shape`] is that row-major shape (the reversed `ne`), the same convention as
//! safetensors and the rest of this crate: `token_embd.weight` with `ne = [640, 262144]` has shape
//! `[262144, 640]`, exactly Hugging Face's `embed_tokens.weight`. Quantized blocks run along
//! `ne[0]`, which must be a whole number of blocks.

use std::collections::BTreeMap;

use crate::quant::{GgmlType, dequantize};
use crate::{ByteSource, HostTensor, WeightsError};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
/// Arrays of arrays deeper than this are refused (real files nest at most once).
const MAX_NESTING: usize = 4;
/// Header bytes fetched from the source at a time.
const CHUNK: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{file} is not a GGUF file (it starts with {found:?}, not \"GGUF\")")]
    BadMagic { file: String, found: String },
    #[error("{file} is GGUF version {version}; Hearth reads versions 2 and 3")]
    UnsupportedVersion { file: String, version: u32 },
    #[error("{file} is truncated: it has {actual} bytes but {what} needs {expected}. Download it again.")]
    Truncated { file: String, what: String, expected: u64, actual: u64 },
    #[error("{file}: tensor `{name}` has ggml type {type_id}, which no ggml version defines. Is the file corrupt?")]
    UnknownType { file: String, name: String, type_id: u32 },
    #[error("{file}: tensor `{name}` has an impossible shape (ne = {ne:?}): {reason}")]
    BadShape { file: String, name: String, ne: Vec<u64>, reason: String },
    #[error("{file} is not a valid GGUF file: {reason}. Download it again.")]
    Corrupt { file: String, reason: String },
    #[error("tensor `{name}` is stored as {ggml_type}, which Hearth cannot dequantize yet")]
    UnsupportedType { name: String, ggml_type: GgmlType },
}

/// One metadata value. Arrays hold values of one type (possibly arrays themselves).
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<MetadataValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetadataValue {
    /// Any integer that is not negative.
    pub fn as_u64(&self) -> Option<u64> {
        use MetadataValue::*;
        match *self {
            U8(v) => Some(v.into()),
            U16(v) => Some(v.into()),
            U32(v) => Some(v.into()),
            U64(v) => Some(v),
            I8(v) => u64::try_from(v).ok(),
            I16(v) => u64::try_from(v).ok(),
            I32(v) => u64::try_from(v).ok(),
            I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_usize(&self) -> Option<usize> {
        self.as_u64().and_then(|v| usize::try_from(v).ok())
    }

    /// Any number.
    pub fn as_f64(&self) -> Option<f64> {
        use MetadataValue::*;
        match *self {
            F32(v) => Some(v.into()),
            F64(v) => Some(v),
            I8(v) => Some(v.into()),
            I16(v) => Some(v.into()),
            I32(v) => Some(v.into()),
            I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetadataValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetadataValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetadataValue]> {
        match self {
            MetadataValue::Array(values) => Some(values),
            _ => None,
        }
    }
}

/// One tensor's place in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensor {
    pub ggml_type: GgmlType,
    /// Dimensions as stored, innermost first.
    pub ne: Vec<u64>,
    /// Row-major shape: `ne` reversed.
    pub shape: Vec<usize>,
    /// Absolute byte offset of the first byte in the file.
    pub offset: u64,
    /// Bytes of data.
    pub len: usize,
}

impl GgufTensor {
    pub fn element_count(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The parsed header of a GGUF file (metadata and tensor table, not the tensors).
#[derive(Debug, Clone)]
pub struct GgufFile {
    pub version: u32,
    pub metadata: BTreeMap<String, MetadataValue>,
    pub tensors: BTreeMap<String, GgufTensor>,
    pub alignment: u64,
    /// Absolute offset where tensor data starts.
    pub data_offset: u64,
}

impl GgufFile {
    /// Whether `source` starts with the GGUF magic.
    pub fn sniff(source: &mut dyn ByteSource) -> bool {
        source.len() >= 4 && source.read_at(0, 4).is_ok_and(|b| b == MAGIC)
    }

    /// Reads and validates the header of `source` (not the tensor data).
    pub fn read(source: &mut dyn ByteSource) -> Result<Self, WeightsError> {
        let mut r = Reader::new(source);
        let file = r.file.clone();
        let magic = r.bytes(4, "the magic number")?.to_vec();
        if magic != MAGIC {
            let found = String::from_utf8_lossy(&magic).into_owned();
            return Err(GgufError::BadMagic { file, found }.into());
        }
        let version = r.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { file, version }.into());
        }
        let tensor_count = r.u64("the tensor count")?;
        let kv_count = r.u64("the metadata count")?;
        // A key-value pair takes at least 13 bytes and a tensor entry 24: refuse counts the file
        // cannot hold before allocating for them.
        r.check_count(kv_count, 13, "the metadata")?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let key = r.string("a metadata key")?;
            let value_type = r.u32("a metadata value type")?;
            let value = r.value(value_type, &key, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(r.corrupt(format!("metadata key `{key}` appears twice")));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(MetadataValue::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(other) => return Err(r.corrupt(format!("general.alignment is {other:?}, not a power of two"))),
        };

        r.check_count(tensor_count, 24, "the tensor table")?;
        let mut entries = Vec::new();
        for _ in 0..tensor_count {
            let name = r.string("a tensor name")?;
            let n_dims = r.u32("a tensor's dimension count")?;
            if n_dims > MAX_DIMS {
                return Err(GgufError::BadShape {
                    file,
                    name,
                    ne: Vec::new(),
                    reason: format!("{n_dims} dimensions, ggml has at most {MAX_DIMS}"),
                }
                .into());
            }
            let ne = (0..n_dims).map(|_| r.u64("a tensor dimension")).collect::<Result<Vec<_>, _>>()?;
            let type_id = r.u32("a tensor type")?;
            let offset = r.u64("a tensor offset")?;
            entries.push((name, ne, type_id, offset));
        }
        let data_offset = r.pos.next_multiple_of(alignment);
        let file_len = r.len;

        let mut tensors = BTreeMap::new();
        for (name, ne, type_id, offset) in entries {
            let Some(ggml_type) = GgmlType::from_id(type_id) else {
                return Err(GgufError::UnknownType { file, name, type_id }.into());
            };
            let bad_shape =
                |reason: String| GgufError::BadShape { file: file.clone(), name: name.clone(), ne: ne.clone(), reason };
            let (shape, len) = layout(&ne, ggml_type).map_err(bad_shape)?;
            if !offset.is_multiple_of(alignment) {
                return Err(r.corrupt(format!("tensor `{name}` starts at {offset}, not a multiple of {alignment}")));
            }
            let start = data_offset.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(len as u64));
            match (start, end) {
                (Some(start), Some(end)) if end <= file_len => {
                    let tensor = GgufTensor { ggml_type, ne, shape, offset: start, len };
                    if tensors.insert(name.clone(), tensor).is_some() {
                        return Err(r.corrupt(format!("tensor `{name}` appears twice")));
                    }
                }
                _ => {
                    return Err(GgufError::Truncated {
                        file,
                        what: format!("tensor `{name}`"),
                        expected: end.unwrap_or(u64::MAX),
                        actual: file_len,
                    }
                    .into());
                }
            }
        }

        let mut spans: Vec<(u64, u64, &str)> =
            tensors.iter().map(|(n, t)| (t.offset, t.offset + t.len as u64, n.as_str())).collect();
        spans.sort();
        for pair in spans.windows(2) {
            if pair[1].0 < pair[0].1 {
                return Err(r.corrupt(format!("tensors `{}` and `{}` overlap", pair[0].2, pair[1].2)));
            }
        }
        Ok(GgufFile { version, metadata, tensors, alignment, data_offset })
    }

    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata.get(key)
    }

    /// `general.architecture` (`gemma3`, `llama`, …).
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(MetadataValue::as_str)
    }

    /// Reads one tensor from `source` (the file this header came from) and dequantizes it.
    pub fn read_f32(&self, source: &mut dyn ByteSource, name: &str) -> Result<HostTensor, WeightsError> {
        let tensor = self.tensors.get(name).ok_or_else(|| WeightsError::Missing { name: name.to_string() })?;
        read_tensor_f32(source, name, tensor)
    }
}

pub(crate) fn read_tensor_f32(
    source: &mut dyn ByteSource,
    name: &str,
    tensor: &GgufTensor,
) -> Result<HostTensor, WeightsError> {
    if !tensor.ggml_type.can_dequantize() {
        return Err(GgufError::UnsupportedType { name: name.to_string(), ggml_type: tensor.ggml_type }.into());
    }
    let bytes = source.read_at(tensor.offset, tensor.len)?;
    let mut data = Vec::new();
    if !dequantize(tensor.ggml_type, &bytes, &mut data) || data.len() != tensor.element_count() {
        // Unreachable for a header that `read` validated: the length is whole blocks.
        return Err(GgufError::Corrupt {
            file: source.name(),
            reason: format!("tensor `{name}` has {} bytes, not whole {} blocks", bytes.len(), tensor.ggml_type),
        }
        .into());
    }
    Ok(HostTensor { shape: tensor.shape.clone(), data })
}

/// Row-major shape and byte length of a tensor, or why it cannot exist.
fn layout(ne: &[u64], ty: GgmlType) -> Result<(Vec<usize>, usize), String> {
    let (block, block_bytes) = ty.block_layout();
    let mut shape = Vec::with_capacity(ne.len());
    for &d in ne.iter().rev() {
        // ggml keeps dimensions as i64.
        let d = usize::try_from(d).ok().filter(|&d| d as u64 <= i64::MAX as u64);
        shape.push(d.ok_or("a dimension does not fit in 63 bits")?);
    }
    let elements = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or("the element count overflows")?;
    let row = ne.first().copied().unwrap_or(1) as usize;
    if !row.is_multiple_of(block) {
        return Err(format!("rows of {row} values are not whole {ty} blocks of {block}"));
    }
    let bytes = (elements / block).checked_mul(block_bytes).ok_or("the byte size overflows")?;
    Ok((shape, bytes))
}

/// A cursor over the header that fetches the source in chunks.
struct Reader<'a> {
    source: &'a mut dyn ByteSource,
    file: String,
    len: u64,
    pos: u64,
    buffer: Vec<u8>,
    buffer_start: u64,
}

impl<'a> Reader<'a> {
    fn new(source: &'a mut dyn ByteSource) -> Self {
        let (file, len) = (source.name(), source.len());
        Reader { source, file, len, pos: 0, buffer: Vec::new(), buffer_start: 0 }
    }

    fn corrupt(&self, reason: String) -> WeightsError {
        GgufError::Corrupt { file: self.file.clone(), reason }.into()
    }

    fn truncated(&self, what: &str, expected: u64) -> WeightsError {
        GgufError::Truncated { file: self.file.clone(), what: what.to_string(), expected, actual: self.len }.into()
    }

    /// `count` items of at least `min_size` bytes each must fit in the rest of the file.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<(), WeightsError> {
        let needed = count.checked_mul(min_size).and_then(|n| n.checked_add(self.pos));
        match needed {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(self.truncated(&format!("{what} ({count} entries)"), needed.unwrap_or(u64::MAX))),
        }
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<&[u8], WeightsError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| self.truncated(what, self.pos.saturating_add(n)))?;
        let buffered_end = self.buffer_start + self.buffer.len() as u64;
        if self.pos < self.buffer_start || end > buffered_end {
            let want = n.max(CHUNK).min(self.len - self.pos);
            self.buffer = match self.source.read_at(self.pos, want as usize) {
                // A source of fetched pieces (the browser's) may hold the header without the
                // read-ahead: ask for exactly what is needed, so it fetches no more than that.
                Err(WeightsError::NotFetched { .. }) if want > n => self.source.read_at(self.pos, n as usize)?,
                other => other?,
            };
            self.buffer_start = self.pos;
        }
        let start = (self.pos - self.buffer_start) as usize;
        self.pos = end;
        Ok(&self.buffer[start..start + n as usize])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WeightsError> {
        let bytes = self.bytes(N as u64, what)?;
        Ok(bytes.try_into().unwrap_or([0; N]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, WeightsError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, WeightsError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, WeightsError> {
        let len = self.u64(what)?;
        let bytes = self.bytes(len, what)?.to_vec();
        String::from_utf8(bytes).map_err(|_| self.corrupt(format!("{what} is not UTF-8")))
    }

    fn value(&mut self, value_type: u32, key: &str, depth: usize) -> Result<MetadataValue, WeightsError> {
        use MetadataValue as V;
        let what = format!("metadata `{key}`");
        Ok(match value_type {
            0 => V::U8(self.array::<1>(&what)?[0]),
            1 => V::I8(self.array::<1>(&what)?[0] as i8),
            2 => V::U16(u16::from_le_bytes(self.array(&what)?)),
            3 => V::I16(i16::from_le_bytes(self.array(&what)?)),
            4 => V::U32(u32::from_le_bytes(self.array(&what)?)),
            5 => V::I32(i32::from_le_bytes(self.array(&what)?)),
            6 => V::F32(f32::from_le_bytes(self.array(&what)?)),
            7 => match self.array::<1>(&what)?[0] {
                0 => V::Bool(false),
                1 => V::Bool(true),
                other => return Err(self.corrupt(format!("{what} is a bool of value {other}"))),
            },
            // Values are read leniently: a tokenizer piece that is not valid UTF-8 stays usable.
            8 => {
                let len = self.u64(&what)?;
                V::String(String::from_utf8_lossy(self.bytes(len, &what)?).into_owned())
            }
            9 => {
                if depth >= MAX_NESTING {
                    return Err(self.corrupt(format!("{what} nests arrays more than {MAX_NESTING} deep")));
                }
                let element_type = self.u32(&what)?;
                let count = self.u64(&what)?;
                let min_size = match element_type {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    other => return Err(self.corrupt(format!("{what} has elements of unknown type {other}"))),
                };
                self.check_count(count, min_size, &what)?;
                let mut values = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    values.push(self.value(element_type, key, depth + 1)?);
                }
                V::Array(values)
            }
            10 => V::U64(u64::from_le_bytes(self.array(&what)?)),
            11 => V::I64(i64::from_le_bytes(self.array(&what)?)),
            12 => V::F64(f64::from_le_bytes(self.array(&what)?)),
            other => return Err(self.corrupt(format!("{what} has unknown value type {other}"))),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::MemorySource;

    /// Builds a GGUF file: metadata as raw (key, type, value bytes), tensors as (name, ne, type, data).
    pub(crate) struct Builder {
        pub version: u32,
        pub alignment: u64,
        pub kvs: Vec<(String, u32, Vec<u8>)>,
        pub tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    }

    pub(crate) fn string_bytes(s: &str) -> Vec<u8> {
        [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat()
    }

    impl Builder {
        pub fn new() -> Self {
            Builder { version: 3, alignment: 32, kvs: Vec::new(), tensors: Vec::new() }
        }

        pub fn kv(mut self, key: &str, value_type: u32, value: Vec<u8>) -> Self {
            self.kvs.push((key.to_string(), value_type, value));
            self
        }

        pub fn tensor(mut self, name: &str, ne: Vec<u64>, ty: GgmlType, data: Vec<u8>) -> Self {
            let id = (0..64).find(|&i| GgmlType::from_id(i) == Some(ty)).expect("known type");
            self.tensors.push((name.to_string(), ne, id, data));
            self
        }

        pub fn build(&self) -> Vec<u8> {
            let mut out = b"GGUF".to_vec();
            out.extend(self.version.to_le_bytes());
            out.extend((self.tensors.len() as u64).to_le_bytes());
            out.extend((self.kvs.len() as u64).to_le_bytes());
            for (key, ty, value) in &self.kvs {
                out.extend(string_bytes(key));
                out.extend(ty.to_le_bytes());
                out.extend(value);
            }
            let mut offset = 0u64;
            let mut offsets = Vec::new();
            for (name, ne, ty, data) in &self.tensors {
                out.extend(string_bytes(name));
                out.extend((ne.len() as u32).to_le_bytes());
                ne.iter().for_each(|d| out.extend(d.to_le_bytes()));
                out.extend(ty.to_le_bytes());
                out.extend(offset.to_le_bytes());
                offsets.push(offset);
                offset = (offset + data.len() as u64).next_multiple_of(self.alignment);
            }
            out.resize((out.len() as u64).next_multiple_of(self.alignment) as usize, 0);
            let start = out.len();
            for ((_, _, _, data), offset) in self.tensors.iter().zip(offsets) {
                out.resize(start + offset as usize, 0);
                out.extend(data);
            }
            out
        }
    }

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    pub(crate) fn sample() -> Builder {
        let tokens: Vec<u8> =
            [&8u32.to_le_bytes()[..], &2u64.to_le_bytes(), &string_bytes("<a>"), &string_bytes("b")].concat();
        Builder::new()
            .kv("general.architecture", 8, string_bytes("gemma3"))
            .kv("gemma3.block_count", 4, 2u32.to_le_bytes().to_vec())
            .kv("gemma3.rope.freq_base", 6, 1e6f32.to_le_bytes().to_vec())
            .kv("tokenizer.ggml.tokens", 9, tokens)
            .kv("flag", 7, vec![1])
            .tensor("m", vec![3, 2], GgmlType::F32, f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
            .tensor("v", vec![2], GgmlType::F32, f32_bytes(&[7.0, 8.0]))
    }

    fn read(bytes: Vec<u8>) -> Result<GgufFile, WeightsError> {
        GgufFile::read(&mut MemorySource::new("t.gguf", bytes))
    }

    #[test]
    fn reads_metadata_and_row_major_shapes() {
        let bytes = sample().build();
        let file = read(bytes.clone()).unwrap();
        assert_eq!(file.version, 3);
        assert_eq!(file.architecture(), Some("gemma3"));
        assert_eq!(file.get("gemma3.block_count").and_then(MetadataValue::as_u64), Some(2));
        assert_eq!(file.get("gemma3.rope.freq_base").and_then(MetadataValue::as_f64), Some(1e6));
        assert_eq!(file.get("flag").and_then(MetadataValue::as_bool), Some(true));
        let tokens = file.get("tokenizer.ggml.tokens").and_then(MetadataValue::as_array).unwrap();
        assert_eq!(tokens.iter().filter_map(MetadataValue::as_str).collect::<Vec<_>>(), ["<a>", "b"]);
        let m = &file.tensors["m"];
        assert_eq!((m.ne.clone(), m.shape.clone()), (vec![3, 2], vec![2, 3]));
        assert_eq!(m.offset % 32, 0);
        let mut source = MemorySource::new("t.gguf", bytes);
        let t = file.read_f32(&mut source, "m").unwrap();
        assert_eq!(t, HostTensor { shape: vec![2, 3], data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0] });
        assert_eq!(file.read_f32(&mut source, "v").unwrap().data, vec![7.0, 8.0]);
        assert!(matches!(file.read_f32(&mut source, "x"), Err(WeightsError::Missing { .. })));
    }

    fn gguf_error(result: Result<GgufFile, WeightsError>) -> GgufError {
        match result {
            Err(WeightsError::Gguf(e)) => e,
            other => panic!("expected a GGUF error, got {other:?}"),
        }
    }

    #[test]
    fn bad_files_get_typed_errors() {
        let mut bytes = sample().build();
        bytes[0] = b'X';
        assert!(matches!(gguf_error(read(bytes)), GgufError::BadMagic { .. }));

        let mut old = sample();
        old.version = 1;
        let err = gguf_error(read(old.build()));
        assert!(matches!(err, GgufError::UnsupportedVersion { version: 1, .. }), "{err}");

        let mut bytes = sample().build();
        bytes.truncate(bytes.len() - 1);
        let err = gguf_error(read(bytes));
        assert!(matches!(err, GgufError::Truncated { .. }), "{err}");
        assert!(err.to_string().contains("Download it again"));

        let mut unknown = sample();
        unknown.tensors[1].2 = 4;
        assert!(matches!(gguf_error(read(unknown.build())), GgufError::UnknownType { type_id: 4, .. }));

        let huge = sample().tensor("h", vec![u64::MAX / 2, 4], GgmlType::F32, vec![]);
        assert!(matches!(gguf_error(read(huge.build())), GgufError::BadShape { .. }));
        let partial_block = sample().tensor("q", vec![16], GgmlType::Q8_0, vec![0; 34]);
        assert!(matches!(gguf_error(read(partial_block.build())), GgufError::BadShape { .. }));

        let alignment = sample().kv("general.alignment", 4, 3u32.to_le_bytes().to_vec());
        assert!(matches!(gguf_error(read(alignment.build())), GgufError::Corrupt { .. }));
        let duplicate = sample().kv("flag", 7, vec![0]);
        assert!(matches!(gguf_error(read(duplicate.build())), GgufError::Corrupt { .. }));
        let counts = sample().kv("many", 9, [&4u32.to_le_bytes()[..], &u64::MAX.to_le_bytes()].concat());
        assert!(matches!(gguf_error(read(counts.build())), GgufError::Truncated { .. }));
    }

    #[test]
    fn unsupported_types_are_named_when_read() {
        let bytes = sample().tensor("iq", vec![256], GgmlType::Iq2Xxs, vec![0; 66]).build();
        let file = read(bytes.clone()).unwrap();
        let err = file.read_f32(&mut MemorySource::new("t", bytes), "iq").unwrap_err();
        assert!(err.to_string().contains("IQ2_XXS"), "{err}");
    }

    /// Random byte flips, truncations and splices of a valid file never panic: they parse or fail
    /// with an error, and whatever parses reads its tensors without panicking.
    #[test]
    fn random_mutations_never_panic() {
        let original = sample()
            .tensor("q", vec![64], GgmlType::Q8_0, vec![1; 68])
            .tensor("k", vec![256], GgmlType::Q4K, vec![3; 144])
            .build();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..3000 {
            let mut bytes = original.clone();
            match next() % 4 {
                0 => {
                    for _ in 0..1 + next() % 4 {
                        let i = (next() % bytes.len() as u64) as usize;
                        bytes[i] = next() as u8;
                    }
                }
                1 => bytes.truncate((next() % bytes.len() as u64) as usize),
                2 => {
                    // An extreme value in a length or count field.
                    let i = (next() % (bytes.len() as u64 - 8)) as usize;
                    let v = [u64::MAX, u64::MAX / 2, 1 << 40, 0][(next() % 4) as usize];
                    bytes[i..i + 8].copy_from_slice(&v.to_le_bytes());
                }
                _ => {
                    let i = (next() % bytes.len() as u64) as usize;
                    let extra: Vec<u8> = (0..next() % 40).map(|_| next() as u8).collect();
                    bytes.splice(i..i, extra);
                }
            }
            if let Ok(file) = read(bytes.clone()) {
                let mut source = MemorySource::new("t", bytes);
                for name in file.tensors.keys() {
                    let _ = file.read_f32(&mut source, name);
                }
            }
        }
    }
}
