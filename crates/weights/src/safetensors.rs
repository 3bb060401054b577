//! The safetensors header: `u64` little-endian length, then a JSON object
//! `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {…}}`, then the data.
//!
//! Parsed here rather than with the `safetensors` crate because its reader needs the whole file in
//! one buffer; Hearth reads the header alone, then each tensor's byte range.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{ByteSource, WeightsError};

/// Headers larger than this are refused before being read (the format's own limit is 100 MB).
const MAX_HEADER_BYTES: u64 = 100_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    U32,
    I16,
    U16,
    I8,
    U8,
    #[serde(rename = "BOOL")]
    Bool,
    #[serde(rename = "F8_E4M3")]
    F8E4M3,
    #[serde(rename = "F8_E5M2")]
    F8E5M2,
}

impl DType {
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool | DType::F8E4M3 | DType::F8E5M2 => 1,
        }
    }
}

/// One tensor's place in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Absolute byte offset of the first byte in the file.
    pub offset: u64,
    pub len: usize,
}

impl TensorInfo {
    pub fn element_count(&self) -> usize {
        self.shape.iter().product()
    }
}

#[derive(Debug, Clone)]
pub struct Header {
    pub tensors: BTreeMap<String, TensorInfo>,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawEntry {
    dtype: DType,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

impl Header {
    /// Reads and validates the header of `source` (not the tensors).
    pub fn read(source: &mut dyn ByteSource) -> Result<Self, WeightsError> {
        let file = source.name();
        let corrupt = |reason: String| WeightsError::Corrupt { file: file.clone(), reason };
        if source.len() < 8 {
            return Err(corrupt(format!("it is only {} bytes long", source.len())));
        }
        let header_len = u64::from_le_bytes(source.read_at(0, 8)?.try_into().unwrap_or([0; 8]));
        if header_len > MAX_HEADER_BYTES || header_len + 8 > source.len() {
            return Err(corrupt(format!("its header claims {header_len} bytes")));
        }
        let json = source.read_at(8, header_len as usize)?;
        let raw: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&json).map_err(|e| corrupt(format!("its header is not valid JSON ({e})")))?;

        let data_start = 8 + header_len;
        let mut metadata = BTreeMap::new();
        let mut tensors = BTreeMap::new();
        for (name, value) in raw {
            if name == "__metadata__" {
                metadata = serde_json::from_value(value).map_err(|e| corrupt(format!("bad __metadata__ ({e})")))?;
                continue;
            }
            let entry: RawEntry =
                serde_json::from_value(value).map_err(|e| corrupt(format!("bad entry for `{name}` ({e})")))?;
            let [begin, end] = entry.data_offsets;
            let expected = entry
                .shape
                .iter()
                .try_fold(entry.dtype.size_in_bytes(), |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| corrupt(format!("`{name}` has an impossible shape {:?}", entry.shape)))?;
            if end < begin || (end - begin) as usize != expected {
                return Err(corrupt(format!(
                    "`{name}` spans bytes {begin}..{end} but {:?} × {:?} needs {expected}",
                    entry.shape, entry.dtype
                )));
            }
            tensors.insert(
                name,
                TensorInfo { dtype: entry.dtype, shape: entry.shape, offset: data_start + begin, len: expected },
            );
        }

        // Tensors must tile the data section without overlapping.
        let mut spans: Vec<(u64, u64, &str)> =
            tensors.iter().map(|(n, t)| (t.offset, t.offset + t.len as u64, n.as_str())).collect();
        spans.sort();
        for pair in spans.windows(2) {
            if pair[1].0 < pair[0].1 {
                return Err(corrupt(format!("tensors `{}` and `{}` overlap", pair[0].2, pair[1].2)));
            }
        }
        let data_end = spans.last().map_or(data_start, |s| s.1);
        if data_end > source.len() {
            return Err(WeightsError::Truncated { file, expected: data_end, actual: source.len() });
        }
        Ok(Header { tensors, metadata })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::MemorySource;

    /// Builds a safetensors file from (name, dtype, shape, bytes).
    pub(crate) fn build(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        let mut data = Vec::new();
        for (name, dtype, shape, bytes) in tensors {
            let begin = data.len();
            data.extend_from_slice(bytes);
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
            );
        }
        let json = serde_json::to_vec(&header).unwrap();
        let mut file = (json.len() as u64).to_le_bytes().to_vec();
        file.extend(json);
        file.extend(data);
        file
    }

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn reads_offsets_shapes_and_dtypes() {
        let bytes =
            build(&[("a", "F32", vec![2, 2], f32_bytes(&[1.0, 2.0, 3.0, 4.0])), ("b", "BF16", vec![3], vec![0; 6])]);
        let header = Header::read(&mut MemorySource::new("t", bytes.clone())).unwrap();
        let a = &header.tensors["a"];
        assert_eq!((a.dtype, a.shape.clone(), a.len), (DType::F32, vec![2, 2], 16));
        assert_eq!(&bytes[a.offset as usize..a.offset as usize + 4], &1.0f32.to_le_bytes());
        assert_eq!(header.tensors["b"].dtype, DType::BF16);
    }

    #[test]
    fn truncated_file_is_reported_as_such() {
        let mut bytes = build(&[("a", "F32", vec![4], f32_bytes(&[1.0; 4]))]);
        bytes.truncate(bytes.len() - 3);
        let err = Header::read(&mut MemorySource::new("model.safetensors", bytes)).unwrap_err();
        assert!(matches!(err, WeightsError::Truncated { .. }), "{err}");
        assert!(err.to_string().contains("Download it again"));
    }

    #[test]
    fn corrupt_headers_are_rejected_with_a_reason() {
        let cases: Vec<Vec<u8>> = vec![
            vec![1, 2, 3],
            u64::MAX.to_le_bytes().to_vec(),
            [&10u64.to_le_bytes()[..], b"not json!!"].concat(),
            build(&[("a", "F32", vec![3], vec![0; 8])]),
        ];
        for bytes in cases {
            let err = Header::read(&mut MemorySource::new("m", bytes)).unwrap_err();
            assert!(matches!(err, WeightsError::Corrupt { .. }), "{err}");
        }
    }

    #[test]
    fn overlapping_tensors_are_rejected() {
        let json = br#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json);
        bytes.extend_from_slice(&[0; 6]);
        let err = Header::read(&mut MemorySource::new("m", bytes)).unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
    }
}
