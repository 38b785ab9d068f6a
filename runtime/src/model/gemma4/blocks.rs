//! The building blocks of a Gemma 4 forward pass, in mlx-lm's composition
//! (`gemma4_text.py`). The monolith and every generated module call these same
//! functions, so both build the same MLX graph.

use mlx_rs::Array;
use mlx_rs::ops::indexing::TryIndexOp;

use super::Gemma4;
use super::weights::{AttnWeights, LayerWeights, MoeWeights, PleWeights};
use crate::cache::{AnyCache, Kv};
use crate::config::LayerType;
use crate::error::{Error, Result};
use crate::kernels;
use crate::nn::activation::{gelu_approx, logit_softcap};
pub use crate::nn::composition::Composition;
use crate::nn::linear::Linear;
use crate::nn::mask::AttnMask;
use crate::nn::{Rope, RopeOffset, rms_norm, scalar, sdpa_quantized, sdpa_with};

/// What every layer of one forward step reads besides the residual stream.
#[derive(Debug, Clone)]
pub struct StepInputs {
    /// The scaled embedding `[B, L, H]` (the residual stream entering layer 0).
    pub h: Array,
    /// Per-layer inputs `[B, L, N, P]` (E2B/E4B).
    pub per_layer: Option<Array>,
    /// Batch rows.
    pub batch: i32,
    /// Tokens in this step.
    pub len: i32,
}

/// The masks of one step, by layer type.
#[derive(Debug, Clone)]
pub struct StepMasks {
    /// Mask of sliding layers.
    pub sliding: AttnMask,
    /// Mask of full layers.
    pub full: AttnMask,
}

impl StepMasks {
    /// The mask of a layer type.
    pub fn of(&self, t: LayerType) -> &AttnMask {
        match t {
            LayerType::Sliding => &self.sliding,
            LayerType::Full => &self.full,
        }
    }
}

/// A donor's fetched K/V with the RoPE offset it used: what its sharers reuse.
#[derive(Debug, Clone)]
pub struct SharedKv {
    /// The fetched K/V.
    pub kv: Kv,
    /// The donor cache's RoPE positions before the update.
    pub offset: RopeOffset,
}

/// Embedding, scaling and per-layer inputs (gemma4.md §3.1-3.2). `tokens` is `[B, L]`.
pub fn embed(m: &Gemma4, tokens: &Array) -> Result<StepInputs> {
    if tokens.ndim() != 2 {
        return Err(Error::Request(format!(
            "tokens must be [batch, length], got shape {:?}",
            tokens.shape()
        )));
    }
    let (batch, len) = (tokens.dim(0), tokens.dim(1));
    let c = &m.config;
    let x = m.weights.embed.lookup(tokens)?;
    let h = scalar::mul(&x, (c.hidden_size as f64).sqrt())?;
    let per_layer = match &m.weights.ple {
        None => None,
        Some(ple) => {
            let n = c.num_hidden_layers as i32;
            let p = c.hidden_size_per_layer_input as i32;
            let tok = ple.embed.lookup(tokens)?;
            let tok = scalar::mul(&tok, (p as f64).sqrt())?;
            let tok = mlx_rs::ops::unflatten(&tok, -1, &[n, p])?;
            let ctx = ple.projection.forward_with(&h, &m.options)?;
            let ctx = scalar::mul(&ctx, (c.hidden_size as f64).powf(-0.5))?;
            let ctx = mlx_rs::ops::unflatten(&ctx, -1, &[n, p])?;
            let ctx = rms_norm(&ctx, Some(&ple.norm), m.eps)?;
            let sum = mlx_rs::ops::add(&ctx, &tok)?;
            Some(scalar::mul(&sum, 2f64.powf(-0.5))?)
        }
    };
    Ok(StepInputs {
        h,
        per_layer,
        batch,
        len,
    })
}

/// Layer `i`'s slice `pli[:, :, i, :]` of the per-layer inputs.
pub fn per_layer_input(inputs: &StepInputs, i: i32) -> Result<Array> {
    let all = inputs.per_layer.as_ref().ok_or_else(|| {
        Error::Unsupported("a per-layer-input layer in a model without PLE tables".into())
    })?;
    Ok(all.try_index((.., .., i, ..))?)
}

