//! MLX affine quantization, the format of mlx-community's Gemma 4 checkpoints.
//!
//! A quantized module `m` is stored as three tensors: `m.weight`, uint32 `[rows, cols·bits/32]`
//! holding the codes as a little-endian bit stream per row (for 4 bits, element j of a word sits in
//! bits 4j…4j+3); `m.scales` and `m.biases`, `[rows, cols/group]` in the model's float type. An
//! element is `scale·q + bias` for the group it falls in. `config.json` says which modules are
//! quantized how: `"quantization": {"group_size": 64, "bits": 4, "mode": "affine", "<module path>":
//! {"group_size": …, "bits": …} | false, …}`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{HostTensor, WeightsError};

/// Group size and bit width of one quantized module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffineParams {
    pub group_size: usize,
    pub bits: u32,
}

impl AffineParams {
    const BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];

    fn parse(value: &Value, what: &str) -> Result<Self, WeightsError> {
        let field = |key: &str| {
            value.get(key).and_then(Value::as_u64).ok_or_else(|| bad_config(format!("{what} has no integer `{key}`")))
        };
        let params = AffineParams { group_size: field("group_size")? as usize, bits: field("bits")? as u32 };
        if !Self::BITS.contains(&params.bits) || params.group_size == 0 {
            return Err(bad_config(format!(
                "{what} asks for {} bits in groups of {}; MLX affine quantization has 2, 3, 4, 5, 6 or 8 bits",
                params.bits, params.group_size
            )));
        }
        Ok(params)
    }
}

fn bad_config(reason: String) -> WeightsError {
    WeightsError::Quantization { name: "config.json".into(), reason }
}

/// The `quantization` section of an MLX `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantization {
    default: AffineParams,
    /// Module path → its own parameters, or `None` where the module is left unquantized.
    modules: BTreeMap<String, Option<AffineParams>>,
}

impl Quantization {
    /// Reads `quantization` (or `quantization_config`) from a `config.json`; `None` when the
    /// model is not MLX-quantized.
    pub fn from_config_json(json: &str) -> Result<Option<Self>, WeightsError> {
        let config: Value = serde_json::from_str(json).map_err(|e| bad_config(e.to_string()))?;
        let Some(section) = config.get("quantization").or_else(|| config.get("quantization_config")) else {
            return Ok(None);
        };
        let Some(entries) = section.as_object() else {
            return Err(bad_config("`quantization` is not an object".into()));
        };
        // Other toolkits also write `quantization_config` (bitsandbytes, GPTQ, …): only MLX's has
        // a top-level group size.
        if !entries.contains_key("group_size") {
            let method = entries.get("quant_method").and_then(Value::as_str).unwrap_or("unknown");
            return Err(WeightsError::UnsupportedQuantization { mode: method.to_string() });
        }
        let mode = entries.get("mode").and_then(Value::as_str).unwrap_or("affine");
        if mode != "affine" {
            return Err(WeightsError::UnsupportedQuantization { mode: mode.to_string() });
        }
        let default = AffineParams::parse(section, "`quantization`")?;
        let mut modules = BTreeMap::new();
        for (key, value) in entries {
            match value {
                Value::Object(_) => {
                    modules.insert(key.clone(), Some(AffineParams::parse(value, &format!("the entry for `{key}`"))?));
                }
                Value::Bool(false) => {
                    modules.insert(key.clone(), None);
                }
                _ => {} // group_size, bits, mode, quant_method, …
            }
        }
        Ok(Some(Quantization { default, modules }))
    }

    /// How `module` (a path such as `language_model.model.layers.0.mlp.down_proj`) is quantized,
    /// if it is.
    pub fn for_module(&self, module: &str) -> Option<AffineParams> {
        match self.modules.get(module) {
            Some(own) => *own,
            None => Some(self.default),
        }
    }
}

/// A quantized matrix on the host, `[rows, cols]` once dequantized.
#[derive(Debug, Clone, PartialEq)]
pub struct AffineTensor {
    pub rows: usize,
    pub cols: usize,
    pub params: AffineParams,
    /// `[rows, words_per_row]`
    pub codes: Vec<u32>,
    /// `[rows, groups_per_row]`, widened to f32.
    pub scales: Vec<f32>,
    pub biases: Vec<f32>,
}

impl AffineTensor {
    /// Checks that the three tensors agree with each other and with `params`; `name` is the
    /// module, for the error.
    pub fn new(
        name: &str,
        params: AffineParams,
        codes: (Vec<usize>, Vec<u32>),
        scales: (Vec<usize>, Vec<f32>),
        biases: (Vec<usize>, Vec<f32>),
    ) -> Result<Self, WeightsError> {
        let bad = |reason: String| WeightsError::Quantization { name: name.to_string(), reason };
        let [rows, words] = codes.0[..] else {
            return Err(bad(format!("its weight has shape {:?}, not [rows, words]", codes.0)));
        };
        let cols = words * 32 / params.bits as usize;
        if !(words * 32).is_multiple_of(params.bits as usize) || !cols.is_multiple_of(params.group_size) {
            return Err(bad(format!(
                "{words} words per row do not hold a whole number of {}-bit groups of {}",
                params.bits, params.group_size
            )));
        }
        let groups = cols / params.group_size;
        for (what, shape) in [("scales", &scales.0), ("biases", &biases.0)] {
            if shape[..] != [rows, groups] {
                return Err(bad(format!(
                    "its {what} have shape {shape:?}; {rows} rows of {cols} values in groups of {} need [{rows}, {groups}]",
                    params.group_size
                )));
            }
        }
        Ok(AffineTensor { rows, cols, params, codes: codes.1, scales: scales.1, biases: biases.1 })
    }

