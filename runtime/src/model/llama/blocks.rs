//! The building blocks of a Llama-family forward pass, in mlx-lm's composition
//! (`models/llama.py`, `models/qwen3.py`, `models/minicpm.py`). The monolith and every generated module call
//! these same functions, so both build the same MLX graph.

use mlx_rs::Array;

use super::Llama;
use super::weights::{AttnWeights, LayerWeights};
use crate::cache::{AnyCache, Kv};
use crate::error::{Error, Result};
pub use crate::nn::composition::Composition;
use crate::nn::fused::products;
use crate::nn::mask::AttnMask;
use crate::nn::scaled::{sdpa_quantized_scaled, sdpa_scaled};
use crate::nn::{Rope, RopeOffset, rms_norm, scalar};

/// `embed_tokens(tokens)` for `tokens` `[B, L]`: the residual stream entering layer 0.
pub fn embed(m: &Llama, tokens: &Array) -> Result<Array> {
    if tokens.ndim() != 2 {
        return Err(Error::Request(format!(
            "tokens must be [batch, length], got shape {:?}",
            tokens.shape()
        )));
    }
    let h = m.weights.embed.lookup(tokens)?;
    match m.config.minicpm {
        Some(s) => scalar::mul(&h, s.scale_emb),
        None => Ok(h),
    }
}

/// How a layer adds a block's output `r` to the residual stream `h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residual {
    /// `h + r`.
    Plain,
    /// `h + r * (scale_depth / sqrt(num_hidden_layers))` (MiniCPM).
    Scaled,
}

impl Residual {
    /// The residual of a layer with `scaled` set in its plan.
    pub fn of(scaled: bool) -> Self {
        if scaled {
            Residual::Scaled
        } else {
            Residual::Plain
        }
    }

    fn add(self, m: &Llama, h: &Array, r: &Array) -> Result<Array> {
        let r = match self {
            Residual::Plain => r.clone(),
            Residual::Scaled => {
                let s = m.config.minicpm.ok_or_else(|| {
                    Error::Unsupported("a scaled residual in a model without MiniCPM scales".into())
                })?;
                scalar::mul(r, s.residual(m.config.num_hidden_layers))?
            }
        };
        Ok(mlx_rs::ops::add(h, &r)?)
    }
}

/// The mask of an `n`-token step, from the first cache (mlx-lm's
/// `create_attention_mask(h, cache[0])`): none for one token, else `"causal"`.
pub fn mask(caches: &[AnyCache], n: i32) -> Result<AttnMask> {
    match caches.first() {
        Some(c) => c.make_mask(n as usize, 0),
        None => Err(Error::Request("a model with no caches".into())),
    }
}

/// `input_layernorm(h)`.
pub fn input_norm(m: &Llama, w: &LayerWeights, h: &Array) -> Result<Array> {
    rms_norm(h, Some(&w.input_norm), m.eps)
}

/// `[B, L, heads·D] -> [B, heads, L, D]`, with the head-dim RMSNorm between reshape and
/// transpose when `norm` is given (Qwen3's q_norm / k_norm). For one token under
/// [`Composition::SingleToken`] one reshape straight to `[B, heads, 1, D]`: the transpose
/// would only move an axis of length 1, so the bytes are in the same order.
fn heads(m: &Llama, x: &Array, norm: Option<&Array>, composition: Composition) -> Result<Array> {
    let len = x.dim(1);
    let x = composition.split_heads(x, -1, m.config.head_dim as i32)?;
    let x = match norm {
        Some(w) => rms_norm(&x, Some(w), m.eps)?,
        None => x,
    };
    composition.heads_first(x, len)
}

fn norm_weight<'a>(w: &'a Option<Array>, what: &str) -> Result<&'a Array> {
    w.as_ref()
        .ok_or_else(|| Error::Unsupported(format!("a q/k-norm layer without {what}")))
}

/// Queries `[B, nh, L, D]` from the `q_proj` product: reshape, `q_norm` when `qk_norm`,
/// transpose.
fn finish_queries(
    m: &Llama,
    w: &AttnWeights,
    q: &Array,
    qk_norm: bool,
    composition: Composition,
) -> Result<Array> {
    let norm = if qk_norm {
        Some(norm_weight(&w.q_norm, "q_norm")?)
    } else {
        None
    };
    heads(m, q, norm, composition)
}

