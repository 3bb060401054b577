use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use hearth_weights::{AffineParams, AffineTensor};

use crate::scales::ScaleLayout;
use crate::tuning::ProductKernel;

use super::matrix::*;

/// A random-looking matrix of `bits`-bit codes, and its host dequantization.
fn matrix(rows: usize, k: usize, group: usize, bits: u32, seed: u32) -> (AffineTensor, Vec<f32>) {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let words = k * bits as usize / 32;
    let codes: Vec<u32> = (0..rows * words).map(|_| next()).collect();
    let groups = rows * k / group;
    let scales: Vec<f32> = (0..groups).map(|_| (next() % 1000) as f32 / 20_000.0 + 0.001).collect();
    let biases: Vec<f32> = (0..groups).map(|_| -((next() % 1000) as f32) / 5_000.0).collect();
    let params = AffineParams { group_size: group, bits };
    let t = AffineTensor::new(
        "test",
        params,
        (vec![rows, words], codes),
        (vec![rows, k / group], scales),
        (vec![rows, k / group], biases),
    )
    .expect("consistent shapes");
    let dense = t.dequantize().data;
    (t, dense)
}

fn inputs(tokens: usize, k: usize) -> Vec<f32> {
    (0..tokens * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect()
}

/// f64 reference of x · Wᵀ.
fn reference(x: &[f32], w: &[f32], tokens: usize, rows: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0.0; tokens * rows];
    for s in 0..tokens {
        for r in 0..rows {
            let dot: f64 = (0..k).map(|i| f64::from(x[s * k + i]) * f64::from(w[r * k + i])).sum();
            out[s * rows + r] = dot as f32;
        }
    }
    out
}

fn devices() -> Vec<(&'static str, Device)> {
    let mut devices = vec![("cpu", Device::flex())];
    if let Some(gpu) = crate::launch::test_gpu() {
        devices.push(("wgpu", gpu));
    }
    devices
}

fn read(t: Tensor<2>) -> Vec<f32> {
    pollster::block_on(t.into_data_async()).expect("readback").try_to_vec().expect("f32")
}

/// Decode (1 token), a partial token tile, several tiles; 4-bit groups of 32, 64 and 128,
/// 8-bit groups of 16 and 32 (GGUF's Q8_0 repacked), 6-bit ones (Q6_K); a k that is not a multiple of
/// the threads' stride.
#[test]
fn fused_matmul_matches_a_host_dequantization() {
    let cases = [
        (1, 40, 256, 64, 4),
        (3, 17, 96, 32, 4),
        (19, 9, 384, 128, 4),
        (1, 300, 1536, 64, 4),
        (1, 33, 640, 32, 8),
        (11, 7, 256, 16, 8),
        // Odd widths in a bit stream: 6-bit (GGUF's Q6_K, MLX), 3-, 5- and 2-bit (MLX).
        (1, 21, 96, 16, 6),
        (5, 9, 192, 32, 6),
        (1, 11, 128, 32, 3),
        (3, 6, 64, 32, 5),
        (1, 5, 64, 16, 2),
    ];
    for (name, device) in devices() {
        for (tokens, rows, k, group, bits) in cases {
            let (t, dense) = matrix(rows, k, group, bits, (tokens * rows + k) as u32);
            let x = inputs(tokens, k);
            let m = AffineMatrix::upload(t, &device);
            let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), &device);
            let got = read(m.matmul_transposed(xt));
            let want = reference(&x, &dense, tokens, rows, k);
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
            assert!(diff <= 1e-5 * scale * (k as f32).sqrt(), "{name} {tokens}x{rows}x{k}/{group} {bits}-bit: {diff}");
        }
    }
}

/// The profile's bytes read: a product's launch declares its weights and input, a launch of
/// Burn's own declares nothing (and is not charged a declaration left over from before).
#[test]
fn a_profiled_product_reads_its_weights_and_input() {
    let Some(gpu) = crate::launch::test_gpu() else { return };
    let m = AffineMatrix::upload(symmetric_matrix(40, 512, 32, 4, 8.0).0, &gpu);
    let x = Tensor::<2>::from_data(TensorData::new(inputs(1, 512), [1, 512]), &gpu);
    // Declared outside any profile: must not reach the profile's first launch.
    crate::dispatches::declare_reads(1);
    let (_, times) = crate::dispatches::profile_dispatches(|| {
        let scaled = read(x.clone() * 2.0);
        let product = read(m.matmul_transposed(x.clone()));
        (scaled, product)
    });
    let reads: Vec<(String, Option<u64>)> =
        times.iter().map(|t| (t.kernel.rsplit("::").next().unwrap_or(t.kernel).to_owned(), t.bytes_read)).collect();
    let product: Vec<_> = reads.iter().filter(|(name, _)| name.contains("AffineMatmul")).collect();
    assert_eq!(product.len(), 1, "one product launch in {reads:?}");
    assert_eq!(product[0].1, Some((m.device_bytes() + 512 * 4) as u64), "{reads:?}");
    let others: Vec<_> = reads.iter().filter(|(name, _)| !name.contains("AffineMatmul")).collect();
    assert!(!others.is_empty() && others.iter().all(|(_, bytes)| bytes.is_none()), "{reads:?}");
}

