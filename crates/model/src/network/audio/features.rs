//! Sound → log-mel features, as transformers 5.23's `Gemma4AudioFeatureExtractor` computes them:
//! 16 kHz mono samples, zero-padded to a multiple of 128 samples; 20 ms frames every 10 ms (the
//! first one centred on the clip's start: half a frame of zeros in front), a periodic Hann window,
//! the magnitude of a 512-point FFT, 128 triangular mel filters (HTK scale, 0–8 kHz, no
//! normalisation), `ln(mel + 0.001)`, an optional per-bin mean and deviation; frames that end in
//! the padding are zeroed and masked out.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

/// The most sound the model takes at once: 30 s at 16 kHz (the extractor's `max_length`).
pub const MAX_SAMPLES: usize = 480_000;

/// Why a clip cannot become features.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AudioError {
    #[error("the clip is {seconds:.1} s long; Gemma 4 hears at most 30 s at a time")]
    TooLong { seconds: f64 },
    #[error("the clip is empty")]
    Empty,
    #[error("the audio feature extractor's settings are unusable: {0}")]
    Config(String),
}

/// The extractor's settings (`Gemma4AudioFeatureExtractor`'s arguments; its defaults are Gemma 4's).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct FeatureConfig {
    /// Mel bins a frame.
    pub feature_size: usize,
    pub sampling_rate: usize,
    pub frame_length_ms: f64,
    pub hop_length_ms: f64,
    pub min_frequency: f64,
    pub max_frequency: f64,
    pub preemphasis: f64,
    pub preemphasis_htk_flavor: bool,
    pub fft_overdrive: bool,
    pub input_scale_factor: f64,
    pub mel_floor: f64,
    pub per_bin_mean: Option<Vec<f64>>,
    pub per_bin_stddev: Option<Vec<f64>>,
}

impl Default for FeatureConfig {
    fn default() -> Self {
        FeatureConfig {
            feature_size: 128,
            sampling_rate: 16_000,
            frame_length_ms: 20.0,
            hop_length_ms: 10.0,
            min_frequency: 0.0,
            max_frequency: 8_000.0,
            preemphasis: 0.0,
            preemphasis_htk_flavor: true,
            fft_overdrive: false,
            input_scale_factor: 1.0,
            mel_floor: 1e-3,
            per_bin_mean: None,
            per_bin_stddev: None,
        }
    }
}

/// A clip's features: `frames × bins` values, row by row, and which frames hold sound.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioFeatures {
    pub frames: usize,
    pub bins: usize,
    pub values: Vec<f32>,
    pub mask: Vec<bool>,
}

/// The clip's padding: to a multiple of this many samples (the extractor's `pad_to_multiple_of`).
const PAD_TO: usize = 128;

pub struct FeatureExtractor {
    config: FeatureConfig,
    frame_length: usize,
    hop_length: usize,
    fft_length: usize,
    window: Vec<f32>,
    /// `[fft_length / 2 + 1, bins]`, row by row.
    mel_filters: Vec<f64>,
    fft: Arc<dyn RealToComplex<f64>>,
}

/// Whether `samples` (at `rate` Hz) is a clip the model takes: some sound, at most 30 s.
pub fn check_clip(samples: &[f32], rate: usize) -> Result<(), AudioError> {
    if samples.is_empty() {
        return Err(AudioError::Empty);
    }
    if samples.len() > MAX_SAMPLES {
        return Err(AudioError::TooLong { seconds: samples.len() as f64 / rate as f64 });
    }
    Ok(())
}

