//! Attention with mlx-lm's `1/sqrt(head_dim)` scale (the Llama family): fast SDPA on
//! float K/V, and the quantized path with the queries scaled first, as mlx-lm's
//! `quantized_scaled_dot_product_attention` does (`queries *= scale`), or under the `fast`
//! numerics profile with the scale applied inside our kernel.

use mlx_rs::Array;
use mlx_rs::fast::ScaledDotProductAttentionMask;

use crate::cache::QuantTriple;
use crate::error::Result;
use crate::kernels;
use crate::nn::attention::sdpa_quantized_reference;
use crate::nn::mask::AttnMask;
use crate::nn::scalar;
use crate::options::ExecOptions;
use crate::quantization::QuantSpec;

/// `head_dim ** -0.5` as the Python float mlx-lm computes (a double), for C's float.
pub fn inv_sqrt_scale(head_dim: usize) -> f64 {
    (head_dim as f64).powf(-0.5)
}

/// `fast::scaled_dot_product_attention(q, k, v, scale, mask)`; GQA handled natively.
pub fn sdpa_scaled(q: &Array, k: &Array, v: &Array, scale: f64, mask: &AttnMask) -> Result<Array> {
    let mask = match mask {
        AttnMask::None => None,
        AttnMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
        AttnMask::Array(a) => Some(ScaledDotProductAttentionMask::Array(a)),
    };
    Ok(mlx_rs::fast::scaled_dot_product_attention(
        q,
        k,
        v,
        scale as f32,
        mask,
        None,
    )?)
}

/// Quantized attention at `scale`. Under the `fast` numerics profile, for one query
/// token without a mask, the kernel of ours with the scale applied in f32
/// ([`kernels::fast::decode_attention_quantized`]); otherwise the queries multiplied by
/// `scale` (a weak scalar) first, then [`sdpa_quantized_reference`], whose own
/// multiplication by 1.0 changes no bit.
pub fn sdpa_quantized_scaled(
    q: &Array,
    k: &QuantTriple,
    v: &QuantTriple,
    spec: QuantSpec,
    scale: f64,
    mask: &AttnMask,
    options: &ExecOptions,
) -> Result<Array> {
    let fast =
        kernels::fast::decode_attention_quantized(q, k, v, spec, scale as f32, mask, options)?;
    if let Some(o) = fast {
        return Ok(o);
    }
    let q = scalar::mul(q, scale)?;
    sdpa_quantized_reference(&q, k, v, spec, mask)
}