/// The GEMV-style kernel with several rows per block (fewer lanes a row): the same products
/// for 1, 2, 4 and 8 rows, with row counts that leave the last block part empty, one token
/// and token tiles, and the chunk loop's stride not dividing `k`.
#[test]
fn rows_per_block_leave_the_product_unchanged() {
    let Some(gpu) = crate::launch::test_gpu() else { return };
    let cases = [(1, 41, 256, 64, 4), (1, 300, 1536, 64, 4), (9, 13, 640, 32, 8), (3, 7, 96, 16, 6)];
    for (tokens, rows, k, group, bits) in cases {
        let (t, dense) = matrix(rows, k, group, bits, (tokens * 31 + rows + k) as u32);
        let x = inputs(tokens, k);
        let m = AffineMatrix::upload(t, &gpu);
        let want = reference(&x, &dense, tokens, rows, k);
        let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
        for rows_per_block in [1, 2, 4, 8] {
            let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), &gpu);
            let got = read(m.matmul_transposed_in_groups(xt, rows_per_block));
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(
                diff <= 1e-5 * scale * (k as f32).sqrt(),
                "{rows_per_block} rows a block, {tokens}x{rows}x{k}/{group} {bits}-bit: {diff}"
            );
        }
    }
}

/// Both product kernels on prompt shapes: partial tiles of tokens and rows, a `k` that ends
/// inside a staged slice (40 = 2.5 slices), 4-bit and 8-bit groups; each against the host.
#[test]
fn tiled_and_token_tile_kernels_match_a_host_dequantization() {
    let cases = [
        (70, 65, 384, 64, 4),
        (64, 64, 256, 32, 4),
        (33, 9, 40, 8, 4),
        (3, 130, 640, 16, 8),
        (100, 40, 96, 32, 8),
        (40, 70, 160, 16, 6),
        (20, 9, 96, 32, 3),
    ];
    for (name, device) in devices() {
        for (tokens, rows, k, group, bits) in cases {
            let (t, dense) = matrix(rows, k, group, bits, (tokens + rows * k) as u32);
            let x = inputs(tokens, k);
            let m = AffineMatrix::upload(t, &device);
            let want = reference(&x, &dense, tokens, rows, k);
            let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
            for kernel in [ProductKernel::Tiled, ProductKernel::TokenTiles, ProductKernel::Auto] {
                let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), &device);
                let got = read(m.matmul_transposed_by(xt, kernel));
                let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(
                    diff <= 1e-5 * scale * (k as f32).sqrt(),
                    "{name} {kernel:?} {tokens}x{rows}x{k}/{group} {bits}-bit: {diff}"
                );
            }
        }
    }
}

/// The pre-norm fused into the product equals RMSNorm then the product.
#[test]
fn normed_matmul_matches_norm_then_matmul() {
    for (name, device) in devices() {
        for (tokens, rows, k, bits) in [(1, 40, 256, 4), (10, 33, 640, 8), (45, 70, 256, 4), (80, 33, 640, 8)] {
            let (t, _) = matrix(rows, k, 32, bits, 3);
            let m = AffineMatrix::upload(t, &device);
            let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
            let weight: Vec<f32> = (0..k).map(|i| 0.5 + (i % 13) as f32 * 0.1).collect();
            let weight = Tensor::<1>::from_data(TensorData::new(weight, [k]), &device);
            let got = read(m.normed_matmul_transposed(x.clone(), &weight, 1e-6));
            let want = read(m.matmul_transposed(crate::fused::reference::rms_norm(x, &weight, 1e-6)));
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
            assert!(diff <= 1e-5 * scale * (k as f32).sqrt(), "{name} {tokens}x{rows}x{k} {bits}-bit: {diff}");
        }
    }
}