impl FeatureExtractor {
    pub fn new(config: FeatureConfig) -> Result<Self, AudioError> {
        let round = |ms: f64| (config.sampling_rate as f64 * ms / 1000.0).round() as usize;
        let (frame_length, hop_length) = (round(config.frame_length_ms), round(config.hop_length_ms));
        if frame_length < 2 || hop_length == 0 || config.feature_size == 0 {
            return Err(AudioError::Config(format!("frames of {frame_length} samples every {hop_length}")));
        }
        for (name, values) in [("per_bin_mean", &config.per_bin_mean), ("per_bin_stddev", &config.per_bin_stddev)] {
            if values.as_ref().is_some_and(|v| v.len() != config.feature_size) {
                return Err(AudioError::Config(format!("{name} must have {} values", config.feature_size)));
            }
        }
        let fft_length = frame_length.next_power_of_two() * if config.fft_overdrive { 2 } else { 1 };
        // numpy's `hanning(n + 1)[:-1]`: periodic, as float32.
        let window = (0..frame_length)
            .map(|n| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / frame_length as f64).cos()) as f32)
            .collect();
        let mel_filters = mel_filter_bank(fft_length / 2 + 1, &config);
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(fft_length);
        Ok(FeatureExtractor { config, frame_length, hop_length, fft_length, window, mel_filters, fft })
    }

    pub fn config(&self) -> &FeatureConfig {
        &self.config
    }

    /// The features of `samples` (mono, at the configured rate, in [-1, 1]).
    pub fn extract(&self, samples: &[f32]) -> Result<AudioFeatures, AudioError> {
        check_clip(samples, self.config.sampling_rate)?;
        let c = &self.config;
        let scale = c.input_scale_factor as f32;
        // Half a frame of silence in front, the clip, zeros up to a multiple of PAD_TO.
        let pad_left = self.frame_length / 2;
        let padded_len = samples.len().div_ceil(PAD_TO) * PAD_TO;
        let mut wave = vec![0.0f32; pad_left + padded_len];
        for (slot, &s) in wave[pad_left..].iter_mut().zip(samples) {
            *slot = if scale == 1.0 { s } else { s * scale };
        }
        let unfold = self.frame_length + 1;
        let frames = if wave.len() >= unfold { (wave.len() - unfold) / self.hop_length + 1 } else { 0 };
        let bins = c.feature_size;
        let spectrum_len = self.fft_length / 2 + 1;
        let mut values = vec![0.0f32; frames * bins];
        let mut mask = vec![false; frames];
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut magnitude = vec![0.0f64; spectrum_len];
        let p = c.preemphasis as f32;
        for f in 0..frames {
            let chunk = &wave[f * self.hop_length..f * self.hop_length + unfold];
            input.iter_mut().for_each(|x| *x = 0.0);
            for (n, slot) in input.iter_mut().take(self.frame_length).enumerate() {
                let sample = match (p > 0.0, c.preemphasis_htk_flavor) {
                    (false, _) => chunk[n],
                    (true, true) if n == 0 => chunk[0] * (1.0 - p),
                    (true, true) => chunk[n] - p * chunk[n - 1],
                    (true, false) => chunk[n + 1] - p * chunk[n],
                };
                *slot = f64::from(sample * self.window[n]);
            }
            self.fft.process(&mut input, &mut spectrum).map_err(|e| AudioError::Config(e.to_string()))?;
            for (m, z) in magnitude.iter_mut().zip(&spectrum) {
                *m = z.norm();
            }
            let row = &mut values[f * bins..(f + 1) * bins];
            for (b, out) in row.iter_mut().enumerate() {
                let mel: f64 = (0..spectrum_len).map(|k| magnitude[k] * self.mel_filters[k * bins + b]).sum();
                let mut v = (mel + c.mel_floor).ln();
                if let Some(mean) = &c.per_bin_mean {
                    v -= mean[b];
                }
                if let Some(stddev) = &c.per_bin_stddev {
                    v /= stddev[b];
                }
                *out = v as f32;
            }
            // A frame holds sound when its last sample (in the unpadded clip) does.
            let end = f * self.hop_length + unfold - 1;
            mask[f] = end >= pad_left && end - pad_left < samples.len();
            if !mask[f] {
                row.iter_mut().for_each(|v| *v = 0.0);
            }
        }
        Ok(AudioFeatures { frames, bins, values, mask })
    }
}

