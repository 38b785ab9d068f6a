//! Kernels of the `fast` numerics profile ([`Numerics::Fast`]): our own arithmetic where
//! MLX 0.32.2's CUDA backend has no fused kernel, so their outputs are close to MLX's,
//! not equal. The shared blocks call them for the monolith and the generated code alike,
//! so the parity gate still compares the two byte for byte; the distance to the `mlx`
//! profile (mlx-lm's arithmetic) is measured (`parity --distance`, BENCHMARKS.md).
//!
//! - [`decode_attention`]: single-token attention over float K/V at head dims MLX runs
//!   as two matmuls and a softmax (Gemma 4's 256 and 512): two launches instead of
//!   three, spread over the GPU's SMs, with scores and probabilities kept in f32; and
//!   [`decode_attention_quantized`], the same over the quantized caches' triples
//!   (dequantized as they are read, where MLX dequantizes each cache first).
//! - [`quantized_matvec`]: 4- and 8-bit affine-quantized products for 1 to 8 rows (a
//!   decode step's projections and LM head), one warp per output feature, f32 sums, with
//!   the MLP's activation (GeGLU, SwiGLU) or Gemma 4's per-layer gate in the same launch
//!   ([`Epilogue`]): one kernel where MLX runs a matmul, a split and one or two more. The
//!   shared blocks call it for those three (`Mlp`, `SwiGlu`, Gemma 4's `per_layer_raw`),
//!   the LM head, and wide plain projections (`Linear::forward_with`).

use mlx_rs::{Array, Dtype};

use super::cuda::{KernelSpec, Launch, Template, call};
use super::missing;
use crate::cache::QuantTriple;
use crate::error::Result;
use crate::nn::linear::QuantizedWeight;
use crate::nn::mask::AttnMask;
use crate::options::{ExecOptions, Numerics};
use crate::quantization::QuantSpec;

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
    attend(q, CachedRows::Float { k, v }, scale).map(Some)
}

/// [`decode_attention`] over affine-quantized K/V triples (the quantized caches'
/// layout, `[B, Hkv, rows, D·bits/32]` words with `[B, Hkv, rows, D/group]` scales and
/// biases), dequantized in f32 as the rows are read: two kernels where MLX runs a
/// dequantization of each, two matmuls and a softmax. It applies to 4- and 8-bit
/// triples of any group at head dims 64, 128, 256 and 512, otherwise as
/// [`decode_attention`] ([`quantized_applies`]).
pub fn decode_attention_quantized(
    q: &Array,
    k: &QuantTriple,
    v: &QuantTriple,
    spec: QuantSpec,
    scale: f32,
    mask: &AttnMask,
    options: &ExecOptions,
) -> Result<Option<Array>> {
    if !enabled(options) || !quantized_applies(q, k, v, spec, mask) {
        return Ok(None);
    }
    attend(q, CachedRows::Quantized { k, v, spec }, scale).map(Some)
}

/// The cached rows [`attend`] reads.
#[derive(Clone, Copy)]
enum CachedRows<'a> {
    /// Keys and values of the queries' dtype.
    Float { k: &'a Array, v: &'a Array },
    /// Affine-quantized triples.
    Quantized {
        k: &'a QuantTriple,
        v: &'a QuantTriple,
        spec: QuantSpec,
    },
}