/// Gate, up and the activation in one launch equal the three steps.
#[test]
fn gated_matmul_matches_gate_up_then_gelu() {
    for (name, device) in devices() {
        for (tokens, rows, k, bits) in [(1, 40, 256, 4), (9, 21, 640, 8), (70, 21, 640, 8), (33, 80, 256, 4)] {
            let (gate, up) = (matrix(rows, k, 32, bits, 4).0, matrix(rows, k, 32, bits, 5).0);
            let joint = stacked(&gate, &up, &device);
            let (gate, up) = (AffineMatrix::upload(gate, &device), AffineMatrix::upload(up, &device));
            let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
            let weight = Tensor::<1>::from_data(TensorData::new(vec![0.9; k], [k]), &device);
            let got = read(gate.normed_gated_matmul(&up, x.clone(), &weight, 1e-6));
            let got_stacked = read(joint.normed_gated_stacked(x.clone(), &weight, 1e-6));
            let normed = crate::fused::reference::rms_norm(x, &weight, 1e-6);
            let want = read(
                crate::fused::reference::gelu_tanh(gate.matmul_transposed(normed.clone()))
                    * up.matmul_transposed(normed),
            );
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            let scale = want.iter().map(|v| v.abs()).fold(1.0, f32::max);
            assert!(diff <= 1e-5 * scale * (k as f32).sqrt(), "{name} {tokens}x{rows}x{k} {bits}-bit: {diff}");
            let diff = got_stacked.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(
                got_stacked.len() == want.len() && diff <= 1e-5 * scale * (k as f32).sqrt(),
                "{name} {tokens}x{rows}x{k} {bits}-bit, stacked: {diff}"
            );
        }
    }
}

/// The final softcap in the head's launch equals the product then the tensor-op softcap.
#[test]
fn softcapped_matmul_matches_matmul_then_softcap() {
    for (name, device) in devices() {
        for (tokens, rows, k) in [(2, 50, 640), (40, 50, 640)] {
            let head = AffineMatrix::upload(matrix(rows, k, 32, 8, 7).0, &device);
            let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
            let got = read(head.softcapped_matmul_transposed(x.clone(), 3.0));
            let want =
                read(crate::fused::reference::bounded_tanh(head.matmul_transposed(x).div_scalar(3.0)).mul_scalar(3.0));
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff <= 1e-5, "{name} {tokens} tokens: {diff}");
            assert!(got.iter().all(|v| v.abs() <= 3.0), "{name}: capped");
        }
    }
}

/// The per-layer-input gate: `gelu_tanh(x·Wᵀ) · m` in one launch.
#[test]
fn gated_by_input_matches_matmul_then_gelu() {
    for (name, device) in devices() {
        for (tokens, rows, k) in [(3, 24, 256), (66, 24, 256)] {
            let gate = AffineMatrix::upload(matrix(rows, k, 64, 4, 6).0, &device);
            let x = Tensor::<2>::from_data(TensorData::new(inputs(tokens, k), [tokens, k]), &device);
            let m = Tensor::<2>::from_data(TensorData::new(inputs(tokens, rows), [tokens, rows]), &device);
            let got = read(gate.gelu_gated_by(x.clone(), m.clone()));
            let want = read(crate::fused::reference::gelu_tanh(gate.matmul_transposed(x)) * m);
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff <= 1e-4, "{name} {tokens} tokens: {diff}");
        }
    }
}

#[test]
fn dequantized_rows_equal_the_host_values() {
    for (name, device) in devices() {
        let (t, dense) = matrix(12, 128, 32, 4, 5);
        let m = AffineMatrix::upload_rows(&t, 2..12, &device);
        let got = read(m.select_rows(&[7, 0, 3]));
        let want: Vec<f32> = [9usize, 2, 5].iter().flat_map(|&r| dense[r * 128..(r + 1) * 128].to_vec()).collect();
        assert_eq!(got, want, "{name}");

        // Many rows (a prefill): the gather spans hundreds of thread blocks.
        let (t, dense) = matrix(300, 1536, 64, 4, 9);
        let m = AffineMatrix::upload(t, &device);
        let ids: Vec<u32> = (0..70).map(|i| (i * 37 % 300) as u32).collect();
        let got = read(m.select_rows(&ids));
        let want: Vec<f32> =
            ids.iter().flat_map(|&r| dense[r as usize * 1536..(r as usize + 1) * 1536].to_vec()).collect();
        assert_eq!(got, want, "{name}: 70 rows");

        // 8-bit codes (GGUF's Q8_0 embedding, repacked).
        let (t, dense) = matrix(50, 640, 32, 8, 11);
        let m = AffineMatrix::upload(t, &device);
        let got = read(m.select_rows(&[49, 0, 17]));
        let want: Vec<f32> = [49usize, 0, 17].iter().flat_map(|&r| dense[r * 640..(r + 1) * 640].to_vec()).collect();
        assert_eq!(got, want, "{name}: 8-bit rows");

        // 6-bit codes, straddling words (GGUF's Q6_K embedding, repacked).
        let (t, dense) = matrix(20, 96, 16, 6, 13);
        let m = AffineMatrix::upload(t, &device);
        let got = read(m.select_rows(&[19, 4]));
        let want: Vec<f32> = [19usize, 4].iter().flat_map(|&r| dense[r * 96..(r + 1) * 96].to_vec()).collect();
        assert_eq!(got, want, "{name}: 6-bit rows");
    }
}

