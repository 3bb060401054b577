//! How a packed matrix's scales and biases lie in its scale words on the device
//! ([`ScaleLayout`], chosen on the host), and how the kernels read a group's scale and bias from
//! them (the `#[cube]` readers, keyed by the layout's kind). Shared by the GEMV-style product
//! ([`crate::affine`]), the prompt GEMM ([`crate::affine`]'s `gemm.rs`) and the row lookups.

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
    /// `[rows, ⌈groups/4⌉ + ⌈runs/2⌉]` u32: a symmetric format whose scales are products of one
    /// half factor a run of [`FACTORED_RUN`] groups and a signed byte a group (Q6_K's `d·sc`,
    /// offset 32: 6.56 bits a weight, the file's own size). A row's bytes first (four a word, the
    /// first group in the low byte), then its halves (two a word, the even run in the low half);
    /// the bias `−offset · scale`.
    Factored { offset: u32 },
    /// `[rows, groups]` u32: each group's f32 scale, the bias `−offset · scale`: a symmetric
    /// format whose scales are products no half holds and that do not factor as above.
    Single { offset: u32 },
}

/// Groups that share one half factor in [`ScaleLayout::Factored`] (Q6_K: 16 groups of 16 values,
/// one `d` a 256-value block).
pub const FACTORED_RUN: usize = 16;

impl ScaleLayout {
    /// The smallest layout that holds these scales and biases exactly: when every bias is
    /// `−offset · scale` for one integer offset (bit for bit, so the kernels' `−offset · scale`
    /// gives the same f32), [`Self::Half`] if every scale is a finite f16, else [`Self::Factored`]
    /// if every run of a row's groups factors exactly, else [`Self::Single`]; otherwise
    /// [`Self::Pairs`]. `groups` is the groups of a row (runs do not cross rows).
    pub fn fitting(scales: &[f32], biases: &[f32], bits: u32, groups: usize) -> Self {
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
        if halves {
            ScaleLayout::Half { offset }
        } else if factored_runs(scales, groups).all(|run| run.is_some()) {
            ScaleLayout::Factored { offset }
        } else {
            ScaleLayout::Single { offset }
        }
    }

    pub(crate) fn offset(self) -> f32 {
        match self {
            ScaleLayout::Pairs => 0.0,
            ScaleLayout::Half { offset } | ScaleLayout::Factored { offset } | ScaleLayout::Single { offset } => {
                offset as f32
            }
        }
    }

    /// The kernels' `scale_kind` (one of the `SCALE_*` kinds below, which the kernels compare
    /// at compile time).
    pub(crate) fn kind(self) -> u32 {
        match self {
            ScaleLayout::Pairs => SCALE_PAIRS,
            ScaleLayout::Half { .. } => SCALE_HALF,
            ScaleLayout::Factored { .. } => SCALE_FACTORED,
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
            ScaleLayout::Factored { .. } => {
                let (byte_words, half_words) = factored_row_words(groups);
                let mut words = Vec::with_capacity(scales.len() / groups.max(1) * (byte_words + half_words));
                for row in scales.chunks_exact(groups.max(1)) {
                    let runs: Vec<(u16, Vec<i8>)> =
                        factored_runs(row, groups).map(|run| run.expect("checked by `fitting`")).collect();
                    let bytes: Vec<u8> = runs.iter().flat_map(|(_, codes)| codes.iter().map(|&c| c as u8)).collect();
                    words.extend(bytes.chunks(4).map(|four| {
                        four.iter().enumerate().fold(0u32, |word, (i, &b)| word | (u32::from(b) << (8 * i)))
                    }));
                    words.extend(
                        runs.chunks(2)
                            .map(|pair| u32::from(pair[0].0) | pair.get(1).map_or(0, |(d, _)| u32::from(*d) << 16)),
                    );
                }
                (words, byte_words + half_words)
            }
        }
    }
}

/// The words a row of `groups` factored scales takes: its bytes, then its halves.
fn factored_row_words(groups: usize) -> (usize, usize) {
    (groups.div_ceil(4), groups.div_ceil(FACTORED_RUN).div_ceil(2))
}

/// Each run of [`FACTORED_RUN`] groups of each row of `groups` (the last run of a row may be
/// shorter), factored as one half's bits and a signed byte a group whose product is each scale
/// exactly, or `None` where a run does not factor so.
fn factored_runs(scales: &[f32], groups: usize) -> impl Iterator<Item = Option<(u16, Vec<i8>)>> + '_ {
    scales.chunks_exact(groups.max(1)).flat_map(|row| row.chunks(FACTORED_RUN)).map(factor_run)
}

/// One half `d` and bytes `c` with `d · c = s` exactly for each scale `s` of a run. The scale of
/// largest magnitude is `d` times some byte (−128 only with `d` of the other sign): each is tried,
/// the largest first (a quantizer's scales fill the byte's range, so an early try fits).
fn factor_run(run: &[f32]) -> Option<(u16, Vec<i8>)> {
    let largest = run.iter().copied().fold(0f32, |m, s| if s.abs() > m.abs() { s } else { m });
    if largest == 0.0 {
        return Some((0, vec![0; run.len()]));
    }
    (1..=128i16).rev().flat_map(|magnitude| [-magnitude, magnitude]).filter(|&c| c <= 127).find_map(|byte| {
        let d = largest / f32::from(byte);
        let half = half::f16::from_f32(d);
        if half.to_f32() != d || !d.is_normal() {
            return None;
        }
        run.iter()
            .map(|&s| {
                let c = s / d;
                let fits = c.fract() == 0.0 && (-128.0..=127.0).contains(&c) && c * d == s;
                fits.then_some(c as i8)
            })
            .collect::<Option<Vec<i8>>>()
            .map(|codes| (half.to_bits(), codes))
    })
}

/// Scale words of f32 (scale, bias) pairs ([`ScaleLayout::Pairs`]).
pub(crate) const SCALE_PAIRS: u32 = 0;
/// Two f16 scales a word, the bias `−offset · scale` ([`ScaleLayout::Half`]).
pub(crate) const SCALE_HALF: u32 = 1;
/// One f32 scale a word, the bias `−offset · scale` ([`ScaleLayout::Single`]).
pub(crate) const SCALE_SINGLE: u32 = 2;
/// A byte a group times a half a run, the bias `−offset · scale` ([`ScaleLayout::Factored`]).
pub(crate) const SCALE_FACTORED: u32 = 3;

/// The scale of group `group_in_row` of row `row` of a packed matrix, from its scale words laid
/// out as `scale_kind` says (see [`ScaleLayout`]): f32 bits of (scale, bias) pairs; two
/// f16 scales a word, `(groups + 1) / 2` words a row, the even group in the low half; a signed
/// byte a group times a half a run of 16 groups; or one f32 scale a word.
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
    } else if scale_kind == SCALE_FACTORED {
        // A row: ⌈groups/4⌉ words of bytes, then ⌈runs/2⌉ words of halves (runs of 16 groups).
        let byte_words = (groups + 3) / 4;
        let row_start = row * (byte_words + ((groups + 15) / 16 + 1) / 2);
        let byte = (scale_words[(row_start + group_in_row / 4) as usize] >> ((group_in_row % 4) * 8)) & 0xff;
        // The byte as signed: −256 where its top bit is set.
        let factor = f32::cast_from(byte) - 256.0 * f32::cast_from(byte >> 7);
        let run = group_in_row / 16;
        let half = (scale_words[(row_start + byte_words + run / 2) as usize] >> ((run % 2) * 16)) & 0xffff;
        half_to_f32(half) * factor
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
