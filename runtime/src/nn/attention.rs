//! Scaled dot-product attention with scale 1.0 (Gemma 4's q/k norms stand in for
//! 1/sqrt(D)): fast SDPA on float K/V, and the bit-exact unfused path on quantized K/V
//! (gemma4.md §5).

use mlx_rs::fast::ScaledDotProductAttentionMask;
use mlx_rs::{Array, Dtype};

use crate::cache::QuantTriple;
use crate::error::Result;
use crate::kernels;
use crate::nn::composition::Composition;
use crate::nn::mask::AttnMask;
use crate::nn::scalar;
use crate::options::ExecOptions;
use crate::quantization::QuantSpec;

/// `fast::scaled_dot_product_attention(q, k, v, scale = 1.0, mask)`; GQA handled natively.
pub fn sdpa(q: &Array, k: &Array, v: &Array, mask: &AttnMask) -> Result<Array> {
    let mask = match mask {
        AttnMask::None => None,
        AttnMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
        AttnMask::Array(a) => Some(ScaledDotProductAttentionMask::Array(a)),
    };
    Ok(mlx_rs::fast::scaled_dot_product_attention(
        q, k, v, 1.0, mask, None,
    )?)
}

/// [`sdpa`], in the shortest form `options` and `composition` allow. Under the `fast`
/// numerics profile, the single-token attention kernel of ours where it applies
/// ([`kernels::fast::decode_attention`], in any composition, so that the monolith and
/// the generated code run it alike). Otherwise under [`Composition::SingleToken`], for
/// one query token without a mask where MLX would run its op-by-op fallback rather than
/// a fused kernel: that fallback's ops without its multiplication by the scale 1.0
/// (`x * 1.0` is `x`, bit for bit), two ops fewer per layer. Where MLX has a fused
/// kernel for these shapes (Metal), this is [`sdpa`].
pub fn sdpa_with(
    q: &Array,
    k: &Array,
    v: &Array,
    mask: &AttnMask,
    composition: Composition,
    options: &ExecOptions,
) -> Result<Array> {
    if let Some(o) = kernels::fast::decode_attention(q, k, v, 1.0, mask, options)? {
        return Ok(o);
    }
    if options.attention_f32 && q.ndim() == 4 && q.dim(2) == 1 && matches!(mask, AttnMask::None) {
        let f = |a: &Array| a.as_dtype(Dtype::Float32);
        return Ok(sdpa(&f(q)?, &f(k)?, &f(v)?, mask)?.as_dtype(q.dtype())?);
    }
    let one_token = q.ndim() == 4 && composition.single(q.dim(2));
    if !one_token || !matches!(mask, AttnMask::None) || !mlx_decomposes(q, k, v)? {
        return sdpa(q, k, v, mask);
    }
    let (heads, kv_heads) = (q.dim(1), k.dim(1));
    let repeats = heads / kv_heads;
    let (q, k, v) = if repeats > 1 {
        (
            mlx_rs::ops::unflatten(q, 1, &[kv_heads, repeats])?,
            k.expand_dims(2)?,
            v.expand_dims(2)?,
        )
    } else {
        (q.clone(), k.clone(), v.clone())
    };
    let scores = mlx_rs::ops::matmul(&q, k.swap_axes(-1, -2)?)?;
    let probs = mlx_rs::ops::softmax_axis(&scores, -1, true)?;
    let out = mlx_rs::ops::matmul(&probs, &v)?;
    if repeats > 1 {
        Ok(mlx_rs::ops::flatten(&out, 1, 2)?)
    } else {
        Ok(out)
    }
}

/// Whether MLX builds `fast::scaled_dot_product_attention` for these query, key and
/// value shapes (one query token, no mask) from its op-by-op fallback rather than its
/// fused kernel: asked once per shape of the heads by building it on zeros and looking
/// for the fused primitive in the graph. The number of cached rows is left out of the
/// question: on MLX 0.32.2 the answer was the same at 512, 600 and 1,300 rows for every
/// Gemma 4 head shape on CUDA (`scripts/decode-probe.py`), and the CPU always
/// decomposes; a backend that decided by the rows would fail the parity gate.
fn mlx_decomposes(q: &Array, k: &Array, v: &Array) -> Result<bool> {
    type Key = ([i32; 4], i32, i32, i32, Dtype);
    thread_local! {
        static ANSWERS: std::cell::RefCell<std::collections::HashMap<Key, bool>> =
            std::cell::RefCell::new(std::collections::HashMap::new());
    }
    let key: Key = (
        [q.dim(0), q.dim(1), q.dim(2), q.dim(3)],
        k.dim(1),
        k.dim(-1),
        v.dim(-1),
        q.dtype(),
    );
    if let Some(known) = ANSWERS.with(|a| a.borrow().get(&key).copied()) {
        return Ok(known);
    }
    let zeros = |a: &Array| mlx_rs::ops::zeros_dtype(a.shape(), a.dtype());
    let out = sdpa(&zeros(q)?, &zeros(k)?, &zeros(v)?, &AttnMask::None)?;
    let dot = crate::graph::dot(&[&out])?;
    let decomposes = !crate::graph::primitives(&dot).any(|p| p == "ScaledDotProductAttention");
    ANSWERS.with(|a| a.borrow_mut().insert(key, decomposes));
    Ok(decomposes)
}