/// A table split in two blocks, ids on the device: each block writes the rows it holds into
/// the shared output and leaves the others alone, whichever block an id falls in.
#[test]
fn rows_into_writes_only_the_rows_a_block_holds() {
    let Some(device) = crate::launch::test_gpu() else { return };
    let (t, dense) = matrix(12, 128, 32, 4, 21);
    let blocks =
        [(0, AffineMatrix::upload_rows(&t, 0..5, &device)), (5, AffineMatrix::upload_rows(&t, 5..12, &device))];
    let ids = [7u32, 0, 11, 4];
    let on_device = Tensor::<1, Int>::from_data(TensorData::new(ids.to_vec(), [4]), (&device, DType::U32));
    let row = |r: u32| dense[r as usize * 128..(r as usize + 1) * 128].to_vec();

    let mut out = Tensor::<2>::zeros([4, 128], &device);
    let (first, second) = (&blocks[0], &blocks[1]);
    second.1.rows_into(&mut out, &on_device, second.0);
    let want: Vec<f32> = ids.iter().flat_map(|&r| if r >= 5 { row(r) } else { vec![0.0; 128] }).collect();
    assert_eq!(read(out.clone()), want, "only the second block's rows");

    first.1.rows_into(&mut out, &on_device, first.0);
    let want: Vec<f32> = ids.iter().flat_map(|&r| row(r)).collect();
    assert_eq!(read(out), want, "both blocks");
}

/// A matrix in a symmetric format (GGUF's Q4_0, Q8_0 once repacked): f16 scales, some
/// negative and some subnormal, biases `−offset · scale`.
fn symmetric_matrix(rows: usize, k: usize, group: usize, bits: u32, offset: f32) -> (AffineTensor, Vec<f32>) {
    symmetric_matrix_scaled(rows, k, group, bits, offset, 1.0)
}

/// The same with every scale times `factor` (1.0001: products no half holds, as Q6_K's).
fn symmetric_matrix_scaled(
    rows: usize,
    k: usize,
    group: usize,
    bits: u32,
    offset: f32,
    factor: f32,
) -> (AffineTensor, Vec<f32>) {
    let (t, _) = matrix(rows, k, group, bits, 7);
    let groups = t.scales.len();
    let scales: Vec<f32> = (0..groups)
        .map(|g| {
            let magnitude = if g % 7 == 3 { 3.0e-6 } else { 0.0004 + (g % 13) as f32 * 0.0007 };
            let s = if g % 5 == 1 { -magnitude } else { magnitude };
            half::f16::from_f32(s).to_f32() * factor
        })
        .collect();
    let biases: Vec<f32> = scales.iter().map(|&s| -offset * s).collect();
    let shape = vec![rows, k / group];
    let t = AffineTensor::new(
        "sym",
        t.params,
        (vec![rows, t.codes.len() / rows], t.codes),
        (shape.clone(), scales),
        (shape, biases),
    )
    .expect("consistent shapes");
    let dense = t.dequantize().data;
    (t, dense)
}