/// transformers' `mel_filter_bank` (HTK mel scale, no normalisation, triangles in Hz):
/// `[num_frequency_bins, bins]`, row by row.
fn mel_filter_bank(num_frequency_bins: usize, c: &FeatureConfig) -> Vec<f64> {
    let hz_to_mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let mel_to_hz = |m: f64| 700.0 * (10f64.powf(m / 2595.0) - 1.0);
    let bins = c.feature_size;
    let (mel_min, mel_max) = (hz_to_mel(c.min_frequency), hz_to_mel(c.max_frequency));
    // numpy's linspace: start + i·step, the last point exactly the end.
    let linspace = |start: f64, end: f64, n: usize, i: usize| {
        if i == n - 1 { end } else { start + i as f64 * (end - start) / (n - 1) as f64 }
    };
    let filter_freqs: Vec<f64> = (0..bins + 2).map(|i| mel_to_hz(linspace(mel_min, mel_max, bins + 2, i))).collect();
    let nyquist = (c.sampling_rate / 2) as f64;
    let mut filters = vec![0.0; num_frequency_bins * bins];
    for k in 0..num_frequency_bins {
        let fft_freq = linspace(0.0, nyquist, num_frequency_bins, k);
        for b in 0..bins {
            let down = -(filter_freqs[b] - fft_freq) / (filter_freqs[b + 1] - filter_freqs[b]);
            let up = (filter_freqs[b + 2] - fft_freq) / (filter_freqs[b + 2] - filter_freqs[b + 1]);
            filters[k * bins + b] = down.min(up).max(0.0);
        }
    }
    filters
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[derive(serde::Deserialize)]
    struct Case {
        signal: String,
        samples: usize,
        config: serde_json::Value,
        frames: usize,
        features: Vec<f32>,
        mask: Vec<bool>,
    }

    /// transformers' extractor on seeded signals (fixtures/gen_audio_features.py): every frame and
    /// bin, the mask, with each option of the settings.
    #[test]
    fn features_match_transformers() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/audio-features");
        #[derive(serde::Deserialize)]
        struct Fixture {
            cases: Vec<Case>,
        }
        let fixture: Fixture =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
        for case in fixture.cases {
            let bytes = std::fs::read(dir.join(&case.signal)).unwrap();
            let samples: Vec<f32> =
                bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            assert_eq!(samples.len(), case.samples);
            let config: FeatureConfig = serde_json::from_value(case.config.clone()).unwrap();
            let features = FeatureExtractor::new(config).unwrap().extract(&samples).unwrap();
            let options: Vec<&String> = case.config.as_object().map(|o| o.keys().collect()).unwrap_or_default();
            let label = format!("{} with {options:?}", case.signal);
            assert_eq!((features.frames, features.bins), (case.frames, 128), "{label}");
            assert_eq!(features.mask, case.mask, "{label}");
            let diff = features.values.iter().zip(&case.features).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            eprintln!("{label}: max |Δ| = {diff:.2e}");
            assert!(diff <= 1e-4, "{label}: max |Δ| {diff}");
        }
    }

    #[test]
    fn a_clip_over_thirty_seconds_or_empty_is_refused() {
        let extractor = FeatureExtractor::new(FeatureConfig::default()).unwrap();
        assert_eq!(extractor.extract(&[]), Err(AudioError::Empty));
        let long = vec![0.0; MAX_SAMPLES + 1];
        assert!(matches!(extractor.extract(&long), Err(AudioError::TooLong { .. })));
        // 30 s: 2,999 frames, 750 soft tokens after the two subsamplings (the processor's cap).
        let features = extractor.extract(&long[..MAX_SAMPLES]).unwrap();
        assert_eq!(features.frames, 2999);
        assert_eq!(crate::audio::AudioConfig::soft_tokens(&features.mask), 750);
    }
}
