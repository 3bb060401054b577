//! Gemma 4's image processor, as transformers 5.23's `Gemma4ImageProcessorPil` does it: the image
//! resized (keeping its aspect ratio) to the largest size whose patches fit the soft-token budget
//! and whose sides are multiples of pooling × patch, with Pillow's bicubic filter; scaled to
//! [0, 1]; cut into patches, each with its (x, y) position; padded to the budget's patch count with
//! position (-1, -1). Tested byte for byte against transformers (fixtures/vision-preprocess).
//!
//! The resampling is Pillow's (the reference runs it): a separable convolution, horizontal pass
//! first, with 8-bit intermediate rows, coefficients in fixed point (22 fractional bits) and the
//! filter widened by the scale when shrinking (antialiasing).

/// The soft-token budgets Gemma 4 supports per image (transformers' `_SUPPORTED_SOFT_TOKENS`).
pub const SOFT_TOKEN_BUDGETS: [usize; 5] = [70, 140, 280, 560, 1120];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("{0} soft tokens per image is not a budget Gemma 4 supports (70, 140, 280, 560 or 1,120)")]
    UnsupportedBudget(usize),
    #[error("the image is empty ({width} × {height} pixels)")]
    Empty { width: usize, height: usize },
    #[error("{got} bytes do not hold a {width} × {height} RGB image ({expected} bytes)")]
    WrongSize { width: usize, height: usize, expected: usize, got: usize },
    #[error("a {width} × {height} image cannot be resized to fit {max_patches} patches of {patch} pixels")]
    DoesNotFit { width: usize, height: usize, max_patches: usize, patch: usize },
    #[error("not a PNG image ({0})")]
    NotPng(String),
    #[error("the PNG image is too large to decode ({width} × {height} pixels; at most {max_pixels})")]
    TooLarge { width: u32, height: u32, max_pixels: u64 },
}

/// The processor's settings (its `preprocessor_config.json`): Gemma 4's are 16-pixel patches,
/// 3 × 3 pooling and 280 soft tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageProcessor {
    pub patch_size: usize,
    pub pooling_kernel_size: usize,
    pub max_soft_tokens: usize,
}

impl Default for ImageProcessor {
    fn default() -> Self {
        Self { patch_size: 16, pooling_kernel_size: 3, max_soft_tokens: 280 }
    }
}

/// An 8-bit RGB image, rows top to bottom, 3 bytes a pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<u8>,
}

impl RgbImage {
    pub fn new(width: usize, height: usize, pixels: Vec<u8>) -> Result<Self, ImageError> {
        if width == 0 || height == 0 {
            return Err(ImageError::Empty { width, height });
        }
        let expected = width * height * 3;
        if pixels.len() != expected {
            return Err(ImageError::WrongSize { width, height, expected, got: pixels.len() });
        }
        Ok(Self { width, height, pixels })
    }

    /// Decodes a PNG image to 8-bit RGB (grey, alpha and palettes converted; 16-bit samples cut to
    /// 8). Images above `max_pixels` are refused before their pixels are decoded.
    pub fn from_png(bytes: &[u8], max_pixels: u64) -> Result<Self, ImageError> {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info().map_err(|e| ImageError::NotPng(e.to_string()))?;
        let (width, height) = (reader.info().width, reader.info().height);
        if u64::from(width) * u64::from(height) > max_pixels {
            return Err(ImageError::TooLarge { width, height, max_pixels });
        }
        let size = reader.output_buffer_size().ok_or(ImageError::TooLarge { width, height, max_pixels })?;
        let mut buffer = vec![0; size];
        let frame = reader.next_frame(&mut buffer).map_err(|e| ImageError::NotPng(e.to_string()))?;
        let channels = frame.color_type.samples();
        let pixels: Vec<u8> = buffer[..frame.buffer_size()]
            .chunks_exact(channels)
            .flat_map(|p| match channels {
                1 | 2 => [p[0], p[0], p[0]],
                _ => [p[0], p[1], p[2]],
            })
            .collect();
        Self::new(frame.width as usize, frame.height as usize, pixels)
    }
}

/// What the vision tower reads for one image.
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePatches {
    /// `[max_patches, patch_size² · 3]`, row-major; within a patch: row, column, channel; values in
    /// [0, 1]; padding patches are zero.
    pub pixel_values: Vec<f32>,
    /// `[max_patches, 2]`: each patch's (x, y) in patches; (-1, -1) for padding.
    pub positions: Vec<[i32; 2]>,
    /// Patches that hold the image (the rest is padding).
    pub real_patches: usize,
    /// Soft tokens the image becomes after pooling.
    pub soft_tokens: usize,
    /// The resized image's size in pixels.
    pub width: usize,
    pub height: usize,
}

impl ImageProcessor {
    /// Patches one image may use: the budget times the pooling window.
    pub fn max_patches(&self) -> usize {
        self.max_soft_tokens * self.pooling_kernel_size * self.pooling_kernel_size
    }