#[test]
fn symmetric_scales_fit_halves_and_nothing_else_does() {
    let (q4_0, _) = symmetric_matrix(4, 96, 32, 4, 8.0);
    assert_eq!(ScaleLayout::fitting(&q4_0.scales, &q4_0.biases, 4, 3), ScaleLayout::Half { offset: 8 });
    let (q8_0, _) = symmetric_matrix(4, 64, 32, 8, 128.0);
    assert_eq!(ScaleLayout::fitting(&q8_0.scales, &q8_0.biases, 8, 2), ScaleLayout::Half { offset: 128 });
    // MLX's free biases; one bias off by an ulp.
    let (mlx, _) = matrix(4, 96, 32, 4, 3);
    assert_eq!(ScaleLayout::fitting(&mlx.scales, &mlx.biases, 4, 3), ScaleLayout::Pairs);
    let mut off = q4_0.biases.clone();
    off[5] = f32::from_bits(off[5].to_bits() + 1);
    assert_eq!(ScaleLayout::fitting(&q4_0.scales, &off, 4, 3), ScaleLayout::Pairs);
    // Q6_K's scales are products no half holds: one f32 a group, the bias still implied.
    let mut wide = q4_0.scales.clone();
    wide[2] = 0.1;
    let biases: Vec<f32> = wide.iter().map(|s| -32.0 * s).collect();
    assert_eq!(ScaleLayout::fitting(&wide, &biases, 8, 3), ScaleLayout::Single { offset: 32 });
}

/// `m`'s decode product, prompt products and gated pair (with `up`) against the host
/// products of their dequantizations `dense` and `dense_up`.
/// The product, and the gated pair both as two matrices and as one stacked `[gate; up]`
/// (`stacked`), against the host's, for one token, a token tile and the prompt kernel.
fn multiplies_like(
    m: &AffineMatrix,
    dense: &[f32],
    (up, stacked): (&AffineMatrix, &AffineMatrix),
    dense_up: &[f32],
    what: &str,
    gpu: &Device,
) {
    let (rows, k) = (m.rows(), m.k());
    for tokens in [1, 3, 19] {
        let x = inputs(tokens, k);
        let xt = || Tensor::<2>::from_data(TensorData::new(x.clone(), [tokens, k]), gpu);
        let want = reference(&x, dense, tokens, rows, k);
        let close = |got: Vec<f32>, want: &[f32], kind: &str| {
            let scale = want.iter().map(|v| v.abs()).fold(1e-3, f32::max);
            let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff <= 1e-5 * scale * (k as f32).sqrt(), "{kind} {tokens}x{rows}x{k} {what}: {diff}");
        };
        close(read(m.matmul_transposed(xt())), &want, "product");
        let gelu = |v: f32| 0.5 * v * (1.0 + ((v + 0.044_715 * v * v * v) * 0.797_884_6).tanh());
        let ones = Tensor::<1>::ones([k], gpu);
        // RMSNorm with unit weight, as the reference sees it: x scaled per token.
        let normed: Vec<f32> = x
            .chunks(k)
            .flat_map(|row| {
                let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f32>() / k as f32 + 1e-6).sqrt();
                row.iter().map(move |v| v * inv).collect::<Vec<_>>()
            })
            .collect();
        let gated_normed: Vec<f32> = reference(&normed, dense, tokens, rows, k)
            .iter()
            .zip(&reference(&normed, dense_up, tokens, rows, k))
            .map(|(&g, &u)| gelu(g) * u)
            .collect();
        close(read(m.normed_gated_matmul(up, xt(), &ones, 1e-6)), &gated_normed, "gated");
        close(read(stacked.normed_gated_stacked(xt(), &ones, 1e-6)), &gated_normed, "gated, stacked");
    }
}

/// `[gate; up]` as one matrix.
fn stacked(gate: &AffineTensor, up: &AffineTensor, device: &Device) -> AffineMatrix {
    let joint = AffineTensor::stack_rows(vec![gate.clone(), up.clone()]).expect("packed alike");
    AffineMatrix::upload(joint, device)
}

/// Random Q6_K blocks (codes and byte scales at random, each block's `d` a normal half) as
/// GGUF stores them, `rows` rows of `k` values.
fn q6_k_blocks(rows: usize, k: usize, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let mut bytes: Vec<u8> = (0..rows * k / 256 * 210).map(|_| next() as u8).collect();
    // f16 bits: 0.0499, −0.00189, 0.5, 0.0699.
    let halves: [u16; 4] = [0x2A66, 0x97BE, 0x3800, 0x2C7B];
    for (b, block) in bytes.chunks_exact_mut(210).enumerate() {
        block[208..210].copy_from_slice(&halves[b % halves.len()].to_le_bytes());
    }
    bytes
}