/// Attention over quantized K/V triples. Under the `fast` numerics profile, for one
/// query token without a mask, the kernel of ours that reads the triples in place
/// ([`kernels::fast::decode_attention_quantized`], for the monolith and the generated
/// code alike); otherwise [`sdpa_quantized_reference`].
pub fn sdpa_quantized(
    q: &Array,
    k: &QuantTriple,
    v: &QuantTriple,
    spec: QuantSpec,
    mask: &AttnMask,
    options: &ExecOptions,
) -> Result<Array> {
    if let Some(o) = kernels::fast::decode_attention_quantized(q, k, v, spec, 1.0, mask, options)? {
        return Ok(o);
    }
    sdpa_quantized_reference(q, k, v, spec, mask)
}

/// mlx-lm's attention over quantized K/V triples: reshape q for GQA (the K/V triples get
/// a broadcast axis, never a copy), `quantized_matmul` scores, mask with the finite
/// minimum, precise softmax, `quantized_matmul` with V.
///
/// On CUDA, whose MLX build has no `quantized_matmul` kernel for these shapes, the
/// triples are dequantized and multiplied with `matmul` (see [`crate::backend`]); the
/// monolith and generated code take the same path there, so parity holds.
pub fn sdpa_quantized_reference(
    q: &Array,
    k: &QuantTriple,
    v: &QuantTriple,
    spec: QuantSpec,
    mask: &AttnMask,
) -> Result<Array> {
    let shape = q.shape();
    let (b, heads, l, d) = (shape[0], shape[1], shape[2], shape[3]);
    let kv_heads = k.packed.dim(-3);
    let repeats = heads / kv_heads;
    let group = spec.group_size as i32;
    let bits = spec.bits as i32;

    // The reference multiplies by the scale even when it is 1.0.
    let mut q = scalar::mul(q, 1.0)?;
    let (k, v) = if repeats > 1 {
        q = q.reshape(&[b, kv_heads, repeats, l, d])?;
        (k.expand_dims(-3)?, v.expand_dims(-3)?)
    } else {
        (k.clone(), v.clone())
    };
    let cuda = crate::backend::cuda_default();
    let mut scores = if cuda {
        let k = dequantized(&k, group, bits)?;
        mlx_rs::ops::matmul(&q, &k.swap_axes(-1, -2)?)?
    } else {
        mlx_rs::ops::quantized_matmul(&q, &k.packed, &k.scales, &k.biases, true, group, bits)?
    };
    let bool_mask = match mask {
        AttnMask::None => None,
        AttnMask::Causal => {
            let ql = scores.dim(-2);
            let kl = scores.dim(-1);
            let q_idx = Array::arange::<i32, i32>(kl - ql, kl, None)?.expand_dims(1)?;
            let k_idx = Array::arange::<i32, i32>(None, kl, None)?.expand_dims(0)?;
            Some(q_idx.ge(&k_idx)?)
        }
        AttnMask::Array(a) => Some(a.clone()),
    };
    if let Some(mut m) = bool_mask {
        if repeats > 1 && m.ndim() > 3 {
            m = m.expand_dims(-3)?;
        }
        let min = scalar::scalar(finfo_min(scores.dtype()), scores.dtype())?;
        scores = mlx_rs::ops::select(&m, &scores, &min)?;
    }
    let probs = mlx_rs::ops::softmax_axis(&scores, -1, true)?;
    let mut out = if cuda {
        mlx_rs::ops::matmul(&probs, &dequantized(&v, group, bits)?)?
    } else {
        mlx_rs::ops::quantized_matmul(&probs, &v.packed, &v.scales, &v.biases, false, group, bits)?
    };
    if repeats > 1 {
        out = out.reshape(&[b, heads, l, d])?;
    }
    Ok(out)
}

/// The float K or V a triple stands for.
fn dequantized(t: &QuantTriple, group: i32, bits: i32) -> Result<Array> {
    Ok(mlx_rs::ops::dequantize(
        &t.packed, &t.scales, &t.biases, group, bits,
    )?)
}

/// `finfo(dtype).min` as the Python float the reference passes.
pub(crate) fn finfo_min(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bfloat16 => -3.3895313892515355e38,
        Dtype::Float16 => -65504.0,
        _ => f32::MIN as f64,
    }
}