    /// The size (height, width) `image` is resized to: the largest that keeps its aspect ratio,
    /// fits the patch budget and has sides that are multiples of pooling × patch.
    pub fn target_size(&self, height: usize, width: usize) -> Result<(usize, usize), ImageError> {
        let (patch, pool) = (self.patch_size, self.pooling_kernel_size);
        let max_patches = self.max_patches();
        let target_px = (max_patches * patch * patch) as f64;
        let factor = (target_px / (height * width) as f64).sqrt();
        let side = pool * patch;
        let mut target_height = ((factor * height as f64) / side as f64).floor() as usize * side;
        let mut target_width = ((factor * width as f64) / side as f64).floor() as usize * side;
        let fail = ImageError::DoesNotFit { width, height, max_patches, patch };
        let longest = (max_patches / (pool * pool)) * side;
        match (target_height, target_width) {
            (0, 0) => return Err(fail),
            // A thin strip: one side of one window, the other as long as the ratio, within bounds.
            (0, _) => {
                target_height = side;
                target_width = ((width / height) * side).min(longest);
            }
            (_, 0) => {
                target_width = side;
                target_height = ((height / width) * side).min(longest);
            }
            _ => {}
        }
        if (target_height * target_width) as f64 > target_px {
            return Err(fail);
        }
        Ok((target_height, target_width))
    }

    /// The patches and positions of `image`.
    pub fn process(&self, image: &RgbImage) -> Result<ImagePatches, ImageError> {
        if !SOFT_TOKEN_BUDGETS.contains(&self.max_soft_tokens) {
            return Err(ImageError::UnsupportedBudget(self.max_soft_tokens));
        }
        let (height, width) = self.target_size(image.height, image.width)?;
        let resized = resize_bicubic(image, width, height);
        let patch = self.patch_size;
        let (across, down) = (width / patch, height / patch);
        let real_patches = across * down;
        let max_patches = self.max_patches();
        let per_patch = patch * patch * 3;
        let mut pixel_values = vec![0.0f32; max_patches * per_patch];
        let mut positions = vec![[-1, -1]; max_patches];
        for py in 0..down {
            for px in 0..across {
                let index = py * across + px;
                positions[index] = [px as i32, py as i32];
                let out = &mut pixel_values[index * per_patch..(index + 1) * per_patch];
                for row in 0..patch {
                    let start = ((py * patch + row) * width + px * patch) * 3;
                    let source = &resized.pixels[start..start + patch * 3];
                    for (value, &byte) in out[row * patch * 3..(row + 1) * patch * 3].iter_mut().zip(source) {
                        // transformers rescales by 1/255 in f32 (its `rescale` keeps the dtype).
                        *value = byte as f32 * (1.0f32 / 255.0);
                    }
                }
            }
        }
        let soft_tokens = real_patches / (self.pooling_kernel_size * self.pooling_kernel_size);
        Ok(ImagePatches { pixel_values, positions, real_patches, soft_tokens, width, height })
    }
}

/// Fractional bits of Pillow's fixed-point coefficients for 8-bit images.
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Pillow's bicubic kernel (a = -0.5) and its support.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}
const BICUBIC_SUPPORT: f64 = 2.0;

/// For each output index along one axis: the first input index, and the fixed-point weights of
/// the inputs from there.
fn coefficients(in_size: usize, out_size: usize) -> Vec<(usize, Vec<i32>)> {
    let scale = in_size as f64 / out_size as f64;
    let filter_scale = scale.max(1.0);
    let support = BICUBIC_SUPPORT * filter_scale;
    (0..out_size)
        .map(|out| {
            let center = (out as f64 + 0.5) * scale;
            // Truncation toward zero, as Pillow's (int) casts; the lower bound is clamped below.
            let first = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let weights: Vec<f64> = (first..end).map(|i| bicubic((i as f64 - center + 0.5) / filter_scale)).collect();
            let total: f64 = weights.iter().sum();
            let fixed = weights
                .iter()
                .map(|w| {
                    let w = if total != 0.0 { w / total } else { *w };
                    let scaled = w * f64::from(1u32 << PRECISION_BITS);
                    (if scaled < 0.0 { scaled - 0.5 } else { scaled + 0.5 }) as i32
                })
                .collect();
            (first, fixed)
        })
        .collect()
}

