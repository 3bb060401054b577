//! GGUF blocks repacked into affine groups, the layout of MLX's quantization (codes as a
//! little-endian bit stream per row, one `scale·q + bias` per group), so that the same fused
//! kernels multiply both formats and no GGUF matrix is widened to f32.
//!
//! Every supported block format is an affine group once its codes are read as unsigned:
//!
//! | ggml | value | repacked as |
//! |---|---|---|
//! | Q4_0 | `d·(q − 8)` | 4 bits, groups of 32, `(d, −8d)` |
//! | Q4_1 | `d·q + m` | 4 bits, groups of 32, `(d, m)` |
//! | Q4_K | `(d·sc)·q − dmin·m` | 4 bits, groups of 32, `(d·sc, −dmin·m)` |
//! | Q5_0 | `d·(q − 16)` | 8 bits, groups of 32, `(d, −16d)` |
//! | Q5_1 | `d·q + m` | 8 bits, groups of 32, `(d, m)` |
//! | Q5_K | `(d·sc)·q − dmin·m` | 8 bits, groups of 32 |
//! | Q6_K | `(d·sc)·(q − 32)` | 6 bits, groups of 16, `(d·sc, −32·d·sc)` |
//! | Q8_0 | `d·q`, q signed | 8 bits, groups of 32, codes `q + 128`, `(d, −128d)` |
//!
//! 5-bit codes travel in 8-bit containers; 6-bit codes (Q6_K) stay 6 bits in each row's bit stream
//! (MLX's layout for odd widths), which the kernels read in chunks of 3 words.
//! Host dequantization of the repacked tensor equals ggml's reference exactly (bit for bit, except
//! that `−0.0` may come out as `+0.0`): the products `d·sc` and `dmin·m` are formed in f32 as ggml
//! forms them, and where the offset is folded into the bias (`−8d`, `−16d`, `−32·d·sc`, `−128d`)
//! every intermediate value is exact.

use half::f16;

use crate::WeightsError;
use crate::mlx::{AffineParams, AffineTensor};
use crate::quant::GgmlType;

/// The affine layout a ggml type repacks into, if it does.
pub fn affine_params(ty: GgmlType) -> Option<AffineParams> {
    use GgmlType::*;
    let (bits, group_size) = match ty {
        Q4_0 | Q4_1 | Q4K => (4, 32),
        Q5_0 | Q5_1 | Q5K | Q8_0 => (8, 32),
        Q6K => (6, 16),
        _ => return None,
    };
    Some(AffineParams { group_size, bits })
}

