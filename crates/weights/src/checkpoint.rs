//! A model's weights: one `model.safetensors`, shards listed by `model.safetensors.index.json`, or
//! one GGUF file. Tensors are read one at a time, by their Hugging Face names, and converted to f32
//! on the host.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

use half::{bf16, f16};
use serde::Deserialize;

use crate::gguf::{GgufFile, GgufTensor, read_tensor_f32};
use crate::gguf_affine;
use crate::gguf_names::hf_tensor;
use crate::mlx::{AffineTensor, Quantization};
use crate::quant::GgmlType;
use crate::safetensors::{DType, Header, TensorInfo};
use crate::{ByteSource, FileSource, WeightsError};

/// A tensor on the host, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Rows of a GGUF matrix in their stored ggml blocks.
#[derive(Debug, Clone)]
pub struct BlockRows {
    pub ggml_type: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// Bytes per row: `cols / block values · block bytes`.
    pub row_bytes: usize,
    /// `rows · row_bytes` bytes.
    pub bytes: Vec<u8>,
}

/// The 16-bit float formats a matrix may be stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfFormat {
    /// IEEE half precision.
    F16,
    /// bfloat16: f32's top half.
    Bf16,
}

/// A matrix stored in 16 bits, as its raw halves: what a device can keep at the file's own size.
#[derive(Debug, Clone, PartialEq)]
pub struct HalfTensor {
    pub format: HalfFormat,
    pub rows: usize,
    pub cols: usize,
    /// `[rows, cols / 2]`: two halves a word, the even column in the low 16 bits.
    pub words: Vec<u32>,
}

pub struct Checkpoint {
    format: Format,
    /// MLX affine quantization from the folder's config.json, when the weights use it.
    quantization: Option<Quantization>,
}

enum Format {
    Safetensors {
        files: Vec<(Box<dyn ByteSource>, Header)>,
        /// Tensor name → index into `files`.
        location: BTreeMap<String, usize>,
    },
    Gguf {
        source: Box<dyn ByteSource>,
        file: GgufFile,
        /// Hugging Face name (or the GGUF name, for tensors without one) → (GGUF name, value to
        /// subtract).
        names: BTreeMap<String, (String, f32)>,
    },
}

/// Bytes `start..end` of a checkpoint's file number `file` (in the order its sources were given;
/// always 0 for GGUF).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileRange {
    pub file: usize,
    pub start: u64,
    pub end: u64,
}

impl FileRange {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Sorted, with touching or overlapping ranges of a file joined.
    fn merge(mut ranges: Vec<FileRange>) -> Vec<FileRange> {
        ranges.sort();
        let mut merged: Vec<FileRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if last.file == r.file && r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged
    }
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

impl Checkpoint {
    /// Opens a model folder, a GGUF file or a single safetensors file (headers only).
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        if !path.is_file() {
            return Self::open_dir(path);
        }
        let mut source = FileSource::open(path)?;
        if GgufFile::sniff(&mut source) {
            return Self::from_gguf(Box::new(source));
        }
        let mut checkpoint = Self::from_sources(vec![Box::new(source)])?;
        // A lone .safetensors file takes its quantization from a config.json beside it.
        checkpoint.set_quantization(quantization_in(path.parent().unwrap_or(Path::new(".")))?);
        Ok(checkpoint)
    }

    /// Opens the weights in a model folder (headers only), with the MLX quantization its
    /// config.json declares.
    pub fn open_dir(dir: &Path) -> Result<Self, WeightsError> {
        let mut checkpoint = Self::open_weights_in(dir)?;
        checkpoint.set_quantization(quantization_in(dir)?);
        Ok(checkpoint)
    }

