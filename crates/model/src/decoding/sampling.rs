//! Choosing the next token on the device: greedy, or temperature + top-k + top-p with a seeded
//! Gumbel-max draw. Only the chosen id is read back (wasm cannot read synchronously, and reading
//! the whole vocabulary every token would dominate decode time).

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};

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

impl SampleError {
    pub(crate) fn new(message: String) -> Self {
        SampleError(message)
    }
}

#[derive(Clone)]
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
        Self::read_all(choice).await?.first().copied().ok_or_else(|| SampleError("empty result".into()))
    }

    /// Reads back ids chosen on the device, `[rows, 1]`, in one readback.
    pub async fn read_all(choice: Tensor<2, Int>) -> Result<Vec<u32>, SampleError> {
        let data = choice.into_data_async().await.map_err(|e| SampleError(e.to_string()))?;
        data.iter::<i64>()
            .map(|id| u32::try_from(id).map_err(|_| SampleError(format!("invalid token id {id}"))))
            .collect()
    }

    /// The chosen id as a [1, 1] tensor, still on the device (its kernels launched, nothing
    /// waited for).
    pub fn choose(&mut self, logits: Tensor<2>) -> Tensor<2, Int> {
        if self.options.is_greedy() {
            return logits.argmax(1);
        }
        let candidates = self.candidates(logits);
        self.draw(&candidates)
    }

    pub fn is_greedy(&self) -> bool {
        self.options.is_greedy()
    }

    /// The distribution each row of `logits` ([rows, vocab]) is sampled from: temperature, then
    /// top-k, then top-p. Not for greedy options (whose distribution is the argmax).
    pub fn candidates(&self, logits: Tensor<2>) -> Candidates {
        let vocab = logits.dims()[1];
        let k = match self.options.top_k {
            0 => MAX_CANDIDATES,
            k => k,
        }
        .min(vocab);
        // Candidates in descending order: [rows, k]
        let (values, ids) = logits.topk_with_indices(k, 1);
        let scaled = values.div_scalar(self.options.temperature.max(f32::MIN_POSITIVE));
        let mut scores = scaled.clone();
        if self.options.top_p < 1.0 {
            let probs = softmax(scaled, 1);
            // Drop a candidate when the ones before it already reach top_p (the first always stays).
            let before = probs.clone().cumsum(1) - probs;
            scores = scores.mask_fill(before.greater_equal_elem(self.options.top_p), -1e30);
        }
        Candidates { ids, scores }
    }

    /// One id per row of `candidates`, drawn from its distribution: [rows, 1] on the device.
    pub fn draw(&mut self, candidates: &Candidates) -> Tensor<2, Int> {
        // Gumbel-max: argmax(score + Gumbel noise) samples from softmax(score).
        let noise = self.gumbel(candidates.scores.dims(), &candidates.scores.device());
        let pick = (candidates.scores.clone() + noise).argmax(1);
        candidates.ids.clone().gather(1, pick)
    }

    /// Gumbel noise, `[rows, k]`, from the seeded generator.
    pub fn gumbel(&mut self, [rows, k]: [usize; 2], device: &Device) -> Tensor<2> {
        let noise: Vec<f32> = (0..rows * k).map(|_| -(-self.rng.next_open_unit().ln()).ln() as f32).collect();
        Tensor::<2>::from_data(TensorData::new(noise, [rows, k]), device)
    }

    /// A uniform draw in (0, 1) from the seeded generator (speculative sampling's acceptance test).
    pub fn uniform(&mut self) -> f64 {
        self.rng.next_open_unit()
    }
}

/// A sampling distribution over a few candidates per row, on the device.
#[derive(Clone)]
pub struct Candidates {
    /// `[rows, k]` token ids, the most likely first.
    pub ids: Tensor<2, Int>,
    /// `[rows, k]` unnormalised log-probabilities (dropped candidates −1e30).
    pub scores: Tensor<2>,
}

impl Candidates {
    /// `[rows, k]` probabilities.
    pub fn probs(&self) -> Tensor<2> {
        softmax(self.scores.clone(), 1)
    }

    /// The probability of `ids[r]` in row `r`: `[rows]` ids (on the device) → `[rows, 1]`.
    pub fn prob_of(&self, ids: Tensor<2, Int>) -> Tensor<2> {
        let dims = self.ids.dims();
        let hit = self.ids.clone().equal(ids.expand(dims)).float(); // [rows, k]
        (self.probs() * hit).sum_dim(1)
    }

    /// Row `r`'s probability of each of `others`' candidates of row `r`: `[rows, k']`.
    pub fn prob_at(&self, others: &Tensor<2, Int>) -> Tensor<2> {
        let [rows, k] = self.ids.dims();
        let k_other = others.dims()[1];
        // [rows, k', k]: candidate j' of `others` against each of ours.
        let shape = [rows, k_other, k];
        let ours = self.ids.clone().reshape([rows, 1, k]).expand(shape);
        let hit = others.clone().reshape([rows, k_other, 1]).expand(shape).equal(ours).float();
        (hit * self.probs().reshape([rows, 1, k]).expand(shape)).sum_dim(2).reshape([rows, k_other])
    }
}

/// A small, portable, seedable generator: the same seed gives the same tokens natively and in wasm.
#[derive(Clone)]
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

    fn values(t: Tensor<2>) -> Vec<f32> {
        pollster::block_on(t.into_data_async()).unwrap().try_into_vec().unwrap()
    }

    #[test]
    fn candidates_give_each_tokens_probability() {
        let options = SamplingOptions { temperature: 1.0, top_k: 3, top_p: 1.0, seed: 1 };
        let sampler = Sampler::new(options);
        // Row 0 keeps ids 1, 3, 2; row 1 keeps 0, 2, 1.
        let logits = Tensor::<2>::from_data(
            TensorData::new(vec![0.0, 3.0, 1.0, 2.0, 5.0, 0.0, 4.0, -9.0], [2, 4]),
            &Device::flex(),
        );
        let p = sampler.candidates(logits);
        let softmax3 = |a: f32, b: f32, c: f32| {
            let s = a.exp() + b.exp() + c.exp();
            [a.exp() / s, b.exp() / s, c.exp() / s]
        };
        let (row0, row1) = (softmax3(3.0, 2.0, 1.0), softmax3(5.0, 4.0, 0.0));
        let ids = Tensor::<2, Int>::from_data(TensorData::new(vec![3i64, 3], [2, 1]), &Device::flex());
        let of = values(p.prob_of(ids));
        assert!((of[0] - row0[1]).abs() < 1e-6 && of[1].abs() < 1e-6, "{of:?}");
        // Row r of `others` is looked up in row r: ids 2, 3, 0 and 2, 1, 3.
        let others = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 3, 0, 2, 1, 3], [2, 3]), &Device::flex());
        let at = values(p.prob_at(&others));
        let expected = [row0[2], row0[1], 0.0, row1[1], row1[2], 0.0];
        assert!(at.iter().zip(expected).all(|(a, e)| (a - e).abs() < 1e-6), "{at:?} vs {expected:?}");
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
