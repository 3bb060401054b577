//! ggml's tensor element types and their dequantization to f32.
//!
//! Block formats store a run of `block_size` consecutive values (along a row, `ne[0]`) in
//! `type_size` bytes: scales as f16 (or f32 for Q8_K) followed by packed integer codes. The
//! arithmetic follows ggml's reference `dequantize_row_*` (and gguf-py's numpy port, which gives the
//! same f32 results): the scale products are rounded to f32 first, then multiplied by the code,
//! with no fused multiply-add, so values are bit-identical to both.

use std::fmt;

use half::{bf16, f16};

/// A tensor element type, by its id in the file (`enum ggml_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    BF16,
    TQ1_0,
    TQ2_0,
    Mxfp4,
    Nvfp4,
    Q1_0,
}

/// Values per block in the K-quant formats.
const QK_K: usize = 256;

impl GgmlType {
    /// The type with this id, if ggml defines one (ids 4, 5 and 31–33, 36–38 were removed).
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            16 => Iq2Xxs,
            17 => Iq2Xs,
            18 => Iq3Xxs,
            19 => Iq1S,
            20 => Iq4Nl,
            21 => Iq3S,
            22 => Iq2S,
            23 => Iq4Xs,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => Iq1M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            39 => Mxfp4,
            40 => Nvfp4,
            41 => Q1_0,
            _ => return None,
        })
    }

    /// (values per block, bytes per block), as ggml's type traits give them.
    pub fn block_layout(self) -> (usize, usize) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 40),
            Q2K => (QK_K, 84),
            Q3K => (QK_K, 110),
            Q4K => (QK_K, 144),
            Q5K => (QK_K, 176),
            Q6K => (QK_K, 210),
            Q8K => (QK_K, 292),
            Iq2Xxs => (QK_K, 66),
            Iq2Xs => (QK_K, 74),
            Iq3Xxs => (QK_K, 98),
            Iq1S => (QK_K, 50),
            Iq4Nl => (32, 18),
            Iq3S => (QK_K, 110),
            Iq2S => (QK_K, 82),
            Iq4Xs => (QK_K, 136),
            Iq1M => (QK_K, 56),
            TQ1_0 => (QK_K, 54),
            TQ2_0 => (QK_K, 66),
            Mxfp4 => (32, 17),
            Nvfp4 => (64, 36),
            Q1_0 => (128, 18),
        }
    }

    /// Whether [`dequantize`] reads this type.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | BF16
                | F64
                | I8
                | I16
                | I32
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q2K
                | Q3K
                | Q4K
                | Q5K
                | Q6K
                | Q8K
        )
    }

    /// llama.cpp's spelling (`Q4_K`, `BF16`, …).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            Iq2Xxs => "IQ2_XXS",
            Iq2Xs => "IQ2_XS",
            Iq3Xxs => "IQ3_XXS",
            Iq1S => "IQ1_S",
            Iq4Nl => "IQ4_NL",
            Iq3S => "IQ3_S",
            Iq2S => "IQ2_S",
            Iq4Xs => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            Iq1M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            Mxfp4 => "MXFP4",
            Nvfp4 => "NVFP4",
            Q1_0 => "Q1_0",
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Appends the f32 values of `bytes` (whole blocks of `ty`) to `out`. Returns false, appending
/// nothing, for a type [`GgmlType::can_dequantize`] rejects or when `bytes` is not whole blocks.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut Vec<f32>) -> bool {
    let (values, size) = ty.block_layout();
    if !ty.can_dequantize() || !bytes.len().is_multiple_of(size) {
        return false;
    }
    out.reserve(bytes.len() / size * values);
    let blocks = bytes.chunks_exact(size);
    use GgmlType::*;
    match ty {
        F32 => out.extend(blocks.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        F16 => out.extend(blocks.map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())),
        BF16 => out.extend(blocks.map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())),
        F64 => out.extend(blocks.map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f32)),
        I8 => out.extend(blocks.map(|b| f32::from(b[0] as i8))),
        I16 => out.extend(blocks.map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])))),
        I32 => out.extend(blocks.map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)),
        Q4_0 => blocks.for_each(|b| q4_0(b, out)),
        Q4_1 => blocks.for_each(|b| q4_1(b, out)),
        Q5_0 => blocks.for_each(|b| q5_0(b, out)),
        Q5_1 => blocks.for_each(|b| q5_1(b, out)),
        Q8_0 => blocks.for_each(|b| q8_0(b, out)),
        Q2K => blocks.for_each(|b| q2_k(b, out)),
        Q3K => blocks.for_each(|b| q3_k(b, out)),
        Q4K => blocks.for_each(|b| q4_k(b, out)),
        Q5K => blocks.for_each(|b| q5_k(b, out)),
        Q6K => blocks.for_each(|b| q6_k(b, out)),
        Q8K => blocks.for_each(|b| q8_k(b, out)),
        _ => return false,
    }
    true
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// `d: f16, qs: [u8; 16]`: low nibbles are values 0..16, high nibbles 16..32; `x = d·(q − 8)`.
fn q4_0(b: &[u8], out: &mut Vec<f32>) {
    let d = half(b, 0);
    let qs = &b[2..18];
    out.extend(qs.iter().map(|&q| d * ((q & 0x0F) as i32 - 8) as f32));
    out.extend(qs.iter().map(|&q| d * ((q >> 4) as i32 - 8) as f32));
}