/// Every layer's slice of the per-layer inputs at once: `[B, L, N, P]` viewed as
/// `[B, L, N·P]` and split along its last axis ([`crate::nn::split`]), a few ops where
/// [`per_layer_input`] takes two per layer. Each part is the same view of the same
/// buffer as that layer's slice (the same offset and strides), so the bytes downstream
/// are the same.
pub fn per_layer_inputs(inputs: &StepInputs) -> Result<Vec<Array>> {
    let all = inputs.per_layer.as_ref().ok_or_else(|| {
        Error::Unsupported("per-layer inputs of a model without PLE tables".into())
    })?;
    let shape = all.shape();
    let (n, p) = (shape[2], shape[3]);
    let flat = all.reshape(&[shape[0], shape[1], n * p])?;
    crate::nn::split::split_sizes(&flat, &vec![p; n as usize], -1)
}

/// The masks of a step, built from the cache of the first layer of each type.
pub fn masks(m: &Gemma4, caches: &[AnyCache], len: i32) -> Result<StepMasks> {
    let window = m.config.sliding_window;
    let n = len as usize;
    let mask_of = |t: LayerType| -> Result<AttnMask> {
        match m.plan.first_of(t) {
            None => Ok(AttnMask::None),
            Some(layer) => caches[m.plan.layers[layer].kv.cache_index()].make_mask(n, window),
        }
    };
    Ok(StepMasks {
        sliding: mask_of(LayerType::Sliding)?,
        full: mask_of(LayerType::Full)?,
    })
}

/// `input_layernorm(h)`.
pub fn input_norm(m: &Gemma4, w: &LayerWeights, h: &Array) -> Result<Array> {
    rms_norm(h, Some(&w.input_norm), m.eps)
}

/// Queries `[B, nh, L, D]` before RoPE: `q_proj`, reshape, `q_norm`, transpose (one
/// reshape for the heads under [`Composition::SingleToken`]).
pub fn queries(
    m: &Gemma4,
    w: &AttnWeights,
    x: &Array,
    head_dim: i32,
    composition: Composition,
) -> Result<Array> {
    finish_queries(
        m,
        w,
        &w.q_proj.forward_with(x, &m.options)?,
        head_dim,
        composition,
    )
}

/// The queries from the `q_proj` product `[B, L, nh·D]`.
fn finish_queries(
    m: &Gemma4,
    w: &AttnWeights,
    q: &Array,
    head_dim: i32,
    composition: Composition,
) -> Result<Array> {
    let (n, len) = (m.config.num_attention_heads as i32, q.dim(1));
    let q = composition.split_heads(q, n, head_dim)?;
    composition.heads_first(rms_norm(&q, Some(&w.q_norm), m.eps)?, len)
}

/// A donor's queries, keys and values, as [`queries`] and [`keys_values`] give them; with
/// [`Composition::SingleToken`] on a single-token step, from the layer's one fused matmul.
pub fn queries_keys_values(
    m: &Gemma4,
    w: &AttnWeights,
    x: &Array,
    head_dim: i32,
    k_eq_v: bool,
    composition: Composition,
) -> Result<(Array, Array, Array)> {
    let Some(fused) = composition.fused(w.qkv.as_ref(), x) else {
        let q = queries(m, w, x, head_dim, composition)?;
        let (k, v) = keys_values(m, w, x, head_dim, k_eq_v, composition)?;
        return Ok((q, k, v));
    };
    let mut parts = fused.forward(x, &m.options)?.into_iter();
    let mut next = || {
        parts
            .next()
            .ok_or_else(|| Error::Unsupported("a fused q/k/v with too few parts".into()))
    };
    let q = finish_queries(m, w, &next()?, head_dim, composition)?;
    let k_raw = next()?;
    let v_raw = if k_eq_v { None } else { Some(next()?) };
    let (k, v) = finish_keys_values(m, w, &k_raw, v_raw.as_ref(), head_dim, composition)?;
    Ok((q, k, v))
}

