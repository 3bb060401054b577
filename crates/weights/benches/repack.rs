//! GGUF block repacking on the host (`gguf_affine::to_affine`), the part of loading a GGUF file
//! that is not reading or uploading: GB/s of block bytes per ggml type, on this machine's CPU.
//! Run with `cargo bench -p hearth-weights --bench repack`; it prints a Markdown table.

use std::time::Instant;

use hearth_weights::GgmlType;
use hearth_weights::gguf_affine::to_affine;

/// Pseudo-random blocks with small positive f16 scales where each format keeps them.
fn blocks(ty: GgmlType, count: usize) -> Vec<u8> {
    let (_, size) = ty.block_layout();
    let mut state = 0x9E37_79B9u32;
    let mut bytes: Vec<u8> = (0..count * size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect();
    let scale_at: &[usize] = match ty {
        GgmlType::Q6K => &[208],
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        _ => &[0, 2],
    };
    let scale = half::f16::from_f32(0.01).to_le_bytes();
    for block in bytes.chunks_exact_mut(size) {
        for &at in scale_at {
            block[at..at + 2].copy_from_slice(&scale);
        }
    }
    bytes
}

fn main() {
    // A Gemma 4 E2B MLP matrix: 6144 rows of 1536 values.
    let (rows, cols) = (6144, 1536);
    println!("| ggml type | block bytes | repack (best of 5) | GB/s |");
    println!("|---|---|---|---|");
    use GgmlType::*;
    for ty in [Q4_0, Q4_1, Q4K, Q5_0, Q5_1, Q5K, Q6K, Q8_0] {
        let (values, _) = ty.block_layout();
        let bytes = blocks(ty, rows * cols / values);
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            let packed = to_affine("bench", ty, &bytes, rows, cols).expect("valid blocks").expect("repackable");
            best = best.min(start.elapsed().as_secs_f64());
            std::hint::black_box(packed);
        }
        let mb = bytes.len() as f64 / 1e6;
        println!("| {ty} | {mb:.1} MB | {:.1} ms | {:.2} |", best * 1e3, bytes.len() as f64 / best / 1e9);
    }
}