/// Keys (before RoPE, `k_norm`ed when `qk_norm`) and values, `[B, nKv, L, D]`, from the
/// `k_proj` and `v_proj` products.
fn finish_keys_values(
    m: &Llama,
    w: &AttnWeights,
    k: &Array,
    v: &Array,
    qk_norm: bool,
    composition: Composition,
) -> Result<(Array, Array)> {
    let norm = if qk_norm {
        Some(norm_weight(&w.k_norm, "k_norm")?)
    } else {
        None
    };
    Ok((
        heads(m, k, norm, composition)?,
        heads(m, v, None, composition)?,
    ))
}

/// Queries `[B, nh, L, D]` (before RoPE, `q_norm`ed when `qk_norm`), keys (likewise) and
/// values, each from its own projection; under
/// [`Composition::SingleToken`] for one token, from the layer's one fused matmul with
/// the heads made by reshape.
pub fn queries_keys_values(
    m: &Llama,
    w: &AttnWeights,
    x: &Array,
    qk_norm: bool,
    composition: Composition,
) -> Result<(Array, Array, Array)> {
    let [q, k, v] = products(
        [&w.q_proj, &w.k_proj, &w.v_proj],
        w.qkv.as_ref(),
        x,
        composition,
        &m.options,
    )?;
    let q = finish_queries(m, w, &q, qk_norm, composition)?;
    let (k, v) = finish_keys_values(m, w, &k, &v, qk_norm, composition)?;
    Ok((q, k, v))
}

/// A Llama-family model's RoPE and which pairs it rotates.
#[derive(Debug, Clone)]
pub struct Rotation {
    /// The RoPE of every layer.
    pub rope: Rope,
    /// Adjacent pairs (`rope_traditional`) instead of halves.
    pub traditional: bool,
}

/// RoPE at `offset` (one position per row in a batch of rows of different lengths).
pub fn rope(rotation: &Rotation, x: &Array, offset: &RopeOffset) -> Result<Array> {
    if rotation.traditional {
        rotation.rope.apply_interleaved_at(x, offset)
    } else {
        rotation.rope.apply_at(x, offset)
    }
}

/// Attention with the model's `1/sqrt(D)` scale over float or quantized K/V (mlx-lm's
/// `scaled_dot_product_attention` dispatch).
pub fn attend(m: &Llama, q: &Array, kv: &Kv, mask: &AttnMask) -> Result<Array> {
    match kv {
        Kv::Float { keys, values } => sdpa_scaled(q, keys, values, m.scale, mask),
        Kv::Quant { keys, values, spec } => {
            sdpa_quantized_scaled(q, keys, values, *spec, m.scale, mask, &m.options)
        }
    }
}

/// `h + o_proj(o)` (as `residual` adds it) for the attention output `o` `[B, nh, L, D]`
/// (its heads back to `[B, L, nh·D]` by transpose and reshape, or for one token under
/// [`Composition::SingleToken`] the reshape alone).
pub fn attention_out(
    m: &Llama,
    w: &LayerWeights,
    h: &Array,
    o: &Array,
    residual: Residual,
    composition: Composition,
) -> Result<Array> {
    let a = w
        .attn
        .o_proj
        .forward_with(&composition.merge_heads(o)?, &m.options)?;
    residual.add(m, h, &a)
}

/// `h + mlp(post_attention_layernorm(h))` (as `residual` adds it), the MLP a SwiGLU (gate
/// and up from one matmul where `composition` picks the fused form).
pub fn mlp(
    m: &Llama,
    w: &LayerWeights,
    h: &Array,
    residual: Residual,
    composition: Composition,
) -> Result<Array> {
    let f = rms_norm(h, Some(&w.post_attn_norm), m.eps)?;
    let f = w.mlp.forward_with(&f, composition, &m.options)?;
    residual.add(m, h, &f)
}

/// Final norm and head (tied or not): logits `[B, L, vocab]` in the activation dtype.
/// MiniCPM divides the normed stream by `hidden_size / dim_model_base` first.
pub fn head(m: &Llama, h: &Array) -> Result<Array> {
    let h = rms_norm(h, Some(&m.weights.norm), m.eps)?;
    let h = match m.config.minicpm {
        Some(s) => scalar::div(&h, s.logit_divisor(m.config.hidden_size))?,
        None => h,
    };
    match &m.weights.lm_head {
        Some(head) => head.head_forward(&h, &m.options),
        None => m.weights.embed.as_head(&h, &m.options),
    }
}