/// GGUF's Q6_K repacked keeps the file's own size on the device (6-bit codes, a byte scale a
/// group of 16, a half a block: 210 bytes a block of 256, E2B's 6 a row) and multiplies like its host
/// dequantization; runs that do not factor fall back to one f32 a group.
#[test]
fn q6_k_scales_keep_the_file_size() {
    let Some(gpu) = crate::launch::test_gpu() else { return };
    // A row of an odd number of blocks pads its last half to a word: 2 bytes a row more.
    for (rows, k, padding) in [(5, 512, 0), (9, 1536, 0), (3, 768, 2)] {
        let repack = |seed| {
            let blocks = q6_k_blocks(rows, k, seed);
            let t = hearth_weights::gguf_affine::to_affine("q6_k", hearth_weights::GgmlType::Q6K, &blocks, rows, k)
                .expect("whole blocks")
                .expect("Q6_K repacks");
            let dense = t.dequantize().data;
            (t, dense)
        };
        let ((t, dense), (up, dense_up)) = (repack(3), repack(4));
        let groups = k / 16;
        assert_eq!(ScaleLayout::fitting(&t.scales, &t.biases, 6, groups), ScaleLayout::Factored { offset: 32 });
        let joint = stacked(&t, &up, &gpu);
        let (m, up) = (AffineMatrix::upload(t, &gpu), AffineMatrix::upload(up, &gpu));
        assert_eq!(m.scale_layout(), Some(ScaleLayout::Factored { offset: 32 }));
        assert_eq!(m.device_bytes(), rows * (k / 256 * 210 + padding), "{rows}x{k}: the file's bytes");
        assert_eq!(read(m.dequantize()), dense, "rows of {rows}x{k} Q6_K");
        multiplies_like(&m, &dense, (&up, &joint), &dense_up, "Q6_K", &gpu);
    }
    // One scale that is no byte multiple of its run's half: that run, so the matrix, stays f32.
    let blocks = q6_k_blocks(2, 256, 5);
    let t = hearth_weights::gguf_affine::to_affine("q6_k", hearth_weights::GgmlType::Q6K, &blocks, 2, 256)
        .expect("whole blocks")
        .expect("Q6_K repacks");
    let mut scales = t.scales.clone();
    scales[3] = 0.1;
    let biases: Vec<f32> = scales.iter().map(|s| -32.0 * s).collect();
    assert_eq!(ScaleLayout::fitting(&scales, &biases, 6, 16), ScaleLayout::Single { offset: 32 });
}