/// `d, m: f16, qs: [u8; 16]`: `x = d·q + m`.
fn q4_1(b: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (half(b, 0), half(b, 2));
    let qs = &b[4..20];
    out.extend(qs.iter().map(|&q| d * (q & 0x0F) as f32 + m));
    out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
}

/// Bit `j` of the little-endian u32 `qh` is the fifth bit of value `j`.
fn fifth_bits(qh: &[u8]) -> u32 {
    u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]])
}

/// `d: f16, qh: u32, qs: [u8; 16]`: `x = d·(q − 16)` with 5-bit q.
fn q5_0(b: &[u8], out: &mut Vec<f32>) {
    let d = half(b, 0);
    let qh = fifth_bits(&b[2..6]);
    let qs = &b[6..22];
    for half_index in 0..2 {
        for (j, &q) in qs.iter().enumerate() {
            let low = if half_index == 0 { q & 0x0F } else { q >> 4 };
            let high = ((qh >> (j + 16 * half_index)) & 1) as u8;
            out.push(d * ((low | (high << 4)) as i32 - 16) as f32);
        }
    }
}

/// `d, m: f16, qh: u32, qs: [u8; 16]`: `x = d·q + m` with 5-bit q.
fn q5_1(b: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (half(b, 0), half(b, 2));
    let qh = fifth_bits(&b[4..8]);
    let qs = &b[8..24];
    for half_index in 0..2 {
        for (j, &q) in qs.iter().enumerate() {
            let low = if half_index == 0 { q & 0x0F } else { q >> 4 };
            let high = ((qh >> (j + 16 * half_index)) & 1) as u8;
            out.push(d * (low | (high << 4)) as f32 + m);
        }
    }
}

/// `d: f16, qs: [i8; 32]`: `x = d·q`.
fn q8_0(b: &[u8], out: &mut Vec<f32>) {
    let d = half(b, 0);
    out.extend(b[2..34].iter().map(|&q| (q as i8) as f32 * d));
}

/// `scales: [u8; 16]` (low nibble scale, high nibble min), `qs: [u8; 64]` (2-bit), `d, dmin: f16`.
fn q2_k(b: &[u8], out: &mut Vec<f32>) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (half(b, 80), half(b, 82));
    // Sub-block s (16 values) reads 2-bit field (s / 2) % 4 of bytes 32·(s / 8) + 16·(s % 2) …
    for (s, &sc) in scales.iter().enumerate() {
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        let shift = 2 * ((s / 2) % 4);
        let start = 32 * (s / 8) + 16 * (s % 2);
        out.extend(qs[start..start + 16].iter().map(|&q| dl * ((q >> shift) & 3) as f32 - ml));
    }
}

/// `hmask: [u8; 32]` (third bit, set = no offset), `qs: [u8; 64]` (2-bit), `scales: [u8; 12]`
/// (16 six-bit scales, offset 32), `d: f16`.
fn q3_k(b: &[u8], out: &mut Vec<f32>) {
    let (hmask, qs, packed) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = half(b, 108);
    for s in 0..16 {
        // Low 4 bits: nibble (s / 8) of byte s % 8; high 2 bits: field s / 4 of byte 8 + s % 4.
        let low = (packed[s % 8] >> (4 * (s / 8))) & 0x0F;
        let high = (packed[8 + s % 4] >> (2 * (s / 4))) & 0x03;
        let scale = (low | (high << 4)) as i32 - 32;
        let dl = d * scale as f32;
        let shift = 2 * ((s / 2) % 4);
        let start = 32 * (s / 8) + 16 * (s % 2);
        // hmask bit s / 2 of byte (s % 2)·16 + l.
        let bit = s / 2;
        for l in 0..16 {
            let q = ((qs[start + l] >> shift) & 3) as i32;
            let h = (hmask[16 * (s % 2) + l] >> bit) & 1;
            let q = q - if h == 1 { 0 } else { 4 };
            out.push(dl * q as f32);
        }
    }
}