/// A donor's keys (normed, `[B, nKv, L, D]`, before RoPE) and values (weightless
/// `v_norm`, never roped). Under K=V the values are the raw k projection.
pub fn keys_values(
    m: &Gemma4,
    w: &AttnWeights,
    x: &Array,
    head_dim: i32,
    k_eq_v: bool,
    composition: Composition,
) -> Result<(Array, Array)> {
    let missing = |what: &str| Error::Unsupported(format!("a donor layer without {what}"));
    let k_proj = w.k_proj.as_ref().ok_or_else(|| missing("k_proj"))?;
    let k_raw = k_proj.forward_with(x, &m.options)?;
    let v_raw = if k_eq_v {
        None
    } else {
        let v_proj = w.v_proj.as_ref().ok_or_else(|| missing("v_proj"))?;
        Some(v_proj.forward_with(x, &m.options)?)
    };
    finish_keys_values(m, w, &k_raw, v_raw.as_ref(), head_dim, composition)
}

/// Keys and values from the `k_proj` and `v_proj` products `[B, L, nKv·D]` (no `v_proj`
/// under K=V: the values are the raw keys).
fn finish_keys_values(
    m: &Gemma4,
    w: &AttnWeights,
    k_raw: &Array,
    v_raw: Option<&Array>,
    head_dim: i32,
    composition: Composition,
) -> Result<(Array, Array)> {
    let k_norm = w
        .k_norm
        .as_ref()
        .ok_or_else(|| Error::Unsupported("a donor layer without k_norm".into()))?;
    let (kv_heads, len) = (k_raw.dim(-1) / head_dim, k_raw.dim(1));
    let k_raw = composition.split_heads(k_raw, kv_heads, head_dim)?;
    let v_raw = match v_raw {
        None => k_raw.clone(),
        Some(v) => composition.split_heads(v, kv_heads, head_dim)?,
    };
    let k = composition.heads_first(rms_norm(&k_raw, Some(k_norm), m.eps)?, len)?;
    let v = composition.heads_first(rms_norm(&v_raw, None, m.eps)?, len)?;
    Ok((k, v))
}

/// RoPE at `offset`.
pub fn rope(rope: &Rope, x: &Array, offset: &RopeOffset) -> Result<Array> {
    rope.apply_at(x, offset)
}

/// Attention over float or quantized K/V (the dispatch mlx-lm and mlx-optiq make), in
/// the reference's composition: float K/V through [`sdpa_with`], as the generated code
/// calls it (which under the `fast` numerics profile is a kernel of ours).
pub fn attend(m: &Gemma4, q: &Array, kv: &Kv, mask: &AttnMask) -> Result<Array> {
    match kv {
        Kv::Float { keys, values } => {
            sdpa_with(q, keys, values, mask, Composition::Reference, &m.options)
        }
        Kv::Quant { keys, values, spec } => {
            sdpa_quantized(q, keys, values, *spec, mask, &m.options)
        }
    }
}

/// `o_proj` of the attention output `[B, nh, L, D]` (its heads back to `[B, L, nh·D]`:
/// transpose and reshape, or under [`Composition::SingleToken`] for one token the
/// reshape alone), then `post_attention_layernorm` and the residual add.
pub fn attention_out(
    m: &Gemma4,
    w: &LayerWeights,
    h: &Array,
    o: &Array,
    composition: Composition,
) -> Result<Array> {
    let a = w
        .attn
        .o_proj
        .forward_with(&composition.merge_heads(o)?, &m.options)?;
    let a = rms_norm(&a, Some(&w.post_attn_norm), m.eps)?;
    Ok(mlx_rs::ops::add(h, &a)?)
}

/// [`attention_out`] and the next block's input: `(h + post_attention_layernorm(o_proj(o)),
/// pre_feedforward_layernorm(of that))`; with [`Composition::fused_kernels`], the norms
/// and the add as one fused kernel.
pub fn attention_residual(
    m: &Gemma4,
    w: &LayerWeights,
    h: &Array,
    o: &Array,
    composition: Composition,
) -> Result<(Array, Array)> {
    let ops = || -> Result<(Array, Array)> {
        let h = attention_out(m, w, h, o, composition)?;
        let f = rms_norm(&h, Some(&w.pre_ffn_norm), m.eps)?;
        Ok((h, f))
    };
    if composition.fused_kernels(h, &m.options) {
        let a = w
            .attn
            .o_proj
            .forward_with(&composition.merge_heads(o)?, &m.options)?;
        let (h_out, f) =
            kernels::residual(h, &a, &w.post_attn_norm, None, Some(&w.pre_ffn_norm), m.eps)?;
        let f = f.ok_or_else(|| Error::Unsupported("a fused residual without its norm".into()))?;
        kernels::compare(
            "attention residual",
            &m.options,
            &[h_out.clone(), f.clone()],
            || {
                let (h, f) = ops()?;
                Ok(vec![h, f])
            },
        )?;
        return Ok((h_out, f));
    }
    ops()
}