    fn open_weights_in(dir: &Path) -> Result<Self, WeightsError> {
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
            if !checkpoint.contains(name) {
                return Err(WeightsError::Corrupt {
                    file: index.display().to_string(),
                    reason: format!("it lists `{name}` but no shard holds it"),
                });
            }
        }
        Ok(checkpoint)
    }

    /// A checkpoint over already-opened safetensors files (shards in any order).
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
        Ok(Self { format: Format::Safetensors { files, location }, quantization: None })
    }

    /// A checkpoint over one GGUF file. Its tensors go by their Hugging Face names where the
    /// architecture has a mapping ([`crate::gguf_names`]), by their GGUF names otherwise.
    pub fn from_gguf(mut source: Box<dyn ByteSource>) -> Result<Self, WeightsError> {
        let file = GgufFile::read(source.as_mut())?;
        let arch = file.architecture().unwrap_or_default().to_string();
        let mut names = BTreeMap::new();
        for gguf_name in file.tensors.keys() {
            let (name, subtract) = match hf_tensor(&arch, gguf_name) {
                Some(hf) => (hf.name, hf.subtract),
                None => (gguf_name.clone(), 0.0),
            };
            if let Some((other, _)) = names.insert(name.clone(), (gguf_name.clone(), subtract)) {
                return Err(WeightsError::Corrupt {
                    file: source.name(),
                    reason: format!("tensors `{other}` and `{gguf_name}` both map to `{name}`"),
                });
            }
        }
        Ok(Self { format: Format::Gguf { source, file, names }, quantization: None })
    }

    /// The GGUF header (metadata: config and tokenizer) when this checkpoint is a GGUF file.
    pub fn gguf(&self) -> Option<&GgufFile> {
        match &self.format {
            Format::Gguf { file, .. } => Some(file),
            Format::Safetensors { .. } => None,
        }
    }

    pub fn names(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match &self.format {
            Format::Safetensors { location, .. } => Box::new(location.keys().map(String::as_str)),
            Format::Gguf { names, .. } => Box::new(names.keys().map(String::as_str)),
        }
    }

    /// Where a safetensors tensor lies (`None` for a GGUF checkpoint: see [`Self::gguf`]).
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        match &self.format {
            Format::Safetensors { files, location } => location.get(name).and_then(|&i| files[i].1.tensors.get(name)),
            Format::Gguf { .. } => None,
        }
    }

    /// The shape [`Self::read_f32`] gives tensor `name`, from the headers alone: as stored
    /// (row-major), or, for an MLX-quantized `module.weight`, `[rows, cols]` once dequantized.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        match &self.format {
            Format::Gguf { file, names, .. } => {
                names.get(name).and_then(|(g, _)| file.tensors.get(g)).map(|t| t.shape.clone())
            }
            Format::Safetensors { .. } => {
                let info = self.info(name)?;
                let module = name.strip_suffix(".weight").filter(|m| self.is_quantized(m));
                let bits = module.and_then(|m| self.quantization.as_ref()?.for_module(m)).map(|p| p.bits as usize);
                match (bits, &info.shape[..]) {
                    (Some(bits), &[rows, words]) => Some(vec![rows, words * 32 / bits]),
                    _ => Some(info.shape.clone()),
                }
            }
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        match &self.format {
            Format::Safetensors { location, .. } => location.contains_key(name),
            Format::Gguf { names, .. } => names.contains_key(name),
        }
    }

    /// The raw bytes of one safetensors tensor, as stored.
    pub fn read_raw(&mut self, name: &str) -> Result<(TensorInfo, Vec<u8>), WeightsError> {
        let missing = || WeightsError::Missing { name: name.to_string() };
        match &mut self.format {
            Format::Safetensors { files, location } => {
                let &file = location.get(name).ok_or_else(missing)?;
                let (source, header) = &mut files[file];
                let info = header.tensors.get(name).ok_or_else(missing)?.clone();
                let bytes = source.read_at(info.offset, info.len)?;
                Ok((info, bytes))
            }
            Format::Gguf { .. } => Err(WeightsError::NotSafetensors { name: name.to_string() }),
        }
    }

    /// Declares how MLX-quantized modules are stored (from the model's config.json).
    pub fn set_quantization(&mut self, quantization: Option<Quantization>) {
        self.quantization = quantization;
    }

    /// Whether `module` is stored quantized in a form [`Self::read_affine`] returns packed: MLX
    /// (it has `module.scales`) or a GGUF block type with an affine form ([`gguf_affine`]).
    pub fn is_quantized(&self, module: &str) -> bool {
        match &self.format {
            Format::Safetensors { .. } => self.contains(&format!("{module}.scales")),
            Format::Gguf { .. } => self.gguf_packable(module).is_some(),
        }
    }

    /// Bytes of codes per row of `module` once packed (4 bytes a word), if it is quantized: what
    /// a loader slices a large table by before reading it.
    pub fn packed_row_bytes(&self, module: &str) -> Option<usize> {
        match &self.format {
            Format::Safetensors { .. } if self.is_quantized(module) => {
                self.info(&format!("{module}.weight")).and_then(|i| i.shape.get(1)).map(|words| words * 4)
            }
            Format::Safetensors { .. } => None,
            Format::Gguf { .. } => {
                let tensor = self.gguf_packable(module)?;
                let params = gguf_affine::affine_params(tensor.ggml_type)?;
                Some(tensor.shape[1] * params.bits as usize / 8)
            }
        }
    }

    /// The ggml block type and the stored bytes per row of `module.weight`, when it is a GGUF
    /// matrix: what a loader needs to keep a large table in its stored blocks
    /// ([`Self::read_block_rows`]) instead of repacking it.
    pub fn stored_blocks(&self, module: &str) -> Option<(GgmlType, usize)> {
        let tensor = self.gguf_packable(module)?;
        Some((tensor.ggml_type, tensor.len / tensor.shape[0].max(1)))
    }

    /// Rows `rows` of a GGUF matrix exactly as stored (whole ggml blocks, row after row), reading
    /// only their bytes; `None` when `module` is not a GGUF matrix ([`Self::stored_blocks`]). The
    /// bytes are those [`Self::row_ranges`] names.
    pub fn read_block_rows(&mut self, module: &str, rows: Range<usize>) -> Result<Option<BlockRows>, WeightsError> {
        let Some(tensor) = self.gguf_packable(module).cloned() else { return Ok(None) };
        let Format::Gguf { source, .. } = &mut self.format else { return Ok(None) };
        let [all_rows, cols] = tensor.shape[..] else { return Ok(None) };
        if rows.end > all_rows || rows.start > rows.end {
            return Err(WeightsError::Quantization {
                name: module.to_string(),
                reason: format!("rows {rows:?} asked of a tensor with {all_rows}"),
            });
        }
        let row_bytes = tensor.len / all_rows.max(1);
        let bytes = source.read_at(tensor.offset + (rows.start * row_bytes) as u64, rows.len() * row_bytes)?;
        Ok(Some(BlockRows { ggml_type: tensor.ggml_type, rows: rows.len(), cols, row_bytes, bytes }))
    }

    /// The GGUF tensor behind `module.weight`, when it is a matrix whose blocks repack into
    /// affine groups (and needs no offset subtracted: only norms do).
    fn gguf_packable(&self, module: &str) -> Option<&GgufTensor> {
        let Format::Gguf { file, names, .. } = &self.format else { return None };
        let (gguf_name, subtract) = names.get(&format!("{module}.weight"))?;
        let tensor = file.tensors.get(gguf_name)?;
        let packable =
            *subtract == 0.0 && tensor.shape.len() == 2 && gguf_affine::affine_params(tensor.ggml_type).is_some();
        packable.then_some(tensor)
    }

    /// The matrix `name` as its raw 16-bit halves, when it is stored as f16 or bf16 (a safetensors
    /// tensor, or a GGUF one needing no offset) with an even number of columns; `None` otherwise
    /// (f32, quantized, a vector): read it with [`Self::read_f32`] then.
    pub fn read_half(&mut self, name: &str) -> Result<Option<HalfTensor>, WeightsError> {
        let half = |dtype_is: Option<HalfFormat>, shape: &[usize]| match (dtype_is, shape) {
            (Some(format), &[rows, cols]) if cols % 2 == 0 => Some((format, rows, cols)),
            _ => None,
        };
        let (format, rows, cols, bytes) = match &mut self.format {
            Format::Safetensors { files, location } => {
                let Some(&file) = location.get(name) else { return Ok(None) };
                let (source, header) = &mut files[file];
                let Some(info) = header.tensors.get(name) else { return Ok(None) };
                let format = match info.dtype {
                    DType::F16 => Some(HalfFormat::F16),
                    DType::BF16 => Some(HalfFormat::Bf16),
                    _ => None,
                };
                let Some((format, rows, cols)) = half(format, &info.shape) else { return Ok(None) };
                (format, rows, cols, source.read_at(info.offset, info.len)?)
            }
            Format::Gguf { source, file, names } => {
                let Some((gguf_name, subtract)) = names.get(name) else { return Ok(None) };
                let tensor = &file.tensors[gguf_name];
                let format = match tensor.ggml_type {
                    GgmlType::F16 => Some(HalfFormat::F16),
                    GgmlType::BF16 => Some(HalfFormat::Bf16),
                    _ => None,
                };
                let Some((format, rows, cols)) = half(format, &tensor.shape).filter(|_| *subtract == 0.0) else {
                    return Ok(None);
                };
                (format, rows, cols, source.read_at(tensor.offset, tensor.len)?)
            }
        };
        if bytes.len() != rows * cols * 2 {
            let reason = format!("{} bytes for a {rows}×{cols} matrix of halves", bytes.len());
            return Err(WeightsError::Quantization { name: name.to_string(), reason });
        }
        let words = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(Some(HalfTensor { format, rows, cols, words }))
    }

    /// The packed codes, scales and biases of a quantized module (`None` when the module is
    /// stored as plain floats, or in a GGUF type without an affine form).
    pub fn read_affine(&mut self, module: &str) -> Result<Option<AffineTensor>, WeightsError> {
        self.read_affine_rows(module, None)
    }

    /// Rows `rows` (all when `None`) of a quantized module, reading only their bytes: a
    /// table too large to hold twice (Gemma 4's per-layer embeddings) is loaded in slices.
    pub fn read_affine_rows(
        &mut self,
        module: &str,
        rows: Option<Range<usize>>,
    ) -> Result<Option<AffineTensor>, WeightsError> {
        if !self.is_quantized(module) {
            return Ok(None);
        }
        if let Some(tensor) = self.gguf_packable(module).cloned() {
            return self.read_gguf_rows(module, &tensor, rows);
        }
        let bad = |reason: &str| WeightsError::Quantization { name: module.to_string(), reason: reason.to_string() };
        let params = match &self.quantization {
            None => return Err(bad("it has scales, but config.json declares no `quantization`")),
            Some(q) => {
                q.for_module(module).ok_or_else(|| bad("it has scales, but config.json says it is not quantized"))?
            }
        };
        let weight = format!("{module}.weight");
        let info = self.info(&weight).ok_or_else(|| WeightsError::Missing { name: weight.clone() })?.clone();
        if info.dtype != DType::U32 {
            return Err(bad(&format!("its weight is {:?}, not the U32 codes of a quantized module", info.dtype)));
        }
        let all_rows = info.shape.first().copied().unwrap_or(0);
        let rows = rows.unwrap_or(0..all_rows);
        if rows.end > all_rows || rows.start > rows.end {
            return Err(bad(&format!("rows {rows:?} asked of a tensor with {all_rows}")));
        }
        // The codes are read straight into their u32 buffer: no byte copy to convert.
        let (shape, info, start, len) = self.row_span(module, &weight, &rows, all_rows)?;
        let mut codes = vec![0u32; len / 4];
        self.read_range_into(&weight, &info, start, bytemuck::cast_slice_mut(&mut codes))?;
        if cfg!(target_endian = "big") {
            codes.iter_mut().for_each(|word| *word = u32::from_le(*word));
        }
        let mut floats = |name: String| -> Result<(Vec<usize>, Vec<f32>), WeightsError> {
            let (shape, info, start, len) = self.row_span(module, &name, &rows, all_rows)?;
            let bytes = self.read_range(&name, &info, start, len)?;
            Ok((shape, to_f32(&name, info.dtype, &bytes)?))
        };
        let scales = floats(format!("{module}.scales"))?;
        let biases = floats(format!("{module}.biases"))?;
        AffineTensor::new(module, params, (shape, codes), scales, biases).map(Some)
    }

    /// Where rows `rows` of the safetensors tensor `name` (part of quantized `module`, whose
    /// weight has `all_rows`) lie: its shape cut to the rows, its info, start and length.
    fn row_span(
        &self,
        module: &str,
        name: &str,
        rows: &Range<usize>,
        all_rows: usize,
    ) -> Result<(Vec<usize>, TensorInfo, usize, usize), WeightsError> {
        let info = self.info(name).ok_or_else(|| WeightsError::Missing { name: name.to_string() })?.clone();
        let row_bytes = info.shape.iter().skip(1).product::<usize>() * info.dtype.size_in_bytes();
        if info.shape.first() != Some(&all_rows) {
            return Err(WeightsError::Quantization {
                name: module.to_string(),
                reason: format!("`{name}` has {:?} rows, its weight {all_rows}", info.shape.first()),
            });
        }
        let mut shape = info.shape.clone();
        shape[0] = rows.len();
        Ok((shape, info, rows.start * row_bytes, rows.len() * row_bytes))
    }

    /// The bytes of every tensor whose name starts with one of `prefixes`, merged where they
    /// touch: what a load step reads, for a caller that fetches files piece by piece.
    pub fn ranges_under(&self, prefixes: &[String]) -> Vec<FileRange> {
        let wanted = |name: &str| prefixes.iter().any(|p| name.starts_with(p.as_str()));
        let mut ranges = Vec::new();
        match &self.format {
            Format::Safetensors { files, location } => {
                for (name, &file) in location.iter().filter(|(name, _)| wanted(name)) {
                    if let Some(info) = files[file].1.tensors.get(name) {
                        ranges.push(FileRange { file, start: info.offset, end: info.offset + info.len as u64 });
                    }
                }
            }
            Format::Gguf { file, names, .. } => {
                for (gguf_name, _) in names.iter().filter(|(name, _)| wanted(name)).map(|(_, v)| v) {
                    if let Some(t) = file.tensors.get(gguf_name) {
                        ranges.push(FileRange { file: 0, start: t.offset, end: t.offset + t.len as u64 });
                    }
                }
            }
        }
        FileRange::merge(ranges)
    }

    /// The bytes [`Self::read_affine_rows`] reads for `rows` of quantized `module` (none when it
    /// is not quantized).
    pub fn row_ranges(&self, module: &str, rows: Range<usize>) -> Result<Vec<FileRange>, WeightsError> {
        if !self.is_quantized(module) {
            return Ok(Vec::new());
        }
        if let Some(tensor) = self.gguf_packable(module) {
            let row_bytes = (tensor.len / tensor.shape[0].max(1)) as u64;
            let start = tensor.offset + rows.start as u64 * row_bytes;
            return Ok(vec![FileRange { file: 0, start, end: start + rows.len() as u64 * row_bytes }]);
        }
        let Format::Safetensors { location, .. } = &self.format else { return Ok(Vec::new()) };
        let weight = format!("{module}.weight");
        let all_rows = self.info(&weight).and_then(|i| i.shape.first().copied()).unwrap_or(0);
        let mut ranges = Vec::new();
        for part in ["weight", "scales", "biases"] {
            let name = format!("{module}.{part}");
            let (_, info, start, len) = self.row_span(module, &name, &rows, all_rows)?;
            let file = location[&name];
            let start = info.offset + start as u64;
            ranges.push(FileRange { file, start, end: start + len as u64 });
        }
        Ok(FileRange::merge(ranges))
    }

    /// Rows of a GGUF matrix (all when `None`), reading only their blocks, repacked.
    fn read_gguf_rows(
        &mut self,
        module: &str,
        tensor: &GgufTensor,
        rows: Option<std::ops::Range<usize>>,
    ) -> Result<Option<AffineTensor>, WeightsError> {
        let Format::Gguf { source, .. } = &mut self.format else { return Ok(None) };
        let [all_rows, cols] = tensor.shape[..] else { return Ok(None) };
        let rows = rows.unwrap_or(0..all_rows);
        if rows.end > all_rows || rows.start > rows.end {
            return Err(WeightsError::Quantization {
                name: module.to_string(),
                reason: format!("rows {rows:?} asked of a tensor with {all_rows}"),
            });
        }
        let row_bytes = tensor.len / all_rows.max(1);
        let bytes = source.read_at(tensor.offset + (rows.start * row_bytes) as u64, rows.len() * row_bytes)?;
        gguf_affine::to_affine(module, tensor.ggml_type, &bytes, rows.len(), cols)
    }

    /// `len` bytes of a safetensors tensor, from `start` within it.
    fn read_range(&mut self, name: &str, info: &TensorInfo, start: usize, len: usize) -> Result<Vec<u8>, WeightsError> {
        let mut buffer = vec![0; len];
        self.read_range_into(name, info, start, &mut buffer)?;
        Ok(buffer)
    }

    /// `buffer.len()` bytes of a safetensors tensor, from `start` within it, into `buffer`.
    fn read_range_into(
        &mut self,
        name: &str,
        info: &TensorInfo,
        start: usize,
        buffer: &mut [u8],
    ) -> Result<(), WeightsError> {
        match &mut self.format {
            Format::Safetensors { files, location } => {
                let file = *location.get(name).ok_or_else(|| WeightsError::Missing { name: name.to_string() })?;
                files[file].0.read_into(info.offset + start as u64, buffer)
            }
            Format::Gguf { .. } => Err(WeightsError::NotSafetensors { name: name.to_string() }),
        }
    }

    /// One tensor converted to f32 (from f32, f16 or bf16; from any ggml type Hearth dequantizes;
    /// an MLX-quantized `….weight` is dequantized).
    pub fn read_f32(&mut self, name: &str) -> Result<HostTensor, WeightsError> {
        // GGUF blocks are dequantized directly below; only MLX needs its packed form first.
        if matches!(self.format, Format::Safetensors { .. })
            && let Some(module) = name.strip_suffix(".weight")
            && let Some(quantized) = self.read_affine(module)?
        {
            return Ok(quantized.dequantize());
        }
        if let Format::Gguf { source, file, names } = &mut self.format {
            let (gguf_name, subtract) =
                names.get(name).ok_or_else(|| WeightsError::Missing { name: name.to_string() })?;
            let mut tensor = read_tensor_f32(source.as_mut(), gguf_name, &file.tensors[gguf_name])?;
            if *subtract != 0.0 {
                tensor.data.iter_mut().for_each(|v| *v -= *subtract);
            }
            return Ok(tensor);
        }
        let (info, bytes) = self.read_raw(name)?;
        let data = to_f32(name, info.dtype, &bytes)?;
        Ok(HostTensor { shape: info.shape, data })
    }
}

