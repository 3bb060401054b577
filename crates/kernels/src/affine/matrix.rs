//! [`AffineMatrix`]: a packed matrix on a device, and its products on every backend (the kernels
//! on cubecl, the same maths as tensor operations on the CPU).

use burn::backend::Dispatch;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use hearth_weights::{AffineParams, AffineTensor};

use crate::fused::{gelu_tanh_mul, reference};
use crate::launch::{chunk_words_of, has_fused_kernels};
use crate::scales::ScaleLayout;
use crate::tuning::ProductKernel;

use super::launch::*;

/// A `[rows, k]` matrix stored as 4- or 8-bit codes with a scale and a bias per group of
/// `group` values of a row.
#[derive(Clone)]
pub struct AffineMatrix {
    /// `[rows, k·bits/32]` u32
    codes: Tensor<2, Int>,
    scales: Scales,
    group: usize,
    bits: u32,
}

/// A packed matrix's scales and biases: as the kernels read them where they run, else as f32
/// pairs for the tensor operations.
#[derive(Clone)]
pub(super) enum Scales {
    /// The cubecl backends: scale words in `layout`.
    Words { words: Tensor<2, Int>, layout: ScaleLayout },
    /// The CPU backend: `[rows, 2·groups]` f32, scale, bias, scale, bias, …
    Pairs(Tensor<2>),
}

impl AffineMatrix {
    /// Whether codes of this width stay packed: 2- to 6- and 8-bit codes (MLX's widths; GGUF's
    /// Q6_K as 6-bit codes) in groups of whole chunks (the fewest whole words holding whole
    /// codes: one word of 4-bit codes, three of 6-bit ones). Loaders dequantize anything else.
    pub fn holds(t: &AffineTensor) -> bool {
        let bits = t.params.bits;
        let per_chunk = (chunk_words_of(bits) * 32 / bits.max(1)) as usize;
        matches!(bits, 2..=6 | 8) && t.params.group_size.is_multiple_of(per_chunk)
    }

    /// Uploads a host tensor of a width [`Self::holds`] (taken by value: its codes become the
    /// upload's buffer without another copy).
    pub fn upload(t: AffineTensor, device: &Device) -> Self {
        assert!(Self::holds(&t), "AffineMatrix holds 2- to 6- and 8-bit codes in whole chunks");
        Self::from_parts(t.rows, t.cols, t.params, t.codes, &t.scales, &t.biases, device)
    }

    /// Rows `range` of a host tensor (a block of a split matrix).
    pub fn upload_rows(t: &AffineTensor, range: std::ops::Range<usize>, device: &Device) -> Self {
        assert!(Self::holds(t), "AffineMatrix holds 2- to 6- and 8-bit codes in whole chunks");
        let (words, groups) = (t.words_per_row(), t.groups_per_row());
        Self::from_parts(
            range.len(),
            t.cols,
            t.params,
            t.codes[range.start * words..range.end * words].to_vec(),
            &t.scales[range.start * groups..range.end * groups],
            &t.biases[range.start * groups..range.end * groups],
            device,
        )
    }

    fn from_parts(
        rows: usize,
        k: usize,
        params: AffineParams,
        codes: Vec<u32>,
        scales: &[f32],
        biases: &[f32],
        device: &Device,
    ) -> Self {
        let fused = has_fused_kernels(device);
        // The tensor operations read codes word by word: odd widths widen to bytes there.
        let (codes, params) = if !fused && !32u32.is_multiple_of(params.bits) {
            (widen_to_bytes(&codes, rows, k, params.bits), AffineParams { bits: 8, ..params })
        } else {
            (codes, params)
        };
        let (words, groups) = (k * params.bits as usize / 32, k / params.group_size);
        let scales = if fused {
            let layout = ScaleLayout::fitting(scales, biases, params.bits, groups);
            let (data, per_row) = layout.words(scales, biases, groups);
            Scales::Words {
                words: Tensor::from_data(TensorData::new(data, [rows, per_row]), (device, DType::U32)),
                layout,
            }
        } else {
            let interleaved: Vec<f32> = scales.iter().zip(biases).flat_map(|(&s, &b)| [s, b]).collect();
            Scales::Pairs(Tensor::from_data(TensorData::new(interleaved, [rows, 2 * groups]), device))
        };
        AffineMatrix {
            codes: Tensor::from_data(TensorData::new(codes, [rows, words]), (device, DType::U32)),
            scales,
            group: params.group_size,
            bits: params.bits,
        }
    }

