//! What the vision and audio towers share: their tensors read by name with the shapes checked,
//! and clippable linear layers kept in the file's packing where the kernels multiply by it.

use burn::tensor::{Device, Tensor, TensorData};
use hearth_kernels::{AffineMatrix, HalfMatrix, has_fused_kernels};
use hearth_weights::{Checkpoint, HostTensor};

use crate::error::ModelError;

/// A linear layer without bias; a clipped one clamps its input and its output.
pub(crate) struct Linear {
    weight: Weight,
    clip: Option<Clip>,
}

/// A linear layer's matrix on the device, in the file's own precision where the kernels can
/// multiply by it as stored.
// A few hundred per tower, each holding device handles: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Weight {
    /// f32, transposed (`[in, out]`): so that `x · W` needs no transpose.
    Dense(Tensor<2>),
    /// 4- or 8-bit codes as the file stores them (`[out, in]`: GGUF's Q8_0/Q4_0 blocks, MLX's
    /// groups), multiplied by the fused kernel; a quarter of the f32 bytes or less.
    Packed(AffineMatrix),
    /// f16 or bf16 values as the file stores them (`[out, in]`), widened for each product: half
    /// the f32 bytes at rest.
    Half(HalfMatrix),
}

#[derive(Clone, Copy)]
struct Clip {
    input: (f32, f32),
    output: (f32, f32),
}

impl Linear {
    /// `[S, in] → [S, out]`
    pub(crate) fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let apply = |x: Tensor<2>| match &self.weight {
            Weight::Dense(w) => x.matmul(w.clone()),
            Weight::Packed(w) => w.matmul_transposed(x),
            Weight::Half(w) => w.matmul_transposed(x),
        };
        match self.clip {
            None => apply(x),
            Some(Clip { input, output }) => apply(x.clamp(input.0, input.1)).clamp(output.0, output.1),
        }
    }

    pub(crate) fn device_bytes(&self) -> u64 {
        match &self.weight {
            Weight::Dense(w) => w.shape().num_elements() as u64 * 4,
            Weight::Packed(w) => w.device_bytes() as u64,
            Weight::Half(w) => w.device_bytes() as u64,
        }
    }
}

/// Reads a tower's tensors by their transformers names (`file_name` maps one to the file's).
pub(crate) struct TowerReader<'a> {
    pub checkpoint: &'a mut Checkpoint,
    pub device: &'a Device,
    file_name: Box<dyn Fn(&str) -> String + 'a>,
}

impl<'a> TowerReader<'a> {
    pub(crate) fn new(
        checkpoint: &'a mut Checkpoint,
        device: &'a Device,
        file_name: impl Fn(&str) -> String + 'a,
    ) -> Self {
        TowerReader { checkpoint, device, file_name: Box::new(file_name) }
    }

    /// A tensor as f32 on the host, its shape checked (a scalar may be stored as `[]` or `[1]`).
    pub(crate) fn host(&mut self, name: &str, expected: &[usize]) -> Result<HostTensor, ModelError> {
        let name = (self.file_name)(name);
        let tensor = self.checkpoint.read_f32(&name)?;
        let matches = tensor.shape == expected || (expected.is_empty() && tensor.data.len() == 1);
        if !matches {
            return Err(ModelError::Shape { name, expected: expected.to_vec(), actual: tensor.shape });
        }
        Ok(tensor)
    }

    pub(crate) fn tensor<const D: usize>(&mut self, name: &str, shape: [usize; D]) -> Result<Tensor<D>, ModelError> {
        let t = self.host(name, &shape)?;
        Ok(Tensor::from_data(TensorData::new(t.data, shape), self.device))
    }

    pub(crate) fn scalar(&mut self, name: &str) -> Result<f32, ModelError> {
        Ok(self.host(name, &[])?.data[0])
    }

    /// A checkpoint matrix `[out, in]` uploaded transposed, `[in, out]`.
    pub(crate) fn matrix(
        &mut self,
        name: &str,
        out_features: usize,
        in_features: usize,
    ) -> Result<Tensor<2>, ModelError> {
        let w = self.host(name, &[out_features, in_features])?;
        Ok(upload_transposed(w.data, out_features, in_features, self.device))
    }

    /// A linear module's `[out, in]` matrix (`{module}.weight`): packed codes stay packed and
    /// 16-bit values stay 16-bit where the fused kernels run (as the decoder's do); anything else
    /// is uploaded as f32, transposed.
    fn weight(&mut self, module: &str, out_features: usize, in_features: usize) -> Result<Weight, ModelError> {
        let name = (self.file_name)(&format!("{module}.weight"));
        let stored = name.strip_suffix(".weight").unwrap_or(&name);
        if has_fused_kernels(self.device)
            && let Some(packed) = self.checkpoint.read_affine(stored)?
            && AffineMatrix::holds(&packed)
        {
            if (packed.rows, packed.cols) != (out_features, in_features) {
                let (expected, actual) = (vec![out_features, in_features], vec![packed.rows, packed.cols]);
                return Err(ModelError::Shape { name, expected, actual });
            }
            return Ok(Weight::Packed(AffineMatrix::upload(packed, self.device)));
        }
        if has_fused_kernels(self.device)
            && let Some(half) = self.checkpoint.read_half(&name)?
        {
            if (half.rows, half.cols) != (out_features, in_features) {
                let (expected, actual) = (vec![out_features, in_features], vec![half.rows, half.cols]);
                return Err(ModelError::Shape { name, expected, actual });
            }
            return Ok(Weight::Half(HalfMatrix::upload(half, self.device)));
        }
        Ok(Weight::Dense(self.matrix(&format!("{module}.weight"), out_features, in_features)?))
    }

    /// transformers' `Gemma4ClippableLinear` (`{module}.linear.weight`; with `clipped`, its
    /// four bounds `{module}.input_min` … `output_max`).
    pub(crate) fn clippable(
        &mut self,
        module: &str,
        out_features: usize,
        in_features: usize,
        clipped: bool,
    ) -> Result<Linear, ModelError> {
        let weight = self.weight(&format!("{module}.linear"), out_features, in_features)?;
        let clip = match clipped {
            true => Some(Clip {
                input: (self.scalar(&format!("{module}.input_min"))?, self.scalar(&format!("{module}.input_max"))?),
                output: (self.scalar(&format!("{module}.output_min"))?, self.scalar(&format!("{module}.output_max"))?),
            }),
            false => None,
        };
        Ok(Linear { weight, clip })
    }
}

/// `[rows, cols]` row by row → `[cols, rows]` on the device.
pub(crate) fn upload_transposed(data: Vec<f32>, rows: usize, cols: usize, device: &Device) -> Tensor<2> {
    let mut transposed = vec![0.0; data.len()];
    for (r, row) in data.chunks_exact(cols).enumerate() {
        for (i, value) in row.iter().enumerate() {
            transposed[i * rows + r] = *value;
        }
    }
    Tensor::from_data(TensorData::new(transposed, [cols, rows]), device)
}
