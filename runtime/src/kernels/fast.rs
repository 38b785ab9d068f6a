//! Kernels of the `fast` numerics profile ([`Numerics::Fast`]): our own arithmetic where
//! MLX 0.32.2's CUDA backend has no fused kernel, so their outputs are close to MLX's,
//! not equal. The shared blocks call them for the monolith and the generated code alike,
//! so the parity gate still compares the two byte for byte; the distance to the `mlx`
//! profile (mlx-lm's arithmetic) is measured (`parity --distance`, BENCHMARKS.md).
//!
//! - [`decode_attention`]: single-token attention over float K/V at head dims MLX runs
//!   as two matmuls and a softmax (Gemma 4's 256 and 512): two launches instead of
//!   three, spread over the GPU's SMs, with scores and probabilities kept in f32.

use mlx_rs::{Array, Dtype};

use super::cuda::{KernelSpec, Launch, Template, call};
use super::missing;
use crate::error::Result;
use crate::nn::mask::AttnMask;
use crate::options::{ExecOptions, Numerics};

/// Whether a model with `options` runs the fast kernels: under [`Numerics::Fast`] when
/// MLX's default device is a CUDA GPU (the only one they are written for).
pub fn enabled(options: &ExecOptions) -> bool {
    options.numerics() == Numerics::Fast && crate::backend::cuda_default()
}

/// Warps per block of [`decode_attention`]'s first kernel.
const WARPS: i32 = 4;

/// The largest head dim [`decode_attention`] takes (the first kernel's shared memory,
/// `WARPS x D` floats).
const MAX_HEAD_DIM: i32 = 512;

/// How many slices [`decode_attention`] cuts `rows` cached rows into for `heads` query
/// heads (over all sequences): enough blocks to spread the rows over the GPU's SMs, at
/// least 32 rows a slice. A runtime value (the kernels read it from their launch), so a
/// growing cache never compiles a new kernel.
pub fn splits(heads: i32, rows: i32) -> i32 {
    let most = (512 / heads.max(1)).max(1);
    ((rows + 31) / 32).clamp(1, most)
}

/// `softmax(scale * q kᵀ) v` for one query token per sequence over every cached row, as
/// two kernels (each block of the first attends one head over one slice of the rows,
/// the second merges a head's slices), where it applies: under [`enabled`] options, no
/// mask, `q` `[B, H, 1, D]` and `k`, `v` `[B, Hkv, rows, D]` of one 16-bit float dtype
/// with `H` a multiple of `Hkv` and `D` a multiple of 256 up to 512. `None` where it
/// does not (the caller runs MLX's attention). The caches' views are read in place
/// through their strides.
pub fn decode_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &AttnMask,
    options: &ExecOptions,
) -> Result<Option<Array>> {
    if !enabled(options) || !applies(q, k, v, mask) {
        return Ok(None);
    }
    let (batch, heads, head_dim, rows) = (q.dim(0), q.dim(1), q.dim(3), k.dim(2));
    let split_count = splits(batch * heads, rows);
    let template = [
        Template::Dtype(c"T", q.dtype()),
        Template::Int(c"D", head_dim),
        Template::Int(c"HEADS", heads),
        Template::Int(c"KV_HEADS", k.dim(1)),
        Template::Int(c"WARPS", WARPS),
        Template::Int(c"SCALE_BITS", scale.to_bits() as i32),
    ];
    let block = WARPS * 32;
    let part = call(
        "mlx_aot_decode_attention",
        || KernelSpec {
            name: "mlx_aot_decode_attention",
            body: include_str!("../../kernels/decode_attention.cu"),
            defines: Vec::new(),
            inputs: vec!["q", "k", "v"],
            outputs: vec!["part"],
            contiguous: false,
        },
        &[q, k, v],
        &Launch {
            threads: batch * heads * split_count * block,
            block,
            output_shapes: vec![vec![batch * heads, split_count, head_dim + 2]],
            dtype: Dtype::Float32,
            template: &template,
        },
    )?
    .pop()
    .ok_or_else(|| missing("decode attention"))?;
    let merge_template = [
        Template::Dtype(c"T", q.dtype()),
        Template::Int(c"D", head_dim),
    ];
    let merge_block = head_dim.min(256);
    let out = call(
        "mlx_aot_decode_attention_merge",
        || KernelSpec {
            name: "mlx_aot_decode_attention_merge",
            body: include_str!("../../kernels/decode_attention_merge.cu"),
            defines: Vec::new(),
            inputs: vec!["part"],
            outputs: vec!["out"],
            contiguous: true,
        },
        &[&part],
        &Launch {
            threads: batch * heads * merge_block,
            block: merge_block,
            output_shapes: vec![vec![batch, heads, 1, head_dim]],
            dtype: q.dtype(),
            template: &merge_template,
        },
    )?
    .pop()
    .ok_or_else(|| missing("decode attention merge"))?;
    Ok(Some(out))
}