/// The residual update and the next normed projection, fused (one token on the GPU) or in two
/// steps (the CPU, or two tokens), give the host's updated residual and product, alone or as
/// the gated pair of a stacked `[gate; up]`: Q4_0's half scales, Q6_K's factored ones and MLX's
/// pairs, 1 to 8 rows a block, with and without a layer scalar.
#[test]
fn a_residual_update_fused_into_the_product_changes_nothing() {
    let q6_k = || {
        let blocks = q6_k_blocks(24, 512, 9);
        hearth_weights::gguf_affine::to_affine("q6_k", hearth_weights::GgmlType::Q6K, &blocks, 24, 512)
            .expect("whole blocks")
            .expect("Q6_K repacks")
    };
    let inverse_rms = |v: &[f32]| 1.0 / (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32 + 1e-6).sqrt();
    for (device_name, device) in devices() {
        let matrices =
            [("Q4_0", symmetric_matrix(40, 512, 32, 4, 8.0).0), ("Q6_K", q6_k()), ("MLX", matrix(33, 512, 64, 4, 5).0)];
        for (name, t) in matrices {
            // The matrix, and stacked on itself reversed as a gated pair `[t; t′]`.
            let up = {
                let mut up = t.clone();
                let words = up.words_per_row();
                let rows: Vec<&[u32]> = t.codes.chunks(words).rev().collect();
                up.codes = rows.concat();
                up
            };
            let joint = stacked(&t, &up, &device);
            let m = AffineMatrix::upload(t, &device);
            let (rows, k) = (m.rows(), m.k());
            let dense = read(m.dequantize());
            let dense_up = read(AffineMatrix::upload(up, &device).dequantize());
            let post: Vec<f32> = (0..k).map(|i| 0.5 + (i % 11) as f32 / 10.0).collect();
            let pre: Vec<f32> = (0..k).map(|i| 1.5 - (i % 7) as f32 / 10.0).collect();
            let norms = Tensor::<1>::from_data(TensorData::new([post.clone(), pre.clone()].concat(), [2 * k]), &device);
            // One token takes the fused kernel where it runs; two take the two steps everywhere.
            for tokens in [1, 2] {
                let x: Vec<f32> = (0..tokens * k).map(|i| ((i * 31 % 97) as f32 - 48.0) / 20.0).collect();
                let delta: Vec<f32> = (0..tokens * k).map(|i| ((i * 17 % 89) as f32 - 44.0) / 7.0).collect();
                let tensor =
                    |values: &[f32]| Tensor::<2>::from_data(TensorData::new(values.to_vec(), [tokens, k]), &device);
                for scale in [1.0, 0.75] {
                    // The host's x' = (x + RMSNorm(delta)·post)·scale and RMSNorm(x')·pre · Wᵀ.
                    let mut want_x = vec![0.0; tokens * k];
                    let mut normed = vec![0.0; tokens * k];
                    for s in 0..tokens {
                        let (x, delta) = (&x[s * k..][..k], &delta[s * k..][..k]);
                        let inv_delta = inverse_rms(delta);
                        let updated = &mut want_x[s * k..][..k];
                        for i in 0..k {
                            updated[i] = (x[i] + delta[i] * inv_delta * post[i]) * scale;
                        }
                        let inv = inverse_rms(updated);
                        for i in 0..k {
                            normed[s * k + i] = updated[i] * inv * pre[i];
                        }
                    }
                    let want = reference(&normed, &dense, tokens, rows, k);
                    let gelu = |v: f32| 0.5 * v * (1.0 + ((v + 0.044_715 * v * v * v) * 0.797_884_6).tanh());
                    let want_gated: Vec<f32> = want
                        .iter()
                        .zip(&reference(&normed, &dense_up, tokens, rows, k))
                        .map(|(&g, &u)| gelu(g) * u)
                        .collect();
                    // (The CPU has no blocks of rows.)
                    let blocks: &[u32] = if device_name == "cpu" { &[1] } else { &[1, 2, 4, 8] };
                    for (gated, rows_per_group) in
                        [false, true].into_iter().flat_map(|g| blocks.iter().map(move |&r| (g, r)))
                    {
                        let matrix = if gated { &joint } else { &m };
                        let (got_x, got) = matrix.residual_normed_matmul_in_groups(
                            gated,
                            tensor(&x),
                            tensor(&delta),
                            &norms,
                            1e-6,
                            scale,
                            rows_per_group,
                        );
                        let what = format!(
                            "{name} on {device_name}, {tokens} tokens, {rows_per_group} rows a block, scale {scale}, \
                             gated {gated}"
                        );
                        let want = if gated { &want_gated } else { &want };
                        let close = |got: &[f32], want: &[f32], part: &str| {
                            let top = want.iter().map(|v| v.abs()).fold(1e-3, f32::max);
                            let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                            assert!(got.len() == want.len() && diff <= 1e-5 * top, "{part} of {what}: {diff} of {top}");
                        };
                        close(&read(got_x), &want_x, "the residual");
                        close(&read(got), want, "the product");
                    }
                }
            }
        }
    }
}