/// `rows` rows of `cols` values stored as whole blocks of `ty` in `bytes`, repacked. `None` when
/// `ty` has no affine form ([`affine_params`]).
pub fn to_affine(
    name: &str,
    ty: GgmlType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Option<AffineTensor>, WeightsError> {
    let Some(params) = affine_params(ty) else { return Ok(None) };
    let (block_values, block_bytes) = ty.block_layout();
    let bad = |reason: String| WeightsError::Quantization { name: name.to_string(), reason };
    if !cols.is_multiple_of(block_values) || bytes.len() != rows * cols / block_values * block_bytes {
        return Err(bad(format!(
            "{} bytes are not {rows} rows of {cols} {ty} values ({block_values} values in {block_bytes} bytes a block)",
            bytes.len()
        )));
    }
    // Blocks hold whole groups and whole words, so the tensor repacks block by block into
    // consecutive words and groups, rows included.
    let blocks = rows * cols / block_values;
    let words_per_block = block_values * params.bits as usize / 32;
    let groups_per_block = block_values / params.group_size;
    let mut words = vec![0u32; blocks * words_per_block];
    let mut scales = vec![0f32; blocks * groups_per_block];
    let mut biases = vec![0f32; blocks * groups_per_block];
    let outputs = words
        .chunks_exact_mut(words_per_block)
        .zip(scales.chunks_exact_mut(groups_per_block).zip(biases.chunks_exact_mut(groups_per_block)));
    for (block, (words, (scales, biases))) in bytes.chunks_exact(block_bytes).zip(outputs) {
        repack_block(ty, block, words, scales, biases);
    }
    let words_per_row = cols * params.bits as usize / 32;
    let groups_per_row = cols / params.group_size;
    AffineTensor::new(
        name,
        params,
        (vec![rows, words_per_row], words),
        (vec![rows, groups_per_row], scales),
        (vec![rows, groups_per_row], biases),
    )
    .map(Some)
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Eight bytes, little-endian, as a u64.
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// The nibbles in the low 4 bits of each byte of `x`, first byte first, as one word of 4-bit
/// codes (little-endian fields).
fn nibble_word(x: u64) -> u32 {
    let mut n = x & 0x0F0F_0F0F_0F0F_0F0F;
    n = (n | (n >> 4)) & 0x00FF_00FF_00FF_00FF;
    n = (n | (n >> 8)) & 0x0000_FFFF_0000_FFFF;
    (n | (n >> 16)) as u32
}

/// 8 × `words.len()` 4-bit codes: the low nibbles of `qs` (8 bytes a word), or the high ones.
fn nibble_words(qs: &[u8], high: bool, words: &mut [u32]) {
    let shift = if high { 4 } else { 0 };
    for (i, word) in words.iter_mut().enumerate() {
        *word = nibble_word(u64_at(qs, 8 * i) >> shift);
    }
}

/// 8-bit codes below 64 (four a word, the first in the low byte) as a 6-bit little-endian bit
/// stream: every 16 codes into 3 words.
fn pack_six_bit(bytes: &[u32], words: &mut [u32]) {
    for (sixteen, out) in bytes.chunks_exact(4).zip(words.chunks_exact_mut(3)) {
        let mut stream: u128 = 0;
        for (j, code) in sixteen.iter().flat_map(|w| w.to_le_bytes()).enumerate() {
            stream |= u128::from(code & 0x3f) << (6 * j);
        }
        for (i, word) in out.iter_mut().enumerate() {
            *word = (stream >> (32 * i)) as u32;
        }
    }
}

/// Eight 8-bit codes (first in the low byte) into words `at` and `at + 1`.
fn put_codes(words: &mut [u32], at: usize, codes: u64) {
    words[at] = codes as u32;
    words[at + 1] = (codes >> 32) as u32;
}

const LOW_NIBBLES: u64 = 0x0F0F_0F0F_0F0F_0F0F;
const LOW_BITS: u64 = 0x0101_0101_0101_0101;

/// Bit i of a byte moved to bit 4 of byte i: Q5_0/Q5_1's fifth bits, eight values at a time.
const FIFTH_BITS: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut bit = 0;
        while bit < 8 {
            table[byte] |= (((byte >> bit) & 1) as u64) << (8 * bit + 4);
            bit += 1;
        }
        byte += 1;
    }
    table
};

