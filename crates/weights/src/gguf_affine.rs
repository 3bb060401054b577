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
//! | Q6_K | `(d·sc)·(q − 32)` | 8 bits, groups of 16, `(d·sc, −32·d·sc)` |
//! | Q8_0 | `d·q`, q signed | 8 bits, groups of 32, codes `q + 128`, `(d, −128d)` |
//!
//! 5- and 6-bit codes travel in 8-bit containers: the kernels read 4- and 8-bit words only.
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
        Q6K => (8, 16),
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
    let mut codes = Vec::with_capacity(cols);
    let mut groups = Vec::with_capacity(cols / params.group_size);
    let (mut words, mut scales, mut biases) = (Vec::new(), Vec::new(), Vec::new());
    let words_per_row = cols * params.bits as usize / 32;
    words.reserve(rows * words_per_row);
    for row in bytes.chunks_exact((cols / block_values * block_bytes).max(1)).take(rows) {
        codes.clear();
        groups.clear();
        for block in row.chunks_exact(block_bytes) {
            unpack_block(ty, block, &mut codes, &mut groups);
        }
        pack_codes(&codes, params.bits, &mut words);
        scales.extend(groups.iter().map(|g| g.0));
        biases.extend(groups.iter().map(|g| g.1));
    }
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

/// Appends `codes` to `words` as a little-endian stream of `bits`-bit fields (4 or 8).
fn pack_codes(codes: &[u8], bits: u32, words: &mut Vec<u32>) {
    let per_word = (32 / bits) as usize;
    words.extend(
        codes
            .chunks_exact(per_word)
            .map(|chunk| chunk.iter().enumerate().fold(0u32, |w, (j, &q)| w | u32::from(q) << (bits as usize * j))),
    );
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// One block's unsigned codes, in value order, and its groups' `(scale, bias)`.
fn unpack_block(ty: GgmlType, b: &[u8], codes: &mut Vec<u8>, groups: &mut Vec<(f32, f32)>) {
    use GgmlType::*;
    match ty {
        Q4_0 => {
            let d = half(b, 0);
            nibbles(&b[2..18], codes);
            groups.push((d, -8.0 * d));
        }
        Q4_1 => {
            nibbles(&b[4..20], codes);
            groups.push((half(b, 0), half(b, 2)));
        }
        Q5_0 => {
            let d = half(b, 0);
            five_bit(&b[2..6], &b[6..22], codes);
            groups.push((d, -16.0 * d));
        }
        Q5_1 => {
            five_bit(&b[4..8], &b[8..24], codes);
            groups.push((half(b, 0), half(b, 2)));
        }
        Q8_0 => {
            let d = half(b, 0);
            codes.extend(b[2..34].iter().map(|&q| (q as i8 as i16 + 128) as u8));
            groups.push((d, -128.0 * d));
        }
        Q4K | Q5K => {
            let (d, dmin) = (half(b, 0), half(b, 2));
            let pairs = crate::quant::scale_min_k4(&b[4..16]);
            let (qh, qs) = if ty == Q4K { (None, &b[16..144]) } else { (Some(&b[16..48]), &b[48..176]) };
            for (s, &(sc, m)) in pairs.iter().enumerate() {
                // Sub-blocks 2i and 2i+1 share bytes 32i..32i+32: low then high nibbles.
                let shift = 4 * (s % 2);
                for (l, &q) in qs[32 * (s / 2)..32 * (s / 2) + 32].iter().enumerate() {
                    let fifth = qh.map_or(0, |qh| ((qh[l] >> s) & 1) << 4);
                    codes.push(((q >> shift) & 0x0F) | fifth);
                }
                groups.push((d * sc as f32, -(dmin * m as f32)));
            }
        }
        Q6K => {
            let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = half(b, 208);
            // Value 128·half + 32·k + l: low bits from nibble k / 2 of ql[64·half + 32·(k % 2) + l],
            // high bits from field k of qh[32·half + l]; group (16 values) 8·half + 2·k + l / 16.
            for half_index in 0..2 {
                for k in 0..4 {
                    for l in 0..32 {
                        let low = (ql[64 * half_index + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
                        let high = (qh[32 * half_index + l] >> (2 * k)) & 0x03;
                        codes.push(low | (high << 4));
                    }
                    for group in 0..2 {
                        let scale = d * (scales[8 * half_index + 2 * k + group] as i8) as f32;
                        groups.push((scale, -32.0 * scale));
                    }
                }
            }
        }
        _ => unreachable!("affine_params accepted {ty}"),
    }
}

/// 16 bytes of 4-bit codes: low nibbles are values 0..16, high nibbles 16..32.
fn nibbles(qs: &[u8], codes: &mut Vec<u8>) {
    codes.extend(qs.iter().map(|&q| q & 0x0F));
    codes.extend(qs.iter().map(|&q| q >> 4));
}

/// Q5_0/Q5_1 codes: nibbles as [`nibbles`], the fifth bit of value j is bit j of `qh`.
fn five_bit(qh: &[u8], qs: &[u8], codes: &mut Vec<u8>) {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let start = codes.len();
    nibbles(qs, codes);
    for (j, q) in codes[start..].iter_mut().enumerate() {
        *q |= (((qh >> j) & 1) as u8) << 4;
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