/// The post-feed-forward update fused into the per-layer-input gate (one token on the GPU: one
/// launch, the updated residual and the product two parts of one buffer) or in two steps (the
/// CPU, or two tokens) gives the host's `x' = x + RMSNorm(delta)·post` and `gelu_tanh(x'·Wᵀ) · m`,
/// for Q4_0's half scales, Q6_K's factored ones and MLX's pairs, 1 to 8 rows a block; and the two
/// parts read alike as inputs of the next launches (a product, an add).
#[test]
fn a_residual_update_fused_into_the_input_gate_changes_nothing() {
    let q6_k = || {
        let blocks = q6_k_blocks(24, 512, 9);
        hearth_weights::gguf_affine::to_affine("q6_k", hearth_weights::GgmlType::Q6K, &blocks, 24, 512)
            .expect("whole blocks")
            .expect("Q6_K repacks")
    };
    let inverse_rms = |v: &[f32]| 1.0 / (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32 + 1e-6).sqrt();
    let gelu = |v: f32| 0.5 * v * (1.0 + ((v + 0.044_715 * v * v * v) * 0.797_884_6).tanh());
    for (device_name, device) in devices() {
        // k = 512 starts the product on an aligned offset at once; k = 96 needs padding.
        let matrices = [
            ("Q4_0", symmetric_matrix(40, 512, 32, 4, 8.0).0),
            ("Q6_K", q6_k()),
            ("MLX", matrix(33, 512, 64, 4, 5).0),
            ("MLX k 96", matrix(7, 96, 32, 4, 3).0),
        ];
        for (name, t) in matrices {
            let m = AffineMatrix::upload(t, &device);
            let (rows, k) = (m.rows(), m.k());
            let dense = read(m.dequantize());
            let post: Vec<f32> = (0..k).map(|i| 0.5 + (i % 11) as f32 / 10.0).collect();
            let post_norm = Tensor::<1>::from_data(TensorData::new(post.clone(), [k]), &device);
            for tokens in [1, 2] {
                let x: Vec<f32> = (0..tokens * k).map(|i| ((i * 31 % 97) as f32 - 48.0) / 20.0).collect();
                let delta: Vec<f32> = (0..tokens * k).map(|i| ((i * 17 % 89) as f32 - 44.0) / 7.0).collect();
                let gates: Vec<f32> = (0..tokens * rows).map(|i| ((i * 13 % 23) as f32 - 11.0) / 5.0).collect();
                let tensor = |values: &[f32], columns| {
                    Tensor::<2>::from_data(TensorData::new(values.to_vec(), [tokens, columns]), &device)
                };
                let mut want_x = vec![0.0; tokens * k];
                for s in 0..tokens {
                    let (x, delta) = (&x[s * k..][..k], &delta[s * k..][..k]);
                    let inv_delta = inverse_rms(delta);
                    for i in 0..k {
                        want_x[s * k + i] = x[i] + delta[i] * inv_delta * post[i];
                    }
                }
                let want: Vec<f32> = reference(&want_x, &dense, tokens, rows, k)
                    .iter()
                    .zip(&gates)
                    .map(|(&g, &m)| gelu(g) * m)
                    .collect();
                let blocks: &[u32] = if device_name == "cpu" { &[1] } else { &[1, 2, 4, 8] };
                for &rows_per_group in blocks {
                    let (got_x, got) = m.residual_gelu_gated_by_in_groups(
                        tensor(&x, k),
                        tensor(&delta, k),
                        &post_norm,
                        1e-6,
                        tensor(&gates, rows),
                        rows_per_group,
                    );
                    let what = format!("{name} on {device_name}, {tokens} tokens, {rows_per_group} rows a block");
                    let close = |got: &[f32], want: &[f32], part: &str| {
                        let top = want.iter().map(|v| v.abs()).fold(1e-3, f32::max);
                        let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                        assert!(got.len() == want.len() && diff <= 1e-5 * top, "{part} of {what}: {diff} of {top}");
                    };
                    // Each part as the input of a launch that follows (an elementwise one), and
                    // read back itself.
                    close(&read(got_x.clone() + 0.0), &want_x, "the residual");
                    close(&read(got.clone() * 1.0), &want, "the product");
                    close(&read(got_x), &want_x, "the residual read back");
                    close(&read(got), &want, "the product read back");
                }
            }
        }
    }
}

/// Symmetric formats' scales on the device (half scales: 4.5 bits a weight for Q4_0, 5 with
/// the odd group's padding here; one f32 scale a group for Q6_K's products, 10 bits): the
/// rows, the decode product, the prompt products and the gated pair against the host
/// dequantization.
#[test]
fn symmetric_scales_multiply_like_the_host_dequantization() {
    let Some(gpu) = crate::launch::test_gpu() else { return };
    let cases = [
        (9, 96, 32, 4, 8.0, 1.0),
        (40, 256, 32, 4, 8.0, 1.0),
        (5, 64, 32, 8, 128.0, 1.0),
        (7, 64, 16, 8, 32.0, 1.0001),
    ];
    for (rows, k, group, bits, offset, factor) in cases {
        let (t, dense) = symmetric_matrix_scaled(rows, k, group, bits, offset, factor);
        let (up, dense_up) = symmetric_matrix_scaled(rows, k, group, bits, offset, factor);
        let joint = stacked(&t, &up, &gpu);
        let m = AffineMatrix::upload(t, &gpu);
        let up = AffineMatrix::upload(up, &gpu);
        let offset_code = offset as u32;
        let (layout, scale_words) = if factor == 1.0 {
            (ScaleLayout::Half { offset: offset_code }, rows * (k / group).div_ceil(2))
        } else {
            (ScaleLayout::Single { offset: offset_code }, rows * k / group)
        };
        assert_eq!(m.scale_layout(), Some(layout));
        assert_eq!(m.device_bytes(), (rows * k * bits as usize / 32 + scale_words) * 4);
        assert_eq!(read(m.dequantize()), dense, "rows of {rows}x{k}/{group} {bits}-bit");
        multiplies_like(&m, &dense, (&up, &joint), &dense_up, &format!("{bits}-bit /{group}"), &gpu);
    }
}