/// The dense MLP of `f` (the normed input [`attention_residual`] gives) before its
/// post-norm.
pub fn ffn_raw(m: &Gemma4, w: &LayerWeights, f: &Array, composition: Composition) -> Result<Array> {
    w.mlp.forward_with(f, composition, &m.options)
}

/// The dense feed-forward block's residual from `h` and its normed input `f` (as
/// [`attention_residual`] gives it): `h + post_feedforward_layernorm(mlp(f))`; with
/// [`Composition::fused_kernels`], the norm and the add as one fused kernel (MLX's bytes,
/// one launch where MLX makes two).
pub fn ffn_residual(
    m: &Gemma4,
    w: &LayerWeights,
    h: &Array,
    f: &Array,
    composition: Composition,
) -> Result<Array> {
    let raw = ffn_raw(m, w, f, composition)?;
    let ops = || -> Result<Array> {
        let d = rms_norm(&raw, Some(&w.post_ffn_norm), m.eps)?;
        Ok(mlx_rs::ops::add(h, &d)?)
    };
    if composition.fused_kernels(h, &m.options) {
        let (h_out, _) = kernels::residual(h, &raw, &w.post_ffn_norm, None, None, m.eps)?;
        kernels::compare(
            "feed-forward residual",
            &m.options,
            std::slice::from_ref(&h_out),
            || Ok(vec![ops()?]),
        )?;
        return Ok(h_out);
    }
    ops()
}

/// The per-layer-input branch before its post-norm: `proj(gelu(gate(h)) * pli)`; with
/// [`Composition::fused_kernels`], the activation and product as one fused kernel.
pub fn per_layer_raw(
    m: &Gemma4,
    w: &PleWeights,
    h: &Array,
    pli: &Array,
    composition: Composition,
) -> Result<Array> {
    // Under the `fast` profile the gate's product, gelu and the product with `pli` are one
    // kernel, for the monolith and the generated code alike.
    if let Linear::Quantized(gate) = &w.gate
        && let Some(g) = kernels::fast::quantized_matvec(
            h,
            gate,
            kernels::fast::Epilogue::GeluTimes(pli),
            &m.options,
        )?
    {
        return w.projection.forward_with(&g, &m.options);
    }
    let g = w.gate.forward_with(h, &m.options)?;
    let compiled = m.options.compiled_activations;
    let reference =
        || -> Result<Array> { Ok(mlx_rs::ops::multiply(gelu_approx(&g, compiled)?, pli)?) };
    let g = if composition.fused_kernels(h, &m.options) {
        let y = kernels::geglu(&g, pli, kernels::Gelu::GeluThenMultiply)?;
        kernels::compare(
            "per-layer geglu",
            &m.options,
            std::slice::from_ref(&y),
            || Ok(vec![reference()?]),
        )?;
        y
    } else {
        reference()?
    };
    w.projection.forward_with(&g, &m.options)
}