/// Whether [`decode_attention`] takes these inputs (the options aside).
pub fn applies(q: &Array, k: &Array, v: &Array, mask: &AttnMask) -> bool {
    let dtype = q.dtype();
    let head_dim = q.dim(-1);
    matches!(mask, AttnMask::None)
        && q.ndim() == 4
        && k.ndim() == 4
        && v.ndim() == 4
        && q.dim(2) == 1
        && matches!(dtype, Dtype::Bfloat16 | Dtype::Float16)
        && k.dtype() == dtype
        && v.dtype() == dtype
        && head_dim % 256 == 0
        && head_dim <= MAX_HEAD_DIM
        && k.dim(-1) == head_dim
        && v.dim(-1) == head_dim
        && k.dim(0) == q.dim(0)
        && v.dim(0) == q.dim(0)
        && k.dim(1) == v.dim(1)
        && k.dim(2) == v.dim(2)
        && k.dim(2) > 0
        && k.dim(1) > 0
        && q.dim(1) % k.dim(1) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeros(shape: &[i32], dtype: Dtype) -> Array {
        mlx_rs::ops::zeros_dtype(shape, dtype).unwrap()
    }

    #[test]
    fn decode_attention_takes_gemma_decode_shapes_and_refuses_the_rest() {
        let bf = Dtype::Bfloat16;
        let q = zeros(&[1, 8, 1, 256], bf);
        let kv = zeros(&[1, 2, 40, 256], bf);
        assert!(applies(&q, &kv, &kv, &AttnMask::None));
        let q512 = zeros(&[2, 8, 1, 512], bf);
        let kv512 = zeros(&[2, 1, 7, 512], bf);
        assert!(applies(&q512, &kv512, &kv512, &AttnMask::None));
        // A mask, a prefill, f32, head dim 128 (MLX's own fused kernel), 1024 (shared
        // memory), heads not a multiple of the K/V heads, batch mismatch.
        assert!(!applies(&q, &kv, &kv, &AttnMask::Causal));
        assert!(!applies(
            &zeros(&[1, 8, 3, 256], bf),
            &kv,
            &kv,
            &AttnMask::None
        ));
        let f = Dtype::Float32;
        assert!(!applies(
            &zeros(&[1, 8, 1, 256], f),
            &zeros(&[1, 2, 40, 256], f),
            &zeros(&[1, 2, 40, 256], f),
            &AttnMask::None
        ));
        let q128 = zeros(&[1, 8, 1, 128], bf);
        let kv128 = zeros(&[1, 2, 40, 128], bf);
        assert!(!applies(&q128, &kv128, &kv128, &AttnMask::None));
        let q1024 = zeros(&[1, 8, 1, 1024], bf);
        let kv1024 = zeros(&[1, 2, 40, 1024], bf);
        assert!(!applies(&q1024, &kv1024, &kv1024, &AttnMask::None));
        let kv3 = zeros(&[1, 3, 40, 256], bf);
        assert!(!applies(&q, &kv3, &kv3, &AttnMask::None));
        let kvb = zeros(&[2, 2, 40, 256], bf);
        assert!(!applies(&q, &kvb, &kvb, &AttnMask::None));
    }

    #[test]
    fn splits_spread_the_rows_without_slices_under_32_rows() {
        assert_eq!(splits(8, 1), 1);
        assert_eq!(splits(8, 33), 2);
        assert_eq!(splits(8, 512), 16);
        assert_eq!(splits(8, 100_000), 64);
        assert_eq!(splits(1024, 4096), 1);
    }

    #[test]
    fn the_cpu_runs_no_fast_kernel_even_when_asked() {
        if crate::backend::cuda_default() {
            return;
        }
        let options = ExecOptions {
            numerics: Some(Numerics::Fast),
            ..ExecOptions::default()
        };
        let q = zeros(&[1, 8, 1, 256], Dtype::Bfloat16);
        let kv = zeros(&[1, 2, 4, 256], Dtype::Bfloat16);
        let out = decode_attention(&q, &kv, &kv, 1.0, &AttnMask::None, &options).unwrap();
        assert!(out.is_none());
    }
}
