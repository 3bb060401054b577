//! Process-wide kernel choices for measuring: which kernel the model's prompt products take, the
//! tiled GEMM's tile and the fewest keys a decode attention split reads. `hearth bench` sets them once, before the first launch, to compare
//! today's kernels with earlier ones or to try tile shapes on a new adapter without a rebuild.
//! The product never sets them: unset, every launch takes the tuned default.

use std::sync::OnceLock;

/// Which kernel multiplies by a packed matrix on the cubecl backends. The model lets the shape
/// decide ([`ProductKernel::Auto`]); the benchmark and the tests pick one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProductKernel {
    /// The tiled GEMM from 16 tokens (prefill), the GEMV-style kernel below that (decode).
    Auto,
    /// Rows of the matrix per thread block, 8 tokens at a time (`affine::affine_matmul_kernel`).
    TokenTiles,
    /// Tiles of 16 tokens × 256 or 512 rows ([`crate::affine`]'s `gemm.rs`).
    Tiled,
}

static PREFILL_KERNEL: OnceLock<ProductKernel> = OnceLock::new();
static GEMM_TILE: OnceLock<GemmTile> = OnceLock::new();
static SPLIT_KEYS: OnceLock<u32> = OnceLock::new();
static GEMV_ROWS: OnceLock<u32> = OnceLock::new();

/// Why a choice was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TuningError {
    #[error("the {0} was already chosen for this process (choose it once, before the first launch)")]
    AlreadySet(&'static str),
    #[error("a GEMM tile is written threads×rows×tokens×depth, e.g. 64x8x16x16; got {0:?}")]
    Syntax(String),
    #[error("GEMM tile {0}: {1}")]
    Invalid(GemmTile, &'static str),
    #[error("a decode attention split takes 1 to 4,096 keys at least, got {0}")]
    SplitKeys(u32),
    #[error("a GEMV block multiplies 1, 2, 4 or 8 rows, got {0}")]
    GemvRows(u32),
}

/// The kernel that multiplies a prompt (16 tokens or more) by a packed matrix when the model lets
/// the shape decide ([`ProductKernel::Auto`]): [`ProductKernel::TokenTiles`] is the kernel every
/// prompt took before the tiled GEMM existed.
pub fn set_prefill_kernel(kernel: ProductKernel) -> Result<(), TuningError> {
    PREFILL_KERNEL.set(kernel).map_err(|_| TuningError::AlreadySet("prefill kernel"))
}

pub(crate) fn prefill_kernel() -> Option<ProductKernel> {
    PREFILL_KERNEL.get().copied()
}

/// One tile shape for every tiled GEMM launch, in place of the shape chosen per matrix.
pub fn set_gemm_tile(tile: GemmTile) -> Result<(), TuningError> {
    tile.check()?;
    GEMM_TILE.set(tile).map_err(|_| TuningError::AlreadySet("GEMM tile"))
}

pub(crate) fn gemm_tile() -> Option<GemmTile> {
    GEMM_TILE.get().copied()
}

/// The fewest keys each split of the decode attention reads (the default is
/// `attention::MIN_KEYS_PER_SPLIT`): fewer splits more of the GPU's units, more splits write more
/// partial results.
pub fn set_decode_split_keys(keys: u32) -> Result<(), TuningError> {
    if !(1..=4096).contains(&keys) {
        return Err(TuningError::SplitKeys(keys));
    }
    SPLIT_KEYS.set(keys).map_err(|_| TuningError::AlreadySet("decode split keys"))
}

pub(crate) fn decode_split_keys() -> Option<u32> {
    SPLIT_KEYS.get().copied()
}

/// The tiled GEMM's work split: a block of `threads` owns `threads · rows_per_thread` output rows
/// × `tokens` tokens and walks `k` in slices of `depth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmTile {
    pub threads: u32,
    pub rows_per_thread: u32,
    pub tokens: u32,
    pub depth: u32,
}

impl std::fmt::Display for GemmTile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}x{}x{}", self.threads, self.rows_per_thread, self.tokens, self.depth)
    }
}

impl std::str::FromStr for GemmTile {
    type Err = TuningError;

    /// `threads×rows×tokens×depth` (`x` or `×`), e.g. `64x8x16x16`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let numbers: Vec<u32> = text
            .split(['x', '×'])
            .map(|n| n.trim().parse())
            .collect::<Result<_, _>>()
            .map_err(|_| TuningError::Syntax(text.into()))?;
        let [threads, rows_per_thread, tokens, depth] = numbers[..] else {
            return Err(TuningError::Syntax(text.into()));
        };
        let tile = GemmTile { threads, rows_per_thread, tokens, depth };
        tile.check()?;
        Ok(tile)
    }
}

impl GemmTile {
    /// What the kernel assumes of its tile (see `affine/gemm.rs`): WebGPU's minimum limits (256
    /// threads, 16 KiB of shared memory), whole code words per slice in both widths, and every
    /// thread staging the same number of inputs.
    pub(crate) fn check(self) -> Result<(), TuningError> {
        let fail = |why| Err(TuningError::Invalid(self, why));
        if !(1..=256).contains(&self.threads) || !self.threads.is_power_of_two() {
            return fail("threads must be a power of two from 1 to 256");
        }
        if !(1..=16).contains(&self.rows_per_thread) {
            return fail("rows per thread must be 1 to 16");
        }
        if !(1..=64).contains(&self.tokens) || self.tokens > self.threads {
            return fail("tokens must be 1 to 64 and no more than the threads (one sums each token's squares)");
        }
        if self.depth == 0 || !self.depth.is_multiple_of(8) || self.depth > 64 {
            return fail("depth must be a multiple of 8 up to 64 (whole 4-bit code words)");
        }
        if !(self.tokens * self.depth).is_multiple_of(self.threads) {
            return fail("tokens × depth must be a multiple of the threads (each stages the same number of inputs)");
        }
        if (self.tokens * self.depth + self.tokens) * 4 > 16 * 1024 {
            return fail("the staged inputs exceed WebGPU's 16 KiB of shared memory");
        }
        Ok(())
    }
}

/// Rows each block of the GEMV-style kernel multiplies (decode's products; 1, 2, 4 or 8: its 64
/// threads split into as many rows), in place of the default (one).
pub fn set_gemv_rows(rows: u32) -> Result<(), TuningError> {
    if !matches!(rows, 1 | 2 | 4 | 8) {
        return Err(TuningError::GemvRows(rows));
    }
    GEMV_ROWS.set(rows).map_err(|_| TuningError::AlreadySet("GEMV rows per block"))
}

pub(crate) fn gemv_rows() -> Option<u32> {
    GEMV_ROWS.get().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_parse_and_refuse_what_the_kernel_cannot_run() {
        let tile: GemmTile = "64x8x16x16".parse().expect("the default shape");
        assert_eq!(tile, GemmTile { threads: 64, rows_per_thread: 8, tokens: 16, depth: 16 });
        assert_eq!(tile.to_string(), "64x8x16x16");
        assert!(matches!("64x8x16".parse::<GemmTile>(), Err(TuningError::Syntax(_))));
        assert!(matches!("64x8xaxb".parse::<GemmTile>(), Err(TuningError::Syntax(_))));
        // 48 threads: not a power of two; 16 tokens on 8 threads; depth 12 splits a code word.
        for bad in ["48x8x16x16", "8x8x16x16", "64x8x16x12", "32x8x1x8"] {
            assert!(matches!(bad.parse::<GemmTile>(), Err(TuningError::Invalid(..))), "{bad}");
        }
    }
}