/// One block's codes as words and its groups' scales and biases.
fn repack_block(ty: GgmlType, b: &[u8], words: &mut [u32], scales: &mut [f32], biases: &mut [f32]) {
    use GgmlType::*;
    match ty {
        // Values 0..16 are the low nibbles of the 16 code bytes, 16..32 the high ones.
        Q4_0 | Q4_1 => {
            let qs = if ty == Q4_0 { &b[2..18] } else { &b[4..20] };
            nibble_words(qs, false, &mut words[0..2]);
            nibble_words(qs, true, &mut words[2..4]);
            let d = half(b, 0);
            (scales[0], biases[0]) = if ty == Q4_0 { (d, -8.0 * d) } else { (d, half(b, 2)) };
        }
        Q5_0 | Q5_1 => {
            let (qh, qs) = if ty == Q5_0 { (&b[2..6], &b[6..22]) } else { (&b[4..8], &b[8..24]) };
            // Value j: nibble j of the code bytes (low nibbles first), fifth bit = bit j of qh.
            for i in 0..2 {
                let x = u64_at(qs, 8 * i);
                put_codes(words, 2 * i, (x & LOW_NIBBLES) | FIFTH_BITS[qh[i] as usize]);
                put_codes(words, 4 + 2 * i, ((x >> 4) & LOW_NIBBLES) | FIFTH_BITS[qh[2 + i] as usize]);
            }
            let d = half(b, 0);
            (scales[0], biases[0]) = if ty == Q5_0 { (d, -16.0 * d) } else { (d, half(b, 2)) };
        }
        Q8_0 => {
            // Signed q as unsigned q + 128: the top bit flipped.
            for i in 0..4 {
                put_codes(words, 2 * i, u64_at(b, 2 + 8 * i) ^ 0x8080_8080_8080_8080);
            }
            let d = half(b, 0);
            (scales[0], biases[0]) = (d, -128.0 * d);
        }
        Q4K | Q5K => {
            let (d, dmin) = (half(b, 0), half(b, 2));
            let pairs = crate::quant::scale_min_k4(&b[4..16]);
            for (s, &(sc, m)) in pairs.iter().enumerate() {
                scales[s] = d * sc as f32;
                biases[s] = -(dmin * m as f32);
            }
            if ty == Q4K {
                // Sub-blocks 2i and 2i+1 share bytes 32i..32i+32: low then high nibbles.
                let qs = &b[16..144];
                for pair in 0..4 {
                    let bytes = &qs[32 * pair..32 * pair + 32];
                    nibble_words(bytes, false, &mut words[8 * pair..8 * pair + 4]);
                    nibble_words(bytes, true, &mut words[8 * pair + 4..8 * pair + 8]);
                }
            } else {
                // As Q4_K, with the fifth bit of value l of sub-block s in bit s of qh[l].
                let (qh, qs) = (&b[16..48], &b[48..176]);
                for s in 0..8 {
                    for i in 0..4 {
                        let low = (u64_at(qs, 32 * (s / 2) + 8 * i) >> (4 * (s % 2))) & LOW_NIBBLES;
                        let fifth = ((u64_at(qh, 8 * i) >> s) & LOW_BITS) << 4;
                        put_codes(words, 8 * s + 2 * i, low | fifth);
                    }
                }
            }
        }
        Q6K => {
            let (ql, qh, sub_scales) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = half(b, 208);
            // Value 128·half + 32·k + l: low bits from nibble k / 2 of ql[64·half + 32·(k % 2) + l],
            // high bits from field k of qh[32·half + l]; group (16 values) 8·half + 2·k + l / 16.
            // Read as bytes, then kept at 6 bits a code: the block's 256 codes in 48 words.
            let mut bytes = [0u32; 64];
            for half_index in 0..2 {
                for k in 0..4 {
                    for i in 0..4 {
                        let low = u64_at(ql, 64 * half_index + 32 * (k % 2) + 8 * i) >> (4 * (k / 2));
                        let high = (u64_at(qh, 32 * half_index + 8 * i) >> (2 * k)) & (LOW_BITS * 3);
                        put_codes(&mut bytes, 32 * half_index + 8 * k + 2 * i, (low & LOW_NIBBLES) | high << 4);
                    }
                }
            }
            pack_six_bit(&bytes, words);
            for (g, &sc) in sub_scales.iter().enumerate() {
                let scale = d * (sc as i8) as f32;
                (scales[g], biases[g]) = (scale, -32.0 * scale);
            }
        }
        _ => unreachable!("affine_params accepted {ty}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequantize;

    /// Pseudo-random bytes with valid f16 scales where each format keeps them.
    fn blocks(ty: GgmlType, count: usize, seed: u32) -> Vec<u8> {
        let (_, size) = ty.block_layout();
        let mut state = seed.wrapping_mul(2_654_435_761) | 1;
        let mut bytes: Vec<u8> = (0..count * size)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as u8
            })
            .collect();
        let scale_at: &[usize] = match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
            GgmlType::Q6K => &[208],
            _ => &[],
        };
        for (i, block) in bytes.chunks_exact_mut(size).enumerate() {
            for &at in scale_at {
                let value = 0.001 + (i + at) as f32 * 0.0007;
                block[at..at + 2].copy_from_slice(&f16::from_f32(value).to_le_bytes());
            }
        }
        bytes
    }

    #[test]
    fn repacked_blocks_dequantize_exactly_like_ggml() {
        use GgmlType::*;
        for ty in [Q4_0, Q4_1, Q4K, Q5_0, Q5_1, Q5K, Q6K, Q8_0] {
            let (values, _) = ty.block_layout();
            let (rows, cols) = (3, values * 2);
            let bytes = blocks(ty, rows * 2, ty.block_layout().1 as u32);
            let mut expected = Vec::new();
            assert!(dequantize(ty, &bytes, &mut expected));
            let packed = to_affine("m", ty, &bytes, rows, cols).unwrap().expect("repackable");
            assert_eq!((packed.rows, packed.cols), (rows, cols));
            let got = packed.dequantize().data;
            // `==`, not bits: q = 32 with a negative scale gives −0.0 in ggml, +0.0 here.
            let differ = got.iter().zip(&expected).filter(|(a, b)| a != b).count();
            assert_eq!(differ, 0, "{ty}: {differ} of {} values differ", expected.len());
        }
    }

    #[test]
    fn other_types_and_wrong_sizes() {
        assert!(to_affine("m", GgmlType::Q2K, &[0; 84], 1, 256).unwrap().is_none());
        let err = to_affine("blk.0.attn_q.weight", GgmlType::Q4_0, &[0; 17], 1, 32).unwrap_err().to_string();
        assert!(err.contains("blk.0.attn_q.weight") && err.contains("17 bytes"), "{err}");
    }
}
