//! Choosing the next token on the device: greedy, or temperature + top-k + top-p with a seeded
//! Gumbel-max draw. Only the chosen id is read back (wasm cannot read synchronously, and reading
//! the whole vocabulary every token would dominate decode time).

use burn::tensor::activation::softmax;
use burn::tensor::{Int, Tensor, TensorData};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingOptions {
    /// 0 means greedy.
    pub temperature: f32,
    /// Candidates kept before top-p; 0 means no top-k (then at most [`MAX_CANDIDATES`]).
    pub top_k: usize,
    /// Smallest set of candidates whose probability reaches this (1.0 keeps all).
    pub top_p: f32,
    pub seed: u64,
}

/// Without top-k, top-p still chooses among this many best candidates (the tail beyond holds a
/// negligible share of the probability in practice, and a full sort of 262k logits is costly).
pub const MAX_CANDIDATES: usize = 256;

impl SamplingOptions {
    pub fn greedy() -> Self {
        SamplingOptions { temperature: 0.0, top_k: 1, top_p: 1.0, seed: 0 }
    }

    fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

#[derive(Debug, thiserror::Error)]
#[error("reading the sampled token back from the GPU failed: {0}")]
pub struct SampleError(String);

pub struct Sampler {
    options: SamplingOptions,
    rng: SplitMix64,
}

impl Sampler {
    pub fn new(options: SamplingOptions) -> Self {
        Sampler { options, rng: SplitMix64(options.seed) }
    }

    /// Picks the next token from `logits` ([1, vocab]).
    pub async fn sample(&mut self, logits: Tensor<2>) -> Result<u32, SampleError> {
        let choice = self.choose(logits);
        Self::read(choice).await
    }

    /// Reads back a chosen id (the only readback of a decoded token: 4 bytes).
    pub async fn read(choice: Tensor<2, Int>) -> Result<u32, SampleError> {
        let data = choice.into_data_async().await.map_err(|e| SampleError(e.to_string()))?;
        let id = data.iter::<i64>().next().ok_or_else(|| SampleError("empty result".into()))?;
        u32::try_from(id).map_err(|_| SampleError(format!("invalid token id {id}")))
    }

    /// The chosen id as a [1, 1] tensor, still on the device (its kernels launched, nothing
    /// waited for).
    pub fn choose(&mut self, logits: Tensor<2>) -> Tensor<2, Int> {
        if self.options.is_greedy() {
            return logits.argmax(1);
        }
        let vocab = logits.dims()[1];
        let k = match self.options.top_k {
            0 => MAX_CANDIDATES,
            k => k,
        }
        .min(vocab);
        let device = logits.device();
        // Candidates in descending order: [1, k]
        let (values, indices) = logits.topk_with_indices(k, 1);
        let scaled = values.div_scalar(self.options.temperature);
        let mut scores = scaled.clone();
        if self.options.top_p < 1.0 {
            let probs = softmax(scaled, 1);
            // Drop a candidate when the ones before it already reach top_p (the first always stays).
            let before = probs.clone().cumsum(1) - probs;
            scores = scores.mask_fill(before.greater_equal_elem(self.options.top_p), -1e30);
        }
        // Gumbel-max: argmax(score + Gumbel noise) samples from softmax(score).
        let noise: Vec<f32> = (0..k).map(|_| -(-self.rng.next_open_unit().ln()).ln() as f32).collect();
        let noise = Tensor::<2>::from_data(TensorData::new(noise, [1, k]), &device);
        let pick = (scores + noise).argmax(1);
        indices.gather(1, pick)
    }
}

/// A small, portable, seedable generator: the same seed gives the same tokens natively and in wasm.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1), never 0 or 1.
    fn next_open_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    fn logits(values: &[f32]) -> Tensor<2> {
        Tensor::from_data(TensorData::new(values.to_vec(), [1, values.len()]), &Device::flex())
    }

    fn sample(options: SamplingOptions, values: &[f32], draws: usize) -> Vec<u32> {
        let mut sampler = Sampler::new(options);
        (0..draws).map(|_| pollster::block_on(sampler.sample(logits(values))).unwrap()).collect()
    }

    #[test]
    fn greedy_takes_the_largest() {
        assert_eq!(sample(SamplingOptions::greedy(), &[0.1, 3.0, -1.0, 2.9], 1), vec![1]);
    }

    #[test]
    fn top_k_never_leaves_the_k_best() {
        let options = SamplingOptions { temperature: 5.0, top_k: 2, top_p: 1.0, seed: 7 };
        let ids = sample(options, &[0.0, 3.0, 1.0, 2.9, -2.0], 200);
        assert!(ids.iter().all(|&id| id == 1 || id == 3), "{ids:?}");
        assert!(ids.contains(&1) && ids.contains(&3), "a high temperature should pick both");
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        // Probabilities ≈ [0.87, 0.12, 0.0002…]: top_p 0.5 leaves only the first.
        let options = SamplingOptions { temperature: 1.0, top_k: 0, top_p: 0.5, seed: 3 };
        assert!(sample(options, &[4.0, 2.0, -5.0, -5.0], 100).iter().all(|&id| id == 0));
    }

    #[test]
    fn the_same_seed_draws_the_same_tokens() {
        let options = SamplingOptions { temperature: 1.0, top_k: 0, top_p: 1.0, seed: 42 };
        let values = [0.5, 0.4, 0.3, 0.2, 0.1];
        assert_eq!(sample(options, &values, 50), sample(options, &values, 50));
        let frequent = sample(options, &values, 400).iter().filter(|&&id| id == 0).count();
        assert!(frequent > 60 && frequent < 140, "p(0) ≈ 0.24, saw {frequent}/400");
    }
}