/// The two launches of [`decode_attention`] and [`decode_attention_quantized`]
/// (`kernels/decode_attention.cu`, built without or with `AOT_KV_QUANT`).
fn attend(q: &Array, rows: CachedRows<'_>, scale: f32) -> Result<Array> {
    let (batch, heads, head_dim) = (q.dim(0), q.dim(1), q.dim(3));
    // The kernel's name, its input names and arrays (the cached rows after q), and the
    // quantization it dequantizes by.
    let (name, names, inputs, quant): (_, &[&'static str], Vec<&Array>, _) = match rows {
        CachedRows::Float { k, v } => (
            "mlx_aot_decode_attention",
            &["q", "k", "v"],
            vec![q, k, v],
            None,
        ),
        CachedRows::Quantized { k, v, spec } => (
            "mlx_aot_decode_attention_quant",
            &[
                "q", "k", "k_scales", "k_biases", "v", "v_scales", "v_biases",
            ],
            vec![
                q, &k.packed, &k.scales, &k.biases, &v.packed, &v.scales, &v.biases,
            ],
            Some(spec),
        ),
    };
    let (kv_heads, len) = (inputs[1].dim(1), inputs[1].dim(2));
    let split_count = splits(batch * heads, len);
    let mut template = vec![
        Template::Dtype(c"T", q.dtype()),
        Template::Int(c"D", head_dim),
        Template::Int(c"HEADS", heads),
        Template::Int(c"KV_HEADS", kv_heads),
        Template::Int(c"WARPS", WARPS),
        Template::Int(c"SCALE_BITS", scale.to_bits() as i32),
    ];
    if let Some(spec) = quant {
        template.push(Template::Int(c"BITS", spec.bits as i32));
        template.push(Template::Int(c"QGROUP", spec.group_size as i32));
    }
    let block = WARPS * 32;
    let part = call(
        name,
        || KernelSpec {
            name,
            body: include_str!("../../kernels/decode_attention.cu"),
            defines: quant.map(|_| ("AOT_KV_QUANT", 1)).into_iter().collect(),
            inputs: names.to_vec(),
            outputs: vec!["part"],
            contiguous: false,
            shared_header: false,
        },
        &inputs,
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
            shared_header: false,
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
    Ok(out)
}

/// Output features per block of [`quantized_matvec`] (one warp each).
const QMV_WARPS: i32 = 8;

/// The most rows of `x` [`quantized_matvec`] takes (one accumulator each per lane).
pub const QMV_MAX_ROWS: i32 = 8;

/// What [`quantized_matvec`] writes from the f32 products `y` (each rounded once to the
/// input's dtype).
#[derive(Debug, Clone, Copy)]
pub enum Epilogue<'a> {
    /// `y`: the LM head, and projections whose input is at least
    /// [`crate::nn::linear::FAST_PLAIN_MIN_INPUT`] wide
    /// ([`QuantizedWeight::takes_fast_plain`]); narrower ones stay MLX's
    /// `quantized_matmul`, whose build costs less host time.
    Plain,
    /// `gelu_approx(y_gate) * y_up`: the weight is a fused gate/up, its first half of rows
    /// the gate's (Gemma 4's GeGLU MLP).
    Geglu,
    /// `gelu_approx(y) * g`, `g` shaped like the output (Gemma 4's per-layer-input gate).
    GeluTimes(&'a Array),
    /// `silu(y_gate) * y_up`, the weight a fused gate/up (the Llama family's SwiGLU).
    Swiglu,
}

impl Epilogue<'_> {
    /// The kernel's mode (`AOT_QMV_MODE` in `qmv.cu`), name and input names.
    fn kernel(&self) -> (i32, &'static str, Vec<&'static str>) {
        let plain = vec!["x", "w", "scales", "biases"];
        match self {
            Epilogue::Plain => (0, "mlx_aot_qmv", plain),
            Epilogue::Geglu => (1, "mlx_aot_qmv_geglu", plain),
            Epilogue::GeluTimes(_) => (2, "mlx_aot_qmv_gelu_times", {
                let mut v = plain;
                v.push("g");
                v
            }),
            Epilogue::Swiglu => (3, "mlx_aot_qmv_swiglu", plain),
        }
    }

    /// Weight rows per output feature.
    fn parts(&self) -> i32 {
        match self {
            Epilogue::Geglu | Epilogue::Swiglu => 2,
            Epilogue::Plain | Epilogue::GeluTimes(_) => 1,
        }
    }
}

/// `x Wᵀ` on an affine-quantized weight and `epilogue` after it, as one kernel, where it
/// applies: under [`enabled`] options, a 2-D weight of 4 or 8 bits with groups of 32, 64
/// or 128, `x` `[.., K]` with 1 to [`QMV_MAX_ROWS`] rows, and `x`, scales and biases of
/// one 16-bit float dtype. `None` where it does not (the caller runs MLX's ops). Each
/// output feature is one warp's sum whatever the other rows of `w` are, so a fused
/// projection's part equals the part's own product byte for byte.
pub fn quantized_matvec(
    x: &Array,
    w: &QuantizedWeight,
    epilogue: Epilogue<'_>,
    options: &ExecOptions,
) -> Result<Option<Array>> {
    if !enabled(options) || !qmv_applies(x, w) {
        return Ok(None);
    }
    let parts = epilogue.parts();
    let k = x.dim(-1);
    let rows_w = w.weight.dim(0);
    if rows_w % parts != 0 {
        return Ok(None);
    }
    let n = rows_w / parts;
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    if let Epilogue::GeluTimes(g) = epilogue
        && (g.shape() != shape.as_slice() || g.dtype() != x.dtype())
    {
        return Ok(None);
    }
    let rows = x.size() as i32 / k;
    let per_warp = qmv_rows_per_warp(n);
    let split = qmv_split(n, k, per_warp);
    let template = [
        Template::Dtype(c"T", x.dtype()),
        Template::Int(c"BITS", w.spec.bits as i32),
        Template::Int(c"GROUP", w.spec.group_size as i32),
        Template::Int(c"K", k),
        Template::Int(c"M", rows),
        Template::Int(c"R", per_warp),
        Template::Int(c"SPLIT", split),
    ];
    let (mode, name, inputs) = epilogue.kernel();
    let mut args = vec![x, &w.weight, &w.scales, &w.biases];
    if let Epilogue::GeluTimes(g) = epilogue {
        args.push(g);
    }
    let block = QMV_WARPS * 32;
    let out = call(
        name,
        || KernelSpec {
            name,
            body: include_str!("../../kernels/qmv.cu"),
            defines: vec![("AOT_QMV_MODE", mode)],
            inputs,
            outputs: vec!["out"],
            contiguous: true,
            shared_header: false,
        },
        &args,
        &Launch {
            threads: ((n + per_warp - 1) / per_warp * split + QMV_WARPS - 1) / QMV_WARPS * block,
            block,
            output_shapes: vec![shape],
            dtype: x.dtype(),
            template: &template,
        },
    )?
    .pop()
    .ok_or_else(|| missing("quantized matvec"))?;
    Ok(Some(out))
}

/// Output features per warp of [`quantized_matvec`] (`R` in `qmv.cu`) for `outs`
/// features: more rows a warp share its loads of `x` and its reduction, fewer keep
/// enough warps to fill the GPU (an H200 runs 132 SMs of up to 64 warps).
pub fn qmv_rows_per_warp(outs: i32) -> i32 {
    if outs >= 32_768 {
        4
    } else if outs >= 2_048 {
        2
    } else {
        1
    }
}

/// Warps of [`quantized_matvec`] that share one feature set's K (`SPLIT` in `qmv.cu`):
/// doubled while the launch has fewer than [`QMV_SPLIT_WARPS`] warps and each warp keeps
/// at least four 256-value passes of K. A projection onto few features from a long input
/// (Gemma 4's down projection, 2,560 features from 10,240) otherwise runs one warp per
/// feature set, too few to keep HBM busy; the LM head and the fused gate/up keep 1.
pub fn qmv_split(outs: i32, k: i32, per_warp: i32) -> i32 {
    let warps = (outs + per_warp - 1) / per_warp;
    let mut split = 1;
    while split < QMV_WARPS && warps * split < QMV_SPLIT_WARPS && k >= 1024 * split * 2 {
        split *= 2;
    }
    split
}

/// The launch size below which [`qmv_split`] splits K: about two waves of an H100's or
/// H200's 132 SMs at the 16 warps an SM that `qmv.cu`'s registers allow.
const QMV_SPLIT_WARPS: i32 = 4_096;

/// Whether [`quantized_matvec`] takes `x` and `w` (the options aside).
pub fn qmv_applies(x: &Array, w: &QuantizedWeight) -> bool {
    let (bits, group) = (w.spec.bits as i32, w.spec.group_size as i32);
    let dtype = x.dtype();
    let k = x.dim(-1);
    let rows = if k > 0 { x.size() as i32 / k } else { 0 };
    w.weight.ndim() == 2
        && matches!(bits, 4 | 8)
        && matches!(group, 32 | 64 | 128)
        && matches!(dtype, Dtype::Bfloat16 | Dtype::Float16)
        && w.scales.dtype() == dtype
        && w.biases.dtype() == dtype
        && w.weight.dtype() == Dtype::Uint32
        && k > 0
        && w.weight.dim(1) * (32 / bits) == k
        && w.scales.dim(1) * group == k
        && k % 8 == 0
        && (1..=QMV_MAX_ROWS).contains(&rows)
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

/// Whether [`decode_attention_quantized`] takes these inputs (the options aside): one
/// query token without a mask, 16-bit queries with scales and biases of their dtype,
/// 4- or 8-bit words in `spec`'s groups (32, 64 or 128) at head dim 64, 128, 256 or
/// 512, keys and values of one batch, head count and length, `H` a multiple of `Hkv`.
pub fn quantized_applies(
    q: &Array,
    k: &QuantTriple,
    v: &QuantTriple,
    spec: QuantSpec,
    mask: &AttnMask,
) -> bool {
    let dtype = q.dtype();
    let head_dim = q.dim(-1);
    let (bits, group) = (spec.bits as i32, spec.group_size as i32);
    let triple_ok = |t: &QuantTriple| {
        let (p, s, b) = (&t.packed, &t.scales, &t.biases);
        p.ndim() == 4
            && s.ndim() == 4
            && b.ndim() == 4
            && p.dtype() == Dtype::Uint32
            && s.dtype() == dtype
            && b.dtype() == dtype
            && p.dim(-1) * (32 / bits) == head_dim
            && s.dim(-1) * group == head_dim
            && b.shape() == s.shape()
            && p.shape()[..3] == s.shape()[..3]
            && p.dim(0) == q.dim(0)
    };
    matches!(mask, AttnMask::None)
        && q.ndim() == 4
        && q.dim(2) == 1
        && matches!(dtype, Dtype::Bfloat16 | Dtype::Float16)
        && matches!(bits, 4 | 8)
        && matches!(group, 32 | 64 | 128)
        && matches!(head_dim, 64 | 128 | 256 | 512)
        && triple_ok(k)
        && triple_ok(v)
        && k.packed.shape() == v.packed.shape()
        && k.packed.dim(2) > 0
        && k.packed.dim(1) > 0
        && q.dim(1) % k.packed.dim(1) == 0
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

    fn triple(shape: [i32; 4], spec: QuantSpec, dtype: Dtype) -> QuantTriple {
        let x = zeros(&shape, dtype);
        QuantTriple::quantize(&x, spec).unwrap()
    }

    #[test]
    fn quantized_decode_attention_takes_the_presets_triples_and_refuses_the_rest() {
        let bf = Dtype::Bfloat16;
        let q4 = QuantSpec {
            bits: 4,
            group_size: 64,
        };
        let q8 = QuantSpec {
            bits: 8,
            group_size: 32,
        };
        // Gemma 4's head dims and Llama's 64 and 128, 4- and 8-bit.
        for (heads, kv_heads, d) in [(8, 2, 256), (8, 2, 512), (32, 8, 64), (32, 8, 128)] {
            let q = zeros(&[2, heads, 1, d], bf);
            for spec in [q4, q8] {
                let kv = triple([2, kv_heads, 33, d], spec, bf);
                assert!(quantized_applies(&q, &kv, &kv, spec, &AttnMask::None));
                assert!(!quantized_applies(&q, &kv, &kv, spec, &AttnMask::Causal));
            }
        }
        let q = zeros(&[1, 8, 1, 256], bf);
        let kv = triple([1, 2, 40, 256], q4, bf);
        // The spec must be the triples' own: 8-bit words read as 4-bit ones are refused.
        assert!(!quantized_applies(&q, &kv, &kv, q8, &AttnMask::None));
        // A prefill, a batch mismatch, heads not a multiple, head dim 96, 3-bit, f32.
        let prefill = zeros(&[1, 8, 4, 256], bf);
        assert!(!quantized_applies(&prefill, &kv, &kv, q4, &AttnMask::None));
        let q2 = zeros(&[2, 8, 1, 256], bf);
        assert!(!quantized_applies(&q2, &kv, &kv, q4, &AttnMask::None));
        let kv3 = triple([1, 3, 40, 256], q4, bf);
        assert!(!quantized_applies(&q, &kv3, &kv3, q4, &AttnMask::None));
        let spec96 = QuantSpec {
            bits: 4,
            group_size: 32,
        };
        let kv96 = triple([1, 2, 40, 96], spec96, bf);
        let q96 = zeros(&[1, 8, 1, 96], bf);
        assert!(!quantized_applies(
            &q96,
            &kv96,
            &kv96,
            spec96,
            &AttnMask::None
        ));
        let q3 = QuantSpec {
            bits: 3,
            group_size: 64,
        };
        let kv3bit = triple([1, 2, 40, 256], q3, bf);
        assert!(!quantized_applies(
            &q,
            &kv3bit,
            &kv3bit,
            q3,
            &AttnMask::None
        ));
        let f = Dtype::Float32;
        let kvf = triple([1, 2, 40, 256], q4, f);
        assert!(!quantized_applies(
            &zeros(&[1, 8, 1, 256], f),
            &kvf,
            &kvf,
            q4,
            &AttnMask::None
        ));
        // Keys and values of different lengths.
        let short = triple([1, 2, 39, 256], q4, bf);
        assert!(!quantized_applies(&q, &kv, &short, q4, &AttnMask::None));
    }

    #[test]
    fn a_warp_takes_more_rows_where_there_are_many_features() {
        // gemma4-e4b: the per-layer gate (256 features) keeps a warp each, q/k/v, o,
        // gate/up and down (2,048 to 10,240) two, the LM head (262,144) four.
        assert_eq!(qmv_rows_per_warp(256), 1);
        assert_eq!(qmv_rows_per_warp(2047), 1);
        assert_eq!(qmv_rows_per_warp(2048), 2);
        assert_eq!(qmv_rows_per_warp(10240), 2);
        assert_eq!(qmv_rows_per_warp(262_144), 4);
    }

    #[test]
    fn k_is_split_where_few_warps_would_read_a_long_row() {
        // gemma4-e4b's down projection (10,240 -> 2,560, two features a warp): 1,280
        // warps alone, four to a feature set; its full-attention o_proj (4,096 -> 2,560)
        // the same; the per-layer gate (2,560 -> 256) two, short of the four passes a
        // warp keeps at four. The LM head and the fused gate/up have warps enough.
        assert_eq!(qmv_split(2560, 10240, qmv_rows_per_warp(2560)), 4);
        assert_eq!(qmv_split(2560, 4096, qmv_rows_per_warp(2560)), 4);
        assert_eq!(qmv_split(256, 2560, qmv_rows_per_warp(256)), 2);
        assert_eq!(qmv_split(262_144, 2560, qmv_rows_per_warp(262_144)), 1);
        assert_eq!(qmv_split(10240, 2560, qmv_rows_per_warp(10240)), 1);
        // llama-3.2-1b's down (8,192 -> 2,048); never past a block's eight warps, never
        // under four passes of K per warp.
        assert_eq!(qmv_split(2048, 8192, qmv_rows_per_warp(2048)), 4);
        assert_eq!(qmv_split(1, 1 << 20, 1), 8);
        assert_eq!(qmv_split(1, 1024, 1), 1);
        assert_eq!(qmv_split(1, 2048, 1), 2);
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
        let spec = QuantSpec {
            bits: 4,
            group_size: 64,
        };
        let t = triple([1, 2, 4, 256], spec, Dtype::Bfloat16);
        let out =
            decode_attention_quantized(&q, &t, &t, spec, 1.0, &AttnMask::None, &options).unwrap();
        assert!(out.is_none());
    }
}