    /// How the scales lie on the device (`None` on the CPU backend, f32 pairs).
    pub fn scale_layout(&self) -> Option<ScaleLayout> {
        match &self.scales {
            Scales::Words { layout, .. } => Some(*layout),
            Scales::Pairs(_) => None,
        }
    }

    /// The scale words and their layout (the cubecl backends only).
    fn words(&self) -> (&Tensor<2, Int>, ScaleLayout) {
        match &self.scales {
            Scales::Words { words, layout } => (words, *layout),
            Scales::Pairs(_) => panic!("packed kernels run only where the scales are uploaded as words"),
        }
    }

    pub fn rows(&self) -> usize {
        self.codes.dims()[0]
    }

    pub fn k(&self) -> usize {
        self.codes.dims()[1] * 32 / self.bits as usize
    }

    /// Codes per u32 word.
    fn per_word(&self) -> usize {
        32 / self.bits as usize
    }

    /// Bytes this matrix occupies on the device.
    pub fn device_bytes(&self) -> usize {
        let [rows, words] = self.codes.dims();
        let scales = match &self.scales {
            Scales::Words { words, .. } => words.shape().num_elements(),
            Scales::Pairs(pairs) => pairs.shape().num_elements(),
        };
        (rows * words + scales) * 4
    }

    /// `x · Wᵀ`: [S, k] → [S, rows].
    pub fn matmul_transposed(&self, x: Tensor<2>) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.fused_matmul(x, None)
        } else {
            x.matmul(self.dequantize().transpose())
        }
    }

    /// `x · Wᵀ` by the given kernel where the kernels run (the benchmark's comparison).
    pub fn matmul_transposed_by(&self, x: Tensor<2>, kernel: ProductKernel) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.launch_in_groups(Gate::None, x, None, None, kernel, 0)
        } else {
            self.matmul_transposed(x)
        }
    }

    /// `x · Wᵀ` by the GEMV-style kernel with `rows_per_group` rows per thread block (1, 2, 4 or
    /// 8: 64, 32, 16 or 8 lanes a row) where the kernels run (its tests and the benchmark).
    pub fn matmul_transposed_in_groups(&self, x: Tensor<2>, rows_per_group: u32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.launch_in_groups(Gate::None, x, None, None, ProductKernel::TokenTiles, rows_per_group.max(1))
        } else {
            self.matmul_transposed(x)
        }
    }

    /// One token's residual update and the next sublayer's normed projection of it: `x' = (x +
    /// RMSNorm(delta)·w_post)·scale` and `RMSNorm(x')·w_pre · Wᵀ`, with `norms` `[w_post ‖ w_pre]`
    /// (`2k`). Returns `(x', product)`: [1, k] and [1, rows]. One dispatch where the kernels run
    /// (the update's own launch saved); elsewhere, and for more than one token, the two steps.
    pub fn residual_normed_matmul(
        &self,
        x: Tensor<2>,
        delta: Tensor<2>,
        norms: &Tensor<1>,
        eps: f32,
        scale: f32,
    ) -> (Tensor<2>, Tensor<2>) {
        self.residual_normed_matmul_in_groups(false, x, delta, norms, eps, scale, 0)
    }

    /// The same update, and [`Self::normed_gated_stacked`] of it: this matrix a stacked `[gate;
    /// up]`, the product `[1, rows / 2]`.
    pub fn residual_normed_gated_stacked(
        &self,
        x: Tensor<2>,
        delta: Tensor<2>,
        norms: &Tensor<1>,
        eps: f32,
        scale: f32,
    ) -> (Tensor<2>, Tensor<2>) {
        self.residual_normed_matmul_in_groups(true, x, delta, norms, eps, scale, 0)
    }

    /// The same with `rows_per_group` rows a block (0: the tuned default; its test), gated
    /// (a stacked `[gate; up]`) or not.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn residual_normed_matmul_in_groups(
        &self,
        gated: bool,
        x: Tensor<2>,
        delta: Tensor<2>,
        norms: &Tensor<1>,
        eps: f32,
        scale: f32,
        rows_per_group: u32,
    ) -> (Tensor<2>, Tensor<2>) {
        let k = x.dims()[1];
        if has_fused_kernels(&x.device()) && x.dims()[0] == 1 {
            let (words, layout) = self.words();
            let (updated, product) = <Dispatch as AffineKernels>::affine_residual_matmul(
                self.codes.clone().into_dispatch(),
                words.clone().into_dispatch(),
                layout,
                gated,
                x.into_dispatch(),
                delta.into_dispatch(),
                norms.clone().into_dispatch(),
                eps,
                scale,
                self.group,
                self.bits,
                rows_per_group,
            );
            return (Tensor::from_dispatch(updated), Tensor::from_dispatch(product));
        }
        let (post, pre) = (norms.clone().narrow(0, 0, k), norms.clone().narrow(0, k, k));
        let updated = crate::fused::add_rms_norm(x, delta, &post, eps, scale);
        let product = if gated {
            self.normed_gated_stacked(updated.clone(), &pre, eps)
        } else {
            self.normed_matmul_transposed(updated.clone(), &pre, eps)
        };
        (updated, product)
    }

    /// `RMSNorm(x) · Wᵀ` with the norm's weight `[k]`: [S, k] → [S, rows], the norm fused into
    /// the product where the kernels run.
    pub fn normed_matmul_transposed(&self, x: Tensor<2>, norm_weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            self.fused_matmul(x, Some((norm_weight, eps)))
        } else {
            self.matmul_transposed(reference::rms_norm(x, norm_weight, eps))
        }
    }

    /// `gelu_tanh(RMSNorm(x)·Wᵀ) · (RMSNorm(x)·W_upᵀ)` with `self` as W (the gate): the MLP's
    /// gate, up and activation, in one dispatch where the kernels run. Both matrices must have the
    /// same shape and packing ([`Self::pairs_with`]).
    pub fn normed_gated_matmul(&self, up: &AffineMatrix, x: Tensor<2>, norm_weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) && self.pairs_with(up) {
            return self.launch(Gate::ByMatrix(up), x, Some((norm_weight, eps)));
        }
        let gate = self.normed_matmul_transposed(x.clone(), norm_weight, eps);
        gelu_tanh_mul(gate, up.normed_matmul_transposed(x, norm_weight, eps))
    }

    /// `gelu_tanh(RMSNorm(x)·Gᵀ) · (RMSNorm(x)·Uᵀ)` for this matrix a stacked `[G; U]` (the MLP's
    /// gate and up, rows stacked at load): [S, k] → [S, rows / 2], one dispatch where the kernels
    /// run.
    pub fn normed_gated_stacked(&self, x: Tensor<2>, norm_weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            return self.launch(Gate::Stacked, x, Some((norm_weight, eps)));
        }
        let both = self.normed_matmul_transposed(x, norm_weight, eps);
        let [s, rows] = both.dims();
        let half = rows / 2;
        gelu_tanh_mul(both.clone().slice([0..s, 0..half]), both.slice([0..s, half..rows]))
    }

    /// Whether `other` can share a gated launch with `self`: same shape, width, groups and scale
    /// layout.
    pub fn pairs_with(&self, other: &AffineMatrix) -> bool {
        self.codes.dims() == other.codes.dims()
            && (self.bits, self.group) == (other.bits, other.group)
            && self.scale_layout() == other.scale_layout()
    }

    /// `x' = x + RMSNorm(delta)·post_norm` and [`Self::gelu_gated_by`] of it: `(x', gelu_tanh(x'·Wᵀ) ·
    /// multiplier)`, `[S, k]` and `[S, rows]`; for one token where the kernels run, one dispatch
    /// (Gemma 4's post-feed-forward update inside its per-layer-input gate).
    pub fn residual_gelu_gated_by(
        &self,
        x: Tensor<2>,
        delta: Tensor<2>,
        post_norm: &Tensor<1>,
        eps: f32,
        multiplier: Tensor<2>,
    ) -> (Tensor<2>, Tensor<2>) {
        self.residual_gelu_gated_by_in_groups(x, delta, post_norm, eps, multiplier, 0)
    }

    /// The same with `rows_per_group` rows a block (0: the tuned default; its test).
    pub(super) fn residual_gelu_gated_by_in_groups(
        &self,
        x: Tensor<2>,
        delta: Tensor<2>,
        post_norm: &Tensor<1>,
        eps: f32,
        multiplier: Tensor<2>,
        rows_per_group: u32,
    ) -> (Tensor<2>, Tensor<2>) {
        if has_fused_kernels(&x.device()) && x.dims()[0] == 1 {
            let (words, layout) = self.words();
            let (updated, product) = <Dispatch as AffineKernels>::affine_residual_gated_by(
                self.codes.clone().into_dispatch(),
                words.clone().into_dispatch(),
                layout,
                x.into_dispatch(),
                delta.into_dispatch(),
                post_norm.clone().into_dispatch(),
                multiplier.into_dispatch(),
                eps,
                self.group,
                self.bits,
                rows_per_group,
            );
            return (Tensor::from_dispatch(updated), Tensor::from_dispatch(product));
        }
        let updated = crate::fused::add_rms_norm(x, delta, post_norm, eps, 1.0);
        let product = self.gelu_gated_by(updated.clone(), multiplier);
        (updated, product)
    }

    /// `gelu_tanh(x·Wᵀ) · multiplier`, multiplier `[S, rows]`: one dispatch where the kernels run.
    pub fn gelu_gated_by(&self, x: Tensor<2>, multiplier: Tensor<2>) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            return self.launch(Gate::ByInput(&multiplier), x, None);
        }
        gelu_tanh_mul(self.matmul_transposed(x), multiplier)
    }

    /// `cap · tanh(x·Wᵀ / cap)`: the tied head's logits with Gemma's final softcap, in the same
    /// dispatch where the kernels run.
    pub fn softcapped_matmul_transposed(&self, x: Tensor<2>, cap: f32) -> Tensor<2> {
        if has_fused_kernels(&x.device()) {
            return self.launch_capped(Gate::None, x, None, Some(cap));
        }
        reference::bounded_tanh(self.matmul_transposed(x).div_scalar(cap)).mul_scalar(cap)
    }

    fn fused_matmul(&self, x: Tensor<2>, norm: Option<(&Tensor<1>, f32)>) -> Tensor<2> {
        self.launch(Gate::None, x, norm)
    }

    fn launch(&self, gate: Gate, x: Tensor<2>, norm: Option<(&Tensor<1>, f32)>) -> Tensor<2> {
        self.launch_capped(gate, x, norm, None)
    }

    fn launch_capped(&self, gate: Gate, x: Tensor<2>, norm: Option<(&Tensor<1>, f32)>, cap: Option<f32>) -> Tensor<2> {
        self.launch_in_groups(gate, x, norm, cap, ProductKernel::Auto, 0)
    }

    /// The product by `kernel`, with `rows_per_group` rows per block of the GEMV-style kernel (0:
    /// the tuned default).
    fn launch_in_groups(
        &self,
        gate: Gate,
        x: Tensor<2>,
        norm: Option<(&Tensor<1>, f32)>,
        cap: Option<f32>,
        kernel: ProductKernel,
        rows_per_group: u32,
    ) -> Tensor<2> {
        // Inputs the kernel does not read are bound to tensors at hand: this matrix in the second
        // matrix's place, its scales in `aux`'s. `aux` is the norm weight or the gate's multiplier
        // (a per-layer-input gate is never normed).
        let second = match &gate {
            Gate::ByMatrix(up) => *up,
            _ => self,
        };
        let up_row_offset = if matches!(gate, Gate::Stacked) { self.rows() / 2 } else { 0 };
        let (aux, eps) = match (norm, &gate) {
            (Some((weight, eps)), _) => (weight.clone().reshape([1, weight.dims()[0]]), eps),
            (None, Gate::ByInput(multiplier)) => ((*multiplier).clone(), 0.0),
            (None, _) => (x.clone(), 0.0),
        };
        debug_assert!(!(norm.is_some() && matches!(gate, Gate::ByInput(_))), "aux holds one of the two");
        let (words, layout) = self.words();
        let (second_words, second_layout) = second.words();
        debug_assert_eq!(layout, second_layout, "a gated launch reads both matrices' scales alike");
        Tensor::from_dispatch(<Dispatch as AffineKernels>::affine_matmul(
            self.codes.clone().into_dispatch(),
            words.clone().into_dispatch(),
            second.codes.clone().into_dispatch(),
            second_words.clone().into_dispatch(),
            layout,
            matches!(gate, Gate::ByMatrix(_) | Gate::Stacked),
            up_row_offset,
            matches!(gate, Gate::ByInput(_)),
            x.into_dispatch(),
            aux.into_dispatch(),
            eps,
            norm.is_some(),
            cap,
            self.group,
            self.bits,
            kernel,
            rows_per_group,
        ))
    }

    /// Rows `ids` of W, dequantized: [S] → [S, k].
    pub fn select_rows(&self, ids: &[u32]) -> Tensor<2> {
        let device = self.codes.device();
        let n = ids.len();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids.to_vec(), [n]), (&device, DType::U32));
        if has_fused_kernels(&device) {
            let mut out = Tensor::empty([n, self.k()], &device);
            self.rows_into(&mut out, &ids, 0);
            return out;
        }
        let Scales::Pairs(pairs) = &self.scales else {
            unreachable!("scale words are uploaded only where the kernels run")
        };
        let picked = AffineMatrix {
            codes: self.codes.clone().select(0, ids.clone()),
            scales: Scales::Pairs(pairs.clone().select(0, ids)),
            group: self.group,
            bits: self.bits,
        };
        picked.dequantize()
    }

    /// Writes into `out` `[n, k]` (in its own buffer, whoever else holds it) the dequantized rows
    /// of the ids `[n]` (u32, on the device) that W holds, W being rows `first_row..first_row +
    /// rows` of a table split in blocks; the other rows of `out` are left as they are. The ids
    /// never reach the host, so the launch can be recorded and replayed on new ids. Cubecl
    /// backends only (elsewhere [`Self::select_rows`] looks rows up from host ids).
    pub fn rows_into(&self, out: &mut Tensor<2>, ids: &Tensor<1, Int>, first_row: usize) {
        assert!(has_fused_kernels(&self.codes.device()), "rows_into runs on the cubecl backends");
        assert_eq!(out.dims(), [ids.dims()[0], self.k()], "rows_into: output shape");
        let (words, layout) = self.words();
        *out = Tensor::from_dispatch(<Dispatch as AffineKernels>::affine_rows(
            self.codes.clone().into_dispatch(),
            words.clone().into_dispatch(),
            layout,
            ids.clone().into_dispatch(),
            out.clone().into_dispatch(),
            first_row,
            self.group,
            self.bits,
        ));
    }

    /// W as f32: [rows, k] (by the row kernel where the kernels run, else tensor operations).
    pub fn dequantize(&self) -> Tensor<2> {
        let [rows, words] = self.codes.dims();
        let Scales::Pairs(pairs) = &self.scales else {
            let device = self.codes.device();
            let ids: Vec<u32> = (0..rows as u32).collect();
            let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [rows]), (&device, DType::U32));
            let mut out = Tensor::empty([rows, self.k()], &device);
            self.rows_into(&mut out, &ids, 0);
            return out;
        };
        let groups = self.k() / self.group;
        let (bits, mask) = (i64::from(self.bits), (1i64 << self.bits) - 1);
        // [rows, words, per_word]: field j of each word.
        let fields: Vec<Tensor<3, Int>> = (0..self.per_word() as i64)
            .map(|j| {
                self.codes
                    .clone()
                    .bitwise_right_shift_scalar(bits * j)
                    .bitwise_and_scalar(mask)
                    .reshape([rows, words, 1])
            })
            .collect();
        let q = Tensor::cat(fields, 2).float().reshape([rows, groups, self.group]);
        let pairs = pairs.clone().reshape([rows, groups, 2]);
        let scales = pairs.clone().slice([0..rows, 0..groups, 0..1]);
        let biases = pairs.slice([0..rows, 0..groups, 1..2]);
        let w = q * scales + biases;
        w.reshape([rows, self.k()])
    }
}