/// The 8 six-bit (scale, min) pairs of Q4_K/Q5_K from their 12 packed bytes.
pub(crate) fn scale_min_k4(packed: &[u8]) -> [(u8, u8); 8] {
    let mut pairs = [(0, 0); 8];
    for (j, pair) in pairs.iter_mut().enumerate() {
        *pair = if j < 4 {
            (packed[j] & 63, packed[j + 4] & 63)
        } else {
            ((packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4), (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4))
        };
    }
    pairs
}

/// `d, dmin: f16, scales: [u8; 12], qs: [u8; 128]`: 8 sub-blocks of 32, `x = (d·sc)·q − dmin·m`.
fn q4_k(b: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let pairs = scale_min_k4(&b[4..16]);
    let qs = &b[16..144];
    for (s, &(sc, m)) in pairs.iter().enumerate() {
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        // Sub-blocks 2i and 2i+1 share bytes 32i..32i+32: low then high nibbles.
        let bytes = &qs[32 * (s / 2)..32 * (s / 2) + 32];
        let shift = 4 * (s % 2);
        out.extend(bytes.iter().map(|&q| dl * ((q >> shift) & 0x0F) as f32 - ml));
    }
}

/// `d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]`: Q4_K plus a fifth bit from qh
/// (bit s of byte l for sub-block s).
fn q5_k(b: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let pairs = scale_min_k4(&b[4..16]);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for (s, &(sc, m)) in pairs.iter().enumerate() {
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        let bytes = &qs[32 * (s / 2)..32 * (s / 2) + 32];
        let shift = 4 * (s % 2);
        for (l, &q) in bytes.iter().enumerate() {
            let value = ((q >> shift) & 0x0F) | (((qh[l] >> s) & 1) << 4);
            out.push(dl * value as f32 - ml);
        }
    }
}

/// `ql: [u8; 128]` (low 4 bits), `qh: [u8; 64]` (high 2 bits), `scales: [i8; 16]`, `d: f16`:
/// `x = (d·sc)·(q − 32)`.
fn q6_k(b: &[u8], out: &mut Vec<f32>) {
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = half(b, 208);
    // Halves of 128 values; in each, value 32k + l (k < 4) has low bits from nibble k / 2 of
    // ql[64·half + 32·(k % 2) + l] and high bits from field k of qh[32·half + l].
    for half_index in 0..2 {
        for k in 0..4 {
            for group in 0..2 {
                let s = 8 * half_index + 2 * k + group;
                let dl = d * (scales[s] as i8) as f32;
                for l in 16 * group..16 * group + 16 {
                    let low = (ql[64 * half_index + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
                    let high = (qh[32 * half_index + l] >> (2 * k)) & 0x03;
                    let q = (low | (high << 4)) as i32 - 32;
                    out.push(dl * q as f32);
                }
            }
        }
    }
}

/// `d: f32, qs: [i8; 256], bsums: [i16; 16]`: `x = d·q` (the sums only speed up dot products).
fn q8_k(b: &[u8], out: &mut Vec<f32>) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    out.extend(b[4..260].iter().map(|&q| d * (q as i8) as f32));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_le_bytes()
    }

    #[test]
    fn q8_0_and_q4_0_by_hand() {
        let mut block = f16_bytes(0.5).to_vec();
        block.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let mut out = Vec::new();
        assert!(dequantize(GgmlType::Q8_0, &block, &mut out));
        assert_eq!(out[0], -8.0);
        assert_eq!(out[31], 7.5);

        let mut block = f16_bytes(2.0).to_vec();
        block.extend([0x1F; 16]); // low nibble 15, high nibble 1
        out.clear();
        assert!(dequantize(GgmlType::Q4_0, &block, &mut out));
        assert_eq!((out[0], out[16]), (14.0, -14.0));
    }

    #[test]
    fn q8_k_by_hand() {
        let mut block = 0.25f32.to_le_bytes().to_vec();
        block.extend((0..256).map(|i| (i as u8).wrapping_sub(128)));
        block.extend([0; 32]);
        let mut out = Vec::new();
        assert!(dequantize(GgmlType::Q8K, &block, &mut out));
        assert_eq!(out.len(), 256);
        assert_eq!((out[0], out[128], out[255]), (-32.0, 0.0, 31.75));
    }

    #[test]
    fn partial_blocks_and_unsupported_types_are_refused() {
        let mut out = Vec::new();
        assert!(!dequantize(GgmlType::Q4K, &[0; 143], &mut out));
        assert!(!dequantize(GgmlType::Iq2Xxs, &[0; 66], &mut out));
        assert!(out.is_empty());
    }
}