    /// The rows of `parts`, in order, as one tensor; `None` unless all have the same columns and
    /// packing (and there is at least one).
    pub fn stack_rows(parts: Vec<AffineTensor>) -> Option<AffineTensor> {
        let first = parts.first()?;
        let (cols, params) = (first.cols, first.params);
        if parts.iter().any(|p| p.cols != cols || p.params != params) {
            return None;
        }
        let mut joint =
            AffineTensor { rows: 0, cols, params, codes: Vec::new(), scales: Vec::new(), biases: Vec::new() };
        for part in parts {
            joint.rows += part.rows;
            joint.codes.extend(part.codes);
            joint.scales.extend(part.scales);
            joint.biases.extend(part.biases);
        }
        Some(joint)
    }

    pub fn words_per_row(&self) -> usize {
        self.cols * self.params.bits as usize / 32
    }

    pub fn groups_per_row(&self) -> usize {
        self.cols / self.params.group_size
    }

    /// Row `r`, dequantized into `out` (`cols` long).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let bits = self.params.bits as usize;
        let mask = (1u64 << bits) - 1;
        let words = &self.codes[r * self.words_per_row()..(r + 1) * self.words_per_row()];
        let groups = r * self.groups_per_row();
        for (j, value) in out.iter_mut().enumerate().take(self.cols) {
            // Element j occupies bits j·bits… of the row's little-endian bit stream.
            let bit = j * bits;
            let (word, shift) = (bit / 32, bit % 32);
            let mut wide = u64::from(words[word]);
            if shift + bits > 32 {
                wide |= u64::from(words[word + 1]) << 32;
            }
            let q = ((wide >> shift) & mask) as f32;
            let g = groups + j / self.params.group_size;
            *value = self.scales[g] * q + self.biases[g];
        }
    }

    pub fn dequantize(&self) -> HostTensor {
        let mut data = vec![0.0; self.rows * self.cols];
        for (r, row) in data.chunks_exact_mut(self.cols.max(1)).enumerate() {
            self.dequantize_row(r, row);
        }
        HostTensor { shape: vec![self.rows, self.cols], data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_defaults_and_per_module_overrides() {
        let json = r#"{"quantization": {"group_size": 64, "bits": 4, "mode": "affine",
            "a.o_proj": {"group_size": 32, "bits": 8}, "a.up_proj": false}}"#;
        let q = Quantization::from_config_json(json).unwrap().unwrap();
        assert_eq!(q.for_module("a.q_proj"), Some(AffineParams { group_size: 64, bits: 4 }));
        assert_eq!(q.for_module("a.o_proj"), Some(AffineParams { group_size: 32, bits: 8 }));
        assert_eq!(q.for_module("a.up_proj"), None);
        assert_eq!(Quantization::from_config_json(r#"{"model_type": "gemma4"}"#).unwrap(), None);
    }

    #[test]
    fn refuses_other_schemes_with_their_name() {
        let mxfp4 = r#"{"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}"#;
        let err = Quantization::from_config_json(mxfp4).unwrap_err().to_string();
        assert!(err.contains("mxfp4"), "{err}");
        let gptq = r#"{"quantization_config": {"quant_method": "gptq", "bits": 4}}"#;
        assert!(Quantization::from_config_json(gptq).unwrap_err().to_string().contains("gptq"));
        let seven = r#"{"quantization": {"group_size": 64, "bits": 7}}"#;
        assert!(Quantization::from_config_json(seven).unwrap_err().to_string().contains("7 bits"));
    }

    #[test]
    fn codes_are_a_little_endian_bit_stream_per_row() {
        // 3 bits do not divide 32: element 10 straddles words 0 and 1.
        let params = AffineParams { group_size: 32, bits: 3 };
        let values: Vec<u64> = (0..32).map(|j| (j * 5 + 1) % 8).collect();
        let mut stream = 0u128;
        for (j, v) in values.iter().enumerate() {
            stream |= u128::from(*v) << (3 * j);
        }
        let codes: Vec<u32> = (0..3).map(|w| (stream >> (32 * w)) as u32).collect();
        let t = AffineTensor::new("m", params, (vec![1, 3], codes), (vec![1, 1], vec![0.5]), (vec![1, 1], vec![-1.0]))
            .unwrap();
        let expected: Vec<f32> = values.iter().map(|&q| 0.5 * q as f32 - 1.0).collect();
        assert_eq!(t.dequantize().data, expected);
    }

    #[test]
    fn mismatched_shapes_are_named() {
        let params = AffineParams { group_size: 64, bits: 4 };
        let err = AffineTensor::new(
            "layers.0.q_proj",
            params,
            (vec![2, 8], vec![0; 16]),
            (vec![2, 2], vec![0.0; 4]),
            (vec![2, 1], vec![0.0; 2]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("layers.0.q_proj") && err.contains("[2, 1]"), "{err}");
    }
}