/// A layer's last residual add: `(h + rms_norm(d, norm)) [* scalar]`, as
/// [`scaled_residual`] (or the add alone without a scalar). Returns `[h]`; with
/// [`Composition::fused_kernels`] one fused kernel that also normalizes the sum with the
/// next layer's input norm (there is one after layer `i` but the last), returning
/// `[h, input_layernorm_{i+1}(h)]`.
pub fn layer_end(
    m: &Gemma4,
    i: usize,
    h: &Array,
    d: &Array,
    norm: &Array,
    scalar: Option<&Array>,
    composition: Composition,
) -> Result<Vec<Array>> {
    let ops = || -> Result<Array> {
        let d = rms_norm(d, Some(norm), m.eps)?;
        Ok(match scalar {
            Some(s) => scaled_residual(h, &d, s, composition)?,
            None => mlx_rs::ops::add(h, &d)?,
        })
    };
    if composition.fused_kernels(h, &m.options) {
        let next = m.weights.layers.get(i + 1).map(|w| &w.input_norm);
        let (h_out, x) = kernels::residual(h, d, norm, scalar, next, m.eps)?;
        let out: Vec<Array> = std::iter::once(h_out).chain(x).collect();
        kernels::compare(&format!("layer end {i}"), &m.options, &out, || {
            let mut want = vec![ops()?];
            if let Some(w) = next {
                let x = rms_norm(&want[0], Some(w), m.eps)?;
                want.push(x);
            }
            Ok(want)
        })?;
        return Ok(out);
    }
    Ok(vec![ops()?])
}

/// Layer `i`'s attention inputs for one token with the fused kernel: q (and for a layer
/// with its own K/V, `own_kv`, k and v) from `x` (the normed residual stream), normed and
/// rotated by `rotation` at `offset` as [`queries_keys_values`] and [`rope`] give them.
/// `None` where the layer's weights do not allow it (a donor without fused q/k/v weights).
pub fn fused_attention_inputs(
    m: &Gemma4,
    i: usize,
    x: &Array,
    own_kv: bool,
    rotation: &Rope,
    offset: &RopeOffset,
) -> Result<Option<Vec<Array>>> {
    // The kernel takes one position for every row.
    let &RopeOffset::Uniform(offset) = offset else {
        return Ok(None);
    };
    let w = &m.weights.layers[i].attn;
    let layer = &m.plan.layers[i];
    let k_eq_v = layer.flags.k_eq_v;
    let head_dim = match layer.attention {
        LayerType::Sliding => m.config.head_dim,
        LayerType::Full => m.config.global_head_dim,
    } as i32;
    let heads = m.config.num_attention_heads as i32;
    let (product, k_norm) = if own_kv {
        let (Some(qkv), Some(k_norm)) = (w.qkv.as_ref(), w.k_norm.as_ref()) else {
            return Ok(None);
        };
        (qkv.product(x, &m.options)?, Some(k_norm))
    } else {
        (w.q_proj.forward_with(x, &m.options)?, None)
    };
    let q_width = heads * head_dim;
    let kv_heads = if own_kv {
        let kv_parts = if k_eq_v { 1 } else { 2 };
        (product.dim(-1) - q_width) / (kv_parts * head_dim)
    } else {
        0
    };
    let out = kernels::attention_inputs(&kernels::AttentionInputs {
        product: &product,
        q_norm: &w.q_norm,
        k_norm,
        heads,
        kv_heads,
        head_dim,
        k_eq_v,
        rope: rotation,
        offset,
        eps: m.eps,
    })?;
    kernels::compare("attention inputs", &m.options, &out, || {
        let q = queries(m, w, x, head_dim, Composition::SingleToken)?;
        let mut want = vec![rotation.apply(&q, offset)?];
        if own_kv {
            let k_end = q_width + kv_heads * head_dim;
            let k_raw = product.try_index((.., .., q_width..k_end))?;
            let v_raw = (!k_eq_v)
                .then(|| product.try_index((.., .., k_end..)))
                .transpose()?;
            let (k, v) = finish_keys_values(
                m,
                w,
                &k_raw,
                v_raw.as_ref(),
                head_dim,
                Composition::SingleToken,
            )?;
            want.push(rotation.apply(&k, offset)?);
            want.push(v);
        }
        Ok(want)
    })?;
    Ok(Some(out))
}

/// The MoE feed-forward block: the dense MLP and the experts in parallel from the same
/// `h`, the router reading the raw `h`, each branch normed, summed, normed, added
/// (`composition` as in [`ffn_raw`], for the dense MLP).
pub fn moe_ffn(
    m: &Gemma4,
    w: &LayerWeights,
    moe: &MoeWeights,
    h: &Array,
    composition: Composition,
) -> Result<Array> {
    Ok(mlx_rs::ops::add(
        h,
        moe_ffn_delta(m, w, moe, h, composition)?,
    )?)
}

