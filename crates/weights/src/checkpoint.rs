//! A model's weights: one `model.safetensors`, or shards listed by `model.safetensors.index.json`.
//! Tensors are read one at a time and converted to f32 on the host.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use half::{bf16, f16};
use serde::Deserialize;

use crate::safetensors::{DType, Header, TensorInfo};
use crate::{ByteSource, FileSource, WeightsError};

/// A tensor on the host, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

pub struct Checkpoint {
    files: Vec<(Box<dyn ByteSource>, Header)>,
    /// Tensor name → index into `files`.
    location: BTreeMap<String, usize>,
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

impl Checkpoint {
    /// Opens the weights in a model folder (headers only).
    pub fn open_dir(dir: &Path) -> Result<Self, WeightsError> {
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        if single.is_file() {
            return Self::from_sources(vec![Box::new(FileSource::open(&single)?)]);
        }
        if !index.is_file() {
            return Err(WeightsError::NoWeights { path: dir.to_path_buf() });
        }
        let text =
            std::fs::read_to_string(&index).map_err(|source| WeightsError::Io { path: index.clone(), source })?;
        let parsed: ShardIndex = serde_json::from_str(&text)
            .map_err(|e| WeightsError::Corrupt { file: index.display().to_string(), reason: e.to_string() })?;
        let shards: BTreeSet<&String> = parsed.weight_map.values().collect();
        let mut sources: Vec<Box<dyn ByteSource>> = Vec::new();
        for shard in shards {
            sources.push(Box::new(FileSource::open(&dir.join(shard))?));
        }
        let checkpoint = Self::from_sources(sources)?;
        for name in parsed.weight_map.keys() {
            if !checkpoint.location.contains_key(name) {
                return Err(WeightsError::Corrupt {
                    file: index.display().to_string(),
                    reason: format!("it lists `{name}` but no shard holds it"),
                });
            }
        }
        Ok(checkpoint)
    }

    /// A checkpoint over already-opened files (shards in any order).
    pub fn from_sources(sources: Vec<Box<dyn ByteSource>>) -> Result<Self, WeightsError> {
        let mut files = Vec::new();
        let mut location = BTreeMap::new();
        for mut source in sources {
            let header = Header::read(source.as_mut())?;
            for name in header.tensors.keys() {
                location.insert(name.clone(), files.len());
            }
            files.push((source, header));
        }
        Ok(Self { files, location })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.location.keys().map(String::as_str)
    }

    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.location.get(name).and_then(|&i| self.files[i].1.tensors.get(name))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.location.contains_key(name)
    }

    /// The raw bytes of one tensor, as stored.
    pub fn read_raw(&mut self, name: &str) -> Result<(TensorInfo, Vec<u8>), WeightsError> {
        let missing = || WeightsError::Missing { name: name.to_string() };
        let &file = self.location.get(name).ok_or_else(missing)?;
        let (source, header) = &mut self.files[file];
        let info = header.tensors.get(name).ok_or_else(missing)?.clone();
        let bytes = source.read_at(info.offset, info.len)?;
        Ok((info, bytes))
    }

    /// One tensor converted to f32 (from f32, f16 or bf16).
    pub fn read_f32(&mut self, name: &str) -> Result<HostTensor, WeightsError> {
        let (info, bytes) = self.read_raw(name)?;
        let data = match info.dtype {
            DType::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            DType::F16 => bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            DType::BF16 => bytes.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            dtype => return Err(WeightsError::UnsupportedDType { name: name.to_string(), dtype }),
        };
        Ok(HostTensor { shape: info.shape, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemorySource;
    use crate::safetensors::tests::build;

    #[test]
    fn converts_half_precision_to_f32() {
        let halves: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect();
        let brains: Vec<u8> = [0.25f32, 3.0].iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect();
        let file = build(&[("h", "F16", vec![2], halves), ("b", "BF16", vec![2], brains)]);
        let mut ckpt = Checkpoint::from_sources(vec![Box::new(MemorySource::new("m", file))]).unwrap();
        assert_eq!(ckpt.read_f32("h").unwrap().data, vec![1.5, -2.0]);
        assert_eq!(ckpt.read_f32("b").unwrap(), HostTensor { shape: vec![2], data: vec![0.25, 3.0] });
        assert!(matches!(ckpt.read_f32("nope"), Err(WeightsError::Missing { .. })));
    }

    #[test]
    fn shards_are_merged_and_the_index_is_checked() {
        let dir = std::env::temp_dir().join(format!("hearth-shards-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.safetensors"), build(&[("x", "F32", vec![1], 1f32.to_le_bytes().to_vec())]))
            .unwrap();
        std::fs::write(dir.join("b.safetensors"), build(&[("y", "F32", vec![1], 2f32.to_le_bytes().to_vec())]))
            .unwrap();
        let index = r#"{"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}"#;
        std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
        let mut ckpt = Checkpoint::open_dir(&dir).unwrap();
        assert_eq!(ckpt.names().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(ckpt.read_f32("y").unwrap().data, vec![2.0]);

        let wrong = r#"{"weight_map": {"x": "a.safetensors", "z": "b.safetensors"}}"#;
        std::fs::write(dir.join("model.safetensors.index.json"), wrong).unwrap();
        assert!(Checkpoint::open_dir(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
