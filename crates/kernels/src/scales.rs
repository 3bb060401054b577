//! How a packed matrix's scales and biases lie in its scale words on the device
//! ([`ScaleLayout`], chosen on the host), and how the kernels read a group's scale and bias from
//! them (the `#[cube]` readers, keyed by the layout's kind). Shared by the GEMV-style product
//! ([`crate::affine`]), the prompt GEMM ([`crate::affine_gemm`]) and the row lookups.

use cubecl::prelude::*;

/// How a packed matrix's scales (and biases) lie in its scale words on the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScaleLayout {
    /// `[rows, 2·groups]` u32: the f32 bits of each group's scale, then its bias (MLX's affine
    /// groups, GGUF's Q4_K and Q5_K with their minimums).
    Pairs,
    /// `[rows, ⌈groups/2⌉]` u32: two f16 scales a word (the even group in the low half), each
    /// group's bias `−offset · scale`: a symmetric format with half scales kept at its own size
    /// (Q4_0: 4.5 bits a weight, offset 8; Q8_0: 8.5 bits, offset 128; Q5_0, offset 16).
    Half { offset: u32 },
    /// `[rows, groups]` u32: each group's f32 scale, the bias `−offset · scale`: a symmetric
    /// format whose scales are products no half holds (Q6_K's `d·sc`, offset 32).
    Single { offset: u32 },
}

impl ScaleLayout {
    /// The smallest layout that holds these scales and biases exactly: when every bias is
    /// `−offset · scale` for one integer offset (bit for bit, so the kernels' `−offset · scale`
    /// gives the same f32), [`Self::Half`] if every scale is a finite f16, else [`Self::Single`];
    /// otherwise [`Self::Pairs`].
    pub fn fitting(scales: &[f32], biases: &[f32], bits: u32) -> Self {
        let Some((&scale, &bias)) = scales.iter().zip(biases).find(|(s, _)| **s != 0.0) else {
            return ScaleLayout::Pairs;
        };
        let offset = -bias / scale;
        let exact_offset = offset.fract() == 0.0 && (0.0..=f32::from(1u16 << bits.min(15))).contains(&offset);
        if !exact_offset || !scales.iter().zip(biases).all(|(&s, &b)| s.is_finite() && -offset * s == b) {
            return ScaleLayout::Pairs;
        }
        let halves = scales.iter().all(|&s| half::f16::from_f32(s).to_f32().to_bits() == s.to_bits());
        let offset = offset as u32;
        if halves { ScaleLayout::Half { offset } } else { ScaleLayout::Single { offset } }
    }

    pub(crate) fn offset(self) -> f32 {
        match self {
            ScaleLayout::Pairs => 0.0,
            ScaleLayout::Half { offset } | ScaleLayout::Single { offset } => offset as f32,
        }
    }

    /// The kernels' `scale_kind` (one of the `SCALE_*` kinds below, which the kernels compare
    /// at compile time).
    pub(crate) fn kind(self) -> u32 {
        match self {
            ScaleLayout::Pairs => SCALE_PAIRS,
            ScaleLayout::Half { .. } => SCALE_HALF,
            ScaleLayout::Single { .. } => SCALE_SINGLE,
        }
    }

    /// The scale words of rows of `groups` groups, and how many a row has.
    pub(crate) fn words(self, scales: &[f32], biases: &[f32], groups: usize) -> (Vec<u32>, usize) {
        match self {
            ScaleLayout::Pairs => {
                (scales.iter().zip(biases).flat_map(|(s, b)| [s.to_bits(), b.to_bits()]).collect(), 2 * groups)
            }
            ScaleLayout::Single { .. } => (scales.iter().map(|s| s.to_bits()).collect(), groups),
            ScaleLayout::Half { .. } => {
                let half = |s: f32| u32::from(half::f16::from_f32(s).to_bits());
                let words = scales
                    .chunks_exact(groups.max(1))
                    .flat_map(|row| {
                        row.chunks(2).map(move |pair| half(pair[0]) | pair.get(1).map_or(0, |&s| half(s) << 16))
                    })
                    .collect();
                (words, groups.div_ceil(2))
            }
        }
    }
}

/// Scale words of f32 (scale, bias) pairs ([`ScaleLayout::Pairs`]).
pub(crate) const SCALE_PAIRS: u32 = 0;
/// Two f16 scales a word, the bias `−offset · scale` ([`ScaleLayout::Half`]).
pub(crate) const SCALE_HALF: u32 = 1;
/// One f32 scale a word, the bias `−offset · scale` ([`ScaleLayout::Single`]).
pub(crate) const SCALE_SINGLE: u32 = 2;

/// The scale of group `group_in_row` of row `row` of a packed matrix, from its scale words laid
/// out as `scale_kind` says (see [`ScaleLayout`]): f32 bits of (scale, bias) pairs; two
/// f16 scales a word, `(groups + 1) / 2` words a row, the even group in the low half; or one f32
/// scale a word.
#[cube]
// `div_ceil` is not a cube function.
#[allow(clippy::manual_div_ceil)]
pub(crate) fn group_scale(
    scale_words: &[u32],
    row: u32,
    group_in_row: u32,
    groups: u32,
    #[comptime] scale_kind: u32,
) -> f32 {
    if scale_kind == SCALE_HALF {
        let word = scale_words[(row * ((groups + 1) / 2) + group_in_row / 2) as usize];
        half_to_f32((word >> ((group_in_row % 2) * 16)) & 0xffff)
    } else if scale_kind == SCALE_SINGLE {
        f32::reinterpret(scale_words[(row * groups + group_in_row) as usize])
    } else {
        f32::reinterpret(scale_words[(2 * (row * groups + group_in_row)) as usize])
    }
}

/// The bias of the same group: the pair's second value, or `−offset · scale` for a symmetric
/// format (Q4_0's zero point 8, Q6_K's 32).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn group_bias(
    scale_words: &[u32],
    row: u32,
    group_in_row: u32,
    groups: u32,
    scale: f32,
    offset: f32,
    #[comptime] scale_kind: u32,
) -> f32 {
    if scale_kind == SCALE_PAIRS {
        f32::reinterpret(scale_words[(2 * (row * groups + group_in_row) + 1) as usize])
    } else {
        -offset * scale
    }
}

/// An IEEE half's bits (low 16 of `bits`) as f32, exactly: normal and subnormal values and zeros
/// (the packed scales are finite; infinities and NaN are never stored).
#[cube]
pub(crate) fn half_to_f32(bits: u32) -> f32 {
    let exponent = (bits >> 10) & 0x1f;
    let mantissa = bits & 0x3ff;
    // Subnormal (and zero): mantissa · 2⁻²⁴, exact in f32.
    let mut magnitude = f32::cast_from(mantissa) * 5.960_464_5e-8;
    if exponent != 0 {
        magnitude = f32::reinterpret(((exponent + 112) << 23) | (mantissa << 13));
    }
    if (bits & 0x8000) != 0 {
        magnitude = -magnitude;
    }
    magnitude
}