/// The MLX quantization that `dir/config.json` declares (`None` without a config or a section).
fn quantization_in(dir: &Path) -> Result<Option<Quantization>, WeightsError> {
    let config = dir.join("config.json");
    if !config.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&config).map_err(|source| WeightsError::Io { path: config.clone(), source })?;
    Quantization::from_config_json(&text)
}

/// Little-endian f32, f16 or bf16 values widened to f32.
fn to_f32(name: &str, dtype: DType, bytes: &[u8]) -> Result<Vec<f32>, WeightsError> {
    Ok(match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        DType::F16 => bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        DType::BF16 => bytes.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        dtype => return Err(WeightsError::UnsupportedDType { name: name.to_string(), dtype }),
    })
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
    fn half_matrices_are_read_as_their_raw_halves() {
        let values = [1.5f32, -2.0, 0.25, 3.0, -0.5, 6.0];
        let halves: Vec<u8> = values.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect();
        let brains: Vec<u8> = values.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect();
        let odd: Vec<u8> = values.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect();
        let floats: Vec<u8> = [1f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let file = build(&[
            ("h", "F16", vec![3, 2], halves),
            ("b", "BF16", vec![3, 2], brains),
            ("odd", "F16", vec![2, 3], odd),
            ("f", "F32", vec![1, 2], floats),
        ]);
        let mut ckpt = Checkpoint::from_sources(vec![Box::new(MemorySource::new("m", file))]).unwrap();
        for (name, format) in [("h", HalfFormat::F16), ("b", HalfFormat::Bf16)] {
            let half = ckpt.read_half(name).unwrap().expect("a matrix of halves");
            assert_eq!((half.format, half.rows, half.cols, half.words.len()), (format, 3, 2, 3));
            // The even column in the low half, each half the value the f32 read gives.
            let unpacked: Vec<f32> = half
                .words
                .iter()
                .flat_map(|w| [w & 0xffff, w >> 16])
                .map(|bits| match format {
                    HalfFormat::F16 => f16::from_bits(bits as u16).to_f32(),
                    HalfFormat::Bf16 => bf16::from_bits(bits as u16).to_f32(),
                })
                .collect();
            assert_eq!(unpacked, ckpt.read_f32(name).unwrap().data);
        }
        // An odd row, f32, or no such tensor: read as f32 instead.
        assert_eq!(ckpt.read_half("odd").unwrap(), None);
        assert_eq!(ckpt.read_half("f").unwrap(), None);
        assert_eq!(ckpt.read_half("nope").unwrap(), None);
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

    #[test]
    fn gguf_matrices_are_read_packed_by_module_and_by_rows() {
        use crate::gguf::tests::Builder;
        use crate::quant::GgmlType;
        // Three rows of 64 values in Q8_0: two blocks a row, scales 0.5, 0.25, …
        let mut blocks = Vec::new();
        for b in 0..6u8 {
            blocks.extend(f16::from_f32(0.5 / f32::from(b + 1)).to_le_bytes());
            blocks.extend((0..32u8).map(|i| i.wrapping_mul(7).wrapping_add(b)));
        }
        let bytes = Builder::new()
            .kv("general.architecture", 8, crate::gguf::tests::string_bytes("gemma3"))
            .tensor("blk.0.attn_q.weight", vec![64, 3], GgmlType::Q8_0, blocks)
            .tensor("blk.0.attn_norm.weight", vec![2], GgmlType::F32, [0u8; 8].to_vec())
            .build();
        let mut ckpt = Checkpoint::from_gguf(Box::new(MemorySource::new("m.gguf", bytes))).unwrap();
        let module = "model.layers.0.self_attn.q_proj";
        assert!(ckpt.is_quantized(module));
        assert_eq!(ckpt.packed_row_bytes(module), Some(64));
        // Norms carry an offset and vectors are not matrices: neither is packed.
        assert!(!ckpt.is_quantized("model.layers.0.input_layernorm"));
        let dense = ckpt.read_f32(&format!("{module}.weight")).unwrap();
        let all = ckpt.read_affine(module).unwrap().expect("packed");
        assert_eq!((all.rows, all.cols, all.params.bits), (3, 64, 8));
        assert_eq!(all.dequantize(), dense);
        let last = ckpt.read_affine_rows(module, Some(2..3)).unwrap().expect("packed");
        assert_eq!(last.dequantize().data, dense.data[128..]);
        assert!(ckpt.read_affine_rows(module, Some(2..4)).is_err());
    }

    /// A projector's 16-bit matrices as llama.cpp stores them (E2B's is F16): raw halves by their
    /// file names, the values `read_f32` gives; a norm, which carries an offset, is not one.
    #[test]
    fn gguf_half_matrices_are_read_as_their_raw_halves() {
        use crate::gguf::tests::Builder;
        use crate::quant::GgmlType;
        let values = [0.5f32, -1.25, 3.0, 0.0, -0.001, 7.5];
        let halves: Vec<u8> = values.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect();
        let brains: Vec<u8> = values.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect();
        let bytes = Builder::new()
            .kv("general.architecture", 8, crate::gguf::tests::string_bytes("clip"))
            .tensor("v.blk.0.attn_q.weight", vec![2, 3], GgmlType::F16, halves)
            .tensor("a.blk.0.ffn_up.weight", vec![2, 3], GgmlType::BF16, brains)
            .build();
        let mut ckpt = Checkpoint::from_gguf(Box::new(MemorySource::new("mmproj.gguf", bytes))).unwrap();
        for (name, format) in [("v.blk.0.attn_q.weight", HalfFormat::F16), ("a.blk.0.ffn_up.weight", HalfFormat::Bf16)]
        {
            let half = ckpt.read_half(name).unwrap().expect("a matrix of halves");
            assert_eq!((half.format, half.rows, half.cols), (format, 3, 2), "{name}");
            let unpacked: Vec<f32> = half
                .words
                .iter()
                .flat_map(|w| [w & 0xffff, w >> 16])
                .map(|bits| match format {
                    HalfFormat::F16 => f16::from_bits(bits as u16).to_f32(),
                    HalfFormat::Bf16 => bf16::from_bits(bits as u16).to_f32(),
                })
                .collect();
            assert_eq!(unpacked, ckpt.read_f32(name).unwrap().data, "{name}");
        }
        assert_eq!(ckpt.read_half("v.blk.1.attn_q.weight").unwrap(), None);
    }

    #[test]
    fn gguf_tensors_go_by_hugging_face_names() {
        use crate::gguf::tests::Builder;
        use crate::quant::GgmlType;
        let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let bytes = Builder::new()
            .kv("general.architecture", 8, crate::gguf::tests::string_bytes("gemma3"))
            .tensor("token_embd.weight", vec![2, 3], GgmlType::F32, f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
            .tensor("blk.0.attn_norm.weight", vec![2], GgmlType::F32, f32s(&[1.5, 0.25]))
            .tensor("rope_freqs.weight", vec![1], GgmlType::F32, f32s(&[9.0]))
            .build();
        let mut ckpt = Checkpoint::from_gguf(Box::new(MemorySource::new("m.gguf", bytes))).unwrap();
        assert_eq!(
            ckpt.names().collect::<Vec<_>>(),
            ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "rope_freqs.weight"]
        );
        let embed = ckpt.read_f32("model.embed_tokens.weight").unwrap();
        assert_eq!(embed, HostTensor { shape: vec![3, 2], data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0] });
        // Gemma 3 norms are stored as 1 + w.
        assert_eq!(ckpt.read_f32("model.layers.0.input_layernorm.weight").unwrap().data, vec![0.5, -0.75]);
        assert_eq!(ckpt.gguf().and_then(|g| g.architecture()), Some("gemma3"));
        assert!(ckpt.info("rope_freqs.weight").is_none());
        assert!(matches!(ckpt.read_raw("rope_freqs.weight"), Err(WeightsError::NotSafetensors { .. })));
    }

    #[test]
    fn shapes_are_those_reads_give() {
        let words = |n: usize| vec![0u8; n * 4];
        let file = build(&[
            ("m.weight", "U32", vec![3, 2], words(6)),
            ("m.scales", "F32", vec![3, 1], words(3)),
            ("m.biases", "F32", vec![3, 1], words(3)),
            ("n.weight", "F32", vec![5], words(5)),
        ]);
        let mut ckpt = Checkpoint::from_sources(vec![Box::new(MemorySource::new("m", file))]).unwrap();
        assert_eq!(ckpt.shape("m.weight"), Some(vec![3, 2]), "no quantization declared: as stored");
        ckpt.set_quantization(
            Quantization::from_config_json(r#"{"quantization": {"group_size": 16, "bits": 4}}"#).unwrap(),
        );
        assert_eq!(ckpt.shape("m.weight"), Some(vec![3, 16]), "two words of 4-bit codes a row");
        assert_eq!(ckpt.read_f32("m.weight").unwrap().shape, vec![3, 16]);
        assert_eq!(
            (ckpt.shape("m.scales"), ckpt.shape("n.weight"), ckpt.shape("x")),
            (Some(vec![3, 1]), Some(vec![5]), None)
        );
    }

    /// Fetches `ranges` of `full` into `windows` (as a browser caller would), after clearing them.
    fn fetch(windows: &crate::Windows, full: &[u8], ranges: &[FileRange]) {
        windows.clear();
        for r in ranges {
            windows.insert(r.start, full[r.start as usize..r.end as usize].to_vec());
        }
    }

    #[test]
    fn the_ranges_a_step_names_are_all_it_reads() {
        use crate::{WindowedSource, Windows};
        let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let words = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // A 4-bit module of 3 rows × 8 columns (one word a row, one group of 8), and a plain norm.
        let file = build(&[
            ("m.weight", "U32", vec![3, 1], words(&[0x7654_3210, 0x0123_4567, 0xffff_0000])),
            ("m.scales", "F32", vec![3, 1], f32s(&[0.5, 1.0, 2.0])),
            ("m.biases", "F32", vec![3, 1], f32s(&[-1.0, 0.0, 1.0])),
            ("norm.weight", "F32", vec![2], f32s(&[3.0, 4.0])),
        ]);
        let quantization = Quantization::from_config_json(r#"{"quantization": {"group_size": 8, "bits": 4}}"#).unwrap();
        let mut whole = Checkpoint::from_sources(vec![Box::new(MemorySource::new("m", file.clone()))]).unwrap();
        whole.set_quantization(quantization.clone());

        let windows = Windows::default();
        let len = file.len() as u64;
        let header = Checkpoint::from_sources(vec![Box::new(WindowedSource::new("m", len, windows.clone()))]);
        assert!(matches!(header, Err(WeightsError::NotFetched { offset: 0, len: 8, .. })), "nothing fetched yet");
        windows.insert(0, file[..8].to_vec());
        let header = Checkpoint::from_sources(vec![Box::new(WindowedSource::new("m", len, windows.clone()))]);
        let Err(WeightsError::NotFetched { offset: 8, len: json, .. }) = header else { panic!("{:?}", header.err()) };
        windows.insert(0, file[..8 + json as usize].to_vec());
        let mut streamed =
            Checkpoint::from_sources(vec![Box::new(WindowedSource::new("m", len, windows.clone()))]).unwrap();
        streamed.set_quantization(quantization);

        fetch(&windows, &file, &streamed.ranges_under(&["norm.".into()]));
        assert_eq!(streamed.read_f32("norm.weight").unwrap(), whole.read_f32("norm.weight").unwrap());
        assert!(matches!(streamed.read_affine("m"), Err(WeightsError::NotFetched { .. })));

        fetch(&windows, &file, &streamed.ranges_under(&["m.".into()]));
        assert_eq!(streamed.read_affine("m").unwrap(), whole.read_affine("m").unwrap());
        assert_eq!(streamed.ranges_under(&["m.".into()]).len(), 1, "the module's tensors touch: one range");

        let rows = streamed.row_ranges("m", 1..3).unwrap();
        fetch(&windows, &file, &rows);
        assert_eq!(windows.held_bytes(), 3 * 2 * 4, "two rows of codes, scales and biases");
        assert_eq!(
            streamed.read_affine_rows("m", Some(1..3)).unwrap(),
            whole.read_affine_rows("m", Some(1..3)).unwrap()
        );
        assert!(streamed.row_ranges("norm", 0..1).unwrap().is_empty(), "not quantized");
    }
}