/// `rows` rows of `k` codes of `bits` bits (each row a little-endian bit stream) as 8-bit codes.
pub(super) fn widen_to_bytes(codes: &[u32], rows: usize, k: usize, bits: u32) -> Vec<u32> {
    let words_per_row = k * bits as usize / 32;
    let mask = (1u64 << bits) - 1;
    let mut out = vec![0u32; rows * k / 4];
    for r in 0..rows {
        let row = &codes[r * words_per_row..(r + 1) * words_per_row];
        for j in 0..k {
            let bit = j * bits as usize;
            let (word, shift) = (bit / 32, bit % 32);
            let mut wide = u64::from(row[word]);
            if shift + bits as usize > 32 {
                wide |= u64::from(row[word + 1]) << 32;
            }
            out[(r * k + j) / 4] |= (((wide >> shift) & mask) as u32) << (8 * (j % 4));
        }
    }
    out
}

/// What multiplies `gelu_tanh(x·Wᵀ)` in a gated launch.
pub(super) enum Gate<'a> {
    None,
    /// `x·W_upᵀ`, a second matrix multiplied in the same pass.
    ByMatrix(&'a AffineMatrix),
    /// This matrix is a stacked `[gate; up]`: its second half's rows are the up matrix's.
    Stacked,
    /// A given `[S, rows]` tensor.
    ByInput(&'a Tensor<2>),
}