/// A fixed-point sum back to a byte, rounded (the sum starts at one half) and clamped.
fn clip8(sum: i64) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Pillow's `Image.resize((width, height), Image.BICUBIC)` of an RGB image: the horizontal pass
/// over the rows the vertical pass needs, then the vertical pass, each rounded to bytes.
pub fn resize_bicubic(image: &RgbImage, width: usize, height: usize) -> RgbImage {
    if image.width == width && image.height == height {
        return image.clone();
    }
    let half = 1i64 << (PRECISION_BITS - 1);
    let vertical = coefficients(image.height, height);
    let (mut source, mut source_width, mut row_offset) = (image.pixels.clone(), image.width, 0);
    if width != image.width {
        // Only the rows some output row reads.
        let first_row = vertical.first().map_or(0, |(first, _)| *first);
        let last_row = vertical.last().map_or(0, |(first, w)| first + w.len());
        let horizontal = coefficients(image.width, width);
        let mut rows = vec![0u8; (last_row - first_row) * width * 3];
        for y in first_row..last_row {
            let input = &image.pixels[y * image.width * 3..(y + 1) * image.width * 3];
            let output = &mut rows[(y - first_row) * width * 3..(y - first_row + 1) * width * 3];
            for (x, (first, weights)) in horizontal.iter().enumerate() {
                for c in 0..3 {
                    let sum = weights
                        .iter()
                        .enumerate()
                        .fold(half, |s, (k, &w)| s + i64::from(input[(first + k) * 3 + c]) * i64::from(w));
                    output[x * 3 + c] = clip8(sum);
                }
            }
        }
        (source, source_width, row_offset) = (rows, width, first_row);
    }
    if height == image.height && row_offset == 0 && source.len() == width * height * 3 {
        return RgbImage { width, height, pixels: source };
    }
    let mut pixels = vec![0u8; width * height * 3];
    for (y, (first, weights)) in vertical.iter().enumerate() {
        for x in 0..source_width {
            for c in 0..3 {
                let sum = weights.iter().enumerate().fold(half, |s, (k, &w)| {
                    s + i64::from(source[((first - row_offset + k) * source_width + x) * 3 + c]) * i64::from(w)
                });
                pixels[(y * width + x) * 3 + c] = clip8(sum);
            }
        }
    }
    RgbImage { width, height, pixels }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixtures() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/vision-preprocess")
    }

    /// transformers' processor on seeded images (downscaled, upscaled, a thin strip, another
    /// budget): the same resized bytes, patch count, positions and values.
    #[test]
    fn matches_transformers_byte_for_byte() {
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixtures().join("cases.json")).expect("fixture"))
                .expect("json");
        let processor_of = |budget: u64| ImageProcessor {
            patch_size: meta["patch_size"].as_u64().expect("patch") as usize,
            pooling_kernel_size: meta["pooling_kernel_size"].as_u64().expect("pool") as usize,
            max_soft_tokens: budget as usize,
        };
        let cases = meta["cases"].as_array().expect("cases");
        assert_eq!(cases.len(), 4);
        for case in cases {
            let read = |key: &str| std::fs::read(fixtures().join(case[key].as_str().expect("name"))).expect("bytes");
            let number = |key: &str| case[key].as_u64().expect(key) as usize;
            let image = RgbImage::new(number("width"), number("height"), read("input")).expect("image");
            let processor = processor_of(case["max_soft_tokens"].as_u64().expect("budget"));
            let out = processor.process(&image).expect("processes");
            let name = case["input"].as_str().unwrap_or_default();
            assert_eq!((out.height, out.width), (number("resized_height"), number("resized_width")), "{name}");
            let resized = resize_bicubic(&image, out.width, out.height);
            assert_eq!(resized.pixels, read("resized"), "{name}: the resized bytes");
            assert_eq!(out.positions.len(), number("patches"), "{name}");
            assert_eq!((out.real_patches, out.soft_tokens), (number("real_patches"), number("soft_tokens")), "{name}");
            let per_patch = processor.patch_size * processor.patch_size * 3;
            for (key, index) in [("first_patch", 0), ("last_real_patch", out.real_patches - 1)] {
                let expected: Vec<f32> =
                    case[key].as_array().expect(key).iter().map(|v| v.as_f64().unwrap_or(f64::NAN) as f32).collect();
                let got = &out.pixel_values[index * per_patch..(index + 1) * per_patch];
                for (g, e) in got.iter().zip(&expected) {
                    assert!((g - e).abs() < 1e-6, "{name} {key}: {g} vs {e}");
                }
            }
            let last = &case["last_real_position"];
            let last = [last[0].as_i64().unwrap_or(-2) as i32, last[1].as_i64().unwrap_or(-2) as i32];
            assert_eq!(out.positions[out.real_patches - 1], last, "{name}");
            assert_eq!(out.positions[out.real_patches..].iter().filter(|p| **p != [-1, -1]).count(), 0, "padding");
            assert!(out.pixel_values[out.real_patches * per_patch..].iter().all(|v| *v == 0.0), "padding is zero");
        }
    }

    #[test]
    fn gemma4_sizes_and_refusals() {
        let p = ImageProcessor::default();
        // A 1280 × 800 screenshot at 280 soft tokens: 2,520 patches at most, sides of 48 pixels.
        let (h, w) = p.target_size(800, 1280).expect("fits");
        assert_eq!((h % 48, w % 48), (0, 0));
        assert!((h / 16) * (w / 16) <= 2520 && h < w, "{h} × {w}");
        let bad = ImageProcessor { max_soft_tokens: 100, ..p };
        let image = RgbImage::new(2, 2, vec![0; 12]).expect("image");
        assert_eq!(bad.process(&image), Err(ImageError::UnsupportedBudget(100)));
        assert!(matches!(RgbImage::new(2, 2, vec![0; 11]), Err(ImageError::WrongSize { .. })));
        assert!(matches!(RgbImage::new(0, 2, vec![]), Err(ImageError::Empty { .. })));
    }
}