/// What [`moe_ffn`] adds to `h`.
pub fn moe_ffn_delta(
    m: &Gemma4,
    w: &LayerWeights,
    moe: &MoeWeights,
    h: &Array,
    composition: Composition,
) -> Result<Array> {
    let f1 = rms_norm(h, Some(&w.pre_ffn_norm), m.eps)?;
    let f1 = w.mlp.forward_with(&f1, composition, &m.options)?;
    let f1 = rms_norm(&f1, Some(&moe.post_ffn_norm_1), m.eps)?;
    let (idx, weights) = moe.moe.route(h, m.eps)?;
    let f2 = rms_norm(h, Some(&moe.pre_ffn_norm_2), m.eps)?;
    let f2 = moe
        .moe
        .experts(&f2, &idx, &weights, m.options.compiled_activations)?;
    let f2 = rms_norm(&f2, Some(&moe.post_ffn_norm_2), m.eps)?;
    let f = mlx_rs::ops::add(&f1, &f2)?;
    rms_norm(&f, Some(&w.post_ffn_norm), m.eps)
}

/// The per-layer-input gate: `h + norm(proj(gelu(gate(h)) * pli))`.
pub fn per_layer_gate(m: &Gemma4, w: &PleWeights, h: &Array, pli: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::add(h, per_layer_delta(m, w, h, pli)?)?)
}

/// What [`per_layer_gate`] adds to `h`.
pub fn per_layer_delta(m: &Gemma4, w: &PleWeights, h: &Array, pli: &Array) -> Result<Array> {
    let g = per_layer_raw(m, w, h, pli, Composition::Reference)?;
    rms_norm(&g, Some(&w.post_norm), m.eps)
}

/// `h * layer_scalar` (the whole residual stream).
pub fn layer_scalar(h: &Array, scalar: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::multiply(h, scalar)?)
}

/// A layer's last residual add and its scalar, `(h + delta) * scalar`: under
/// [`Composition::SingleToken`] for one token as one compiled kernel
/// ([`crate::nn::residual`], the bytes of the add then [`layer_scalar`]), else the two
/// ops. Prefills keep the two: with the compiled kernel in a gemma4-26b-a4b prefill on
/// MLX 0.32.2 CUDA the gate failed at its first prefill
/// (`benchmarks/h200-2026-12-01e/run2-*`), while single-token steps matched.
pub fn scaled_residual(
    h: &Array,
    delta: &Array,
    scalar: &Array,
    composition: Composition,
) -> Result<Array> {
    if h.ndim() == 3 && composition.single(h.dim(1)) {
        crate::nn::residual::scaled_residual(h, delta, scalar)
    } else {
        layer_scalar(&mlx_rs::ops::add(h, delta)?, scalar)
    }
}

/// Final norm, head (tied or not) and softcap: logits `[B, L, vocab]` in the activation
/// dtype.
pub fn head(m: &Gemma4, h: &Array) -> Result<Array> {
    let h = rms_norm(h, Some(&m.weights.norm), m.eps)?;
    let logits = match &m.weights.lm_head {
        Some(head) => head.head_forward(&h, &m.options)?,
        None => m.weights.embed.as_head(&h, &m.options)?,
    };
    match m.config.final_logit_softcapping {
        None => Ok(logits),
        Some(cap) => logit_softcap(&logits, cap, m.options.compiled_activations),
    }
}

/// The layer's PLE weights, or an error naming the layer.
pub fn ple_weights(w: &LayerWeights, layer: usize) -> Result<&PleWeights> {
    w.ple
        .as_ref()
        .ok_or_else(|| Error::Unsupported(format!("layer {layer} has no per-layer-input weights")))
}

/// The layer's MoE weights, or an error naming the layer.
pub fn moe_weights(w: &LayerWeights, layer: usize) -> Result<&MoeWeights> {
    w.moe
        .as_ref()
        .ok_or_else(|| Error::Unsupported(format!("layer {layer} has no MoE weights")))
}

/// The layer's scalar, or an error naming the layer.
pub fn scalar_weight(w: &LayerWeights, layer: usize) -> Result<&Array> {
    w.layer_scalar
        .as_ref()
        .ok_or_else(|| Error::Unsupported(format!("layer {layer} has no layer_scalar")))
}
