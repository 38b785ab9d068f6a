//! The MLA family's building blocks, each a fixed composition of MLX ops in mlx-lm
//! 0.32.0's order (`models/deepseek_v32.py`): multi-head latent attention with the
//! absorbed single-token form, the DSA indexer and its top-k, grouped expert routing, and
//! the dense and routed SwiGLU feed-forwards.

use mlx_rs::fast::ScaledDotProductAttentionMask;
use mlx_rs::ops::indexing::{Ellipsis, TryIndexOp};
use mlx_rs::{Array, Dtype};

use super::Mla;
use super::config::MlaMoe;
use super::weights::{
    FeedForwardWeights, IndexerWeights, LayerWeights, MlaAttnWeights, MoeWeights,
};
use crate::cache::{AnyCache, MlaCache, MlaFetched};
use crate::error::{Error, Result};
use crate::nn::attention::finfo_min;
use crate::nn::mask::AttnMask;
use crate::nn::moe::{TopK, switch_glu, top_k};
use crate::nn::rope::RopeOffset;
use crate::nn::{rms_norm, scalar};

/// The eps of `q_a_layernorm` and `kv_a_layernorm` (fixed in mlx-lm, not the config's).
const LORA_NORM_EPS: f32 = 1e-6;
/// The eps of the indexer's key LayerNorm (`nn.LayerNorm`'s default).
const INDEX_NORM_EPS: f32 = 1e-5;

/// `embed_tokens(tokens)`.
pub fn embed(m: &Mla, tokens: &Array) -> Result<Array> {
    m.weights.embed.lookup(tokens)
}

/// The mask of an `n`-token step over the first cache: mlx-lm's
/// `create_attention_mask(h, cache[0][0], return_array=True)` (none for one token, else
/// the causal mask as a boolean array).
pub fn mask(caches: &[AnyCache], n: usize) -> Result<AttnMask> {
    match caches.first() {
        Some(c) => c.make_mask(n, 0),
        None => Err(Error::Request("the model has no caches".into())),
    }
}

/// `input_layernorm(h)`.
pub fn input_norm(m: &Mla, w: &LayerWeights, h: &Array) -> Result<Array> {
    rms_norm(h, Some(&w.input_norm), m.eps)
}

/// What a layer computes before RoPE and its cache update (the stage generated
/// single-token steps compile), in [`pre_attention`]'s output order.
#[derive(Debug, Clone)]
pub struct PreAttention {
    /// The queries' nope part `[B, heads, L, nope]`.
    pub q_nope: Array,
    /// The queries' RoPE part `[B, heads, L, rope]`, not yet rotated.
    pub q_pe: Array,
    /// The step's latent `[B, 1, L, kv_lora]`.
    pub latent: Array,
    /// The step's RoPE key `[B, 1, L, rope]`, not yet rotated.
    pub k_pe: Array,
    /// The indexer's inputs, for a layer that runs its own indexer.
    pub index: Option<IndexInputs>,
}

impl PreAttention {
    /// The outputs of [`pre_attention`], or of [`pre_attention_indexed`] when
    /// `own_indexer`, in their order.
    pub fn from_outputs(outputs: Vec<Array>, own_indexer: bool) -> Result<Self> {
        let expected = if own_indexer { 7 } else { 4 };
        if outputs.len() != expected {
            return Err(Error::Unsupported(format!(
                "the pre stage returned {} arrays, expected {expected}",
                outputs.len()
            )));
        }
        let mut it = outputs.into_iter();
        let mut next = || it.next().expect("counted");
        let (q_nope, q_pe, latent, k_pe) = (next(), next(), next(), next());
        let index = own_indexer.then(|| IndexInputs {
            q: next(),
            k: next(),
            weights: next(),
        });
        Ok(PreAttention {
            q_nope,
            q_pe,
            latent,
            k_pe,
            index,
        })
    }
}

/// The indexer's part of a layer's pre stage.
#[derive(Debug, Clone)]
pub struct IndexInputs {
    /// Its queries `[B, index_heads, L, index_head_dim]`, not yet rotated.
    pub q: Array,
    /// Its keys `[B, 1, L, index_head_dim]`, not yet rotated.
    pub k: Array,
    /// Its per-head weights `[B, index_heads, L, 1]`.
    pub weights: Array,
}

/// The stage before RoPE and the cache update of a layer without its own indexer:
/// `input_layernorm`, the queries, the latent and RoPE key, as `[q_nope, q_pe, latent,
/// k_pe]`.
pub fn pre_attention(m: &Mla, w: &LayerWeights, h: &Array) -> Result<Vec<Array>> {
    let x = input_norm(m, w, h)?;
    let (_, q_nope, q_pe) = queries(m, &w.attn, &x)?;
    let (latent, k_pe) = latent(m, &w.attn, &x)?;
    Ok(vec![q_nope, q_pe, latent, k_pe])
}

/// The stage before RoPE and the cache update of a layer with its own indexer:
/// [`pre_attention`]'s arrays, then the indexer's queries (from the compressed query),
/// keys and weights: `[q_nope, q_pe, latent, k_pe, index_q, index_k, index_weights]`.
pub fn pre_attention_indexed(m: &Mla, w: &LayerWeights, h: &Array) -> Result<Vec<Array>> {
    let ix = w.attn.indexer.as_ref().ok_or_else(|| {
        Error::Unsupported("a layer planned with its own indexer has no indexer weights".into())
    })?;
    let x = input_norm(m, w, h)?;
    let (qr, q_nope, q_pe) = queries(m, &w.attn, &x)?;
    let (latent, k_pe) = latent(m, &w.attn, &x)?;
    let (index_q, index_k) = index_queries_keys(m, ix, &x, &qr)?;
    let weights = index_weights(m, ix, &x)?;
    Ok(vec![q_nope, q_pe, latent, k_pe, index_q, index_k, weights])
}

/// Attention of one layer after its pre stage: RoPE on the queries' and keys' RoPE
/// parts (the attention's and the indexer's), the cache update, then the keys to attend
/// over: for a layer with its own indexer, its top-k once the cache holds more than
/// `index_topk` keys (written to `chosen` for the layers that share it); for a layer
/// without, the top-k in `chosen` (the last full layer's of this step; `None` while
/// that layer kept every key). Attention over the chosen latent rows. Returns
/// `[B, L, heads · v_head]`, before `o_proj`.
pub fn latent_attention(
    m: &Mla,
    w: &MlaAttnWeights,
    cache_index: usize,
    cache: &mut MlaCache,
    pre: PreAttention,
    mask: &AttnMask,
    chosen: &mut Option<Array>,
) -> Result<Array> {
    let offset = cache.rope_offset();
    let q_pe = rope(m, &pre.q_pe, &offset)?;
    let k_pe = rope(m, &pre.k_pe, &offset)?;
    let queries = pre.q_nope.dim(2);
    let fetched = match &pre.index {
        Some(ix) => {
            let index_q = index_rope(m, &ix.q, &offset)?;
            let index_k = index_rope(m, &ix.k, &offset)?;
            let fetched =
                cache.update_and_fetch(cache_index, &pre.latent, &k_pe, Some(&index_k))?;
            let keys = fetched.index_keys.as_ref().ok_or_else(|| Error::Cache {
                cache: cache_index,
                message: "returned no indexer keys".into(),
            })?;
            *chosen = index_topk(m, &index_q, keys, &ix.weights, mask)?;
            fetched
        }
        None => cache.update_and_fetch(cache_index, &pre.latent, &k_pe, None)?,
    };
    let (latent, rope_key, mask) = sparse(&fetched, chosen.as_ref(), mask, queries)?;
    attend(m, w, &pre.q_nope, &q_pe, &latent, &rope_key, &mask)
}

/// The queries of `x` (`[B, L, H]`): the compressed query `qr` (`q_a_layernorm(q_a_proj
/// x)`, which the indexer reads), and the per-head nope and RoPE parts `[B, heads, L, ·]`.
pub fn queries(m: &Mla, w: &MlaAttnWeights, x: &Array) -> Result<(Array, Array, Array)> {
    let (b, l) = (x.dim(0), x.dim(1));
    let c = &m.config;
    let qr = rms_norm(&w.q_a_proj.forward(x)?, Some(&w.q_a_norm), LORA_NORM_EPS)?;
    let q = w.q_b_proj.forward(&qr)?;
    let q = q
        .reshape(&[b, l, c.num_attention_heads as i32, c.q_head_dim() as i32])?
        .transpose_axes(&[0, 2, 1, 3])?;
    let nope = c.qk_nope_head_dim as i32;
    let q_nope = q.try_index((Ellipsis, ..nope))?;
    let q_pe = q.try_index((Ellipsis, nope..))?;
    Ok((qr, q_nope, q_pe))
}

/// The step's latent `[B, 1, L, kv_lora]` (`kv_a_layernorm` of the compressed part of
/// `kv_a_proj_with_mqa x`) and its one-head RoPE key `[B, 1, L, rope]`, not yet rotated.
pub fn latent(m: &Mla, w: &MlaAttnWeights, x: &Array) -> Result<(Array, Array)> {
    let (b, l) = (x.dim(0), x.dim(1));
    let c = &m.config;
    let kv_lora = c.kv_lora_rank as i32;
    let ckv = w.kv_a_proj.forward(x)?;
    let compressed = ckv.try_index((Ellipsis, ..kv_lora))?;
    let k_pe = ckv.try_index((Ellipsis, kv_lora..))?;
    let k_pe = k_pe
        .reshape(&[b, l, 1, c.qk_rope_head_dim as i32])?
        .transpose_axes(&[0, 2, 1, 3])?;
    let latent = rms_norm(&compressed, Some(&w.kv_a_norm), LORA_NORM_EPS)?;
    Ok((latent.expand_dims(1)?, k_pe))
}

/// Attention's RoPE (`traditional = True`) on the RoPE part of queries or keys.
pub fn rope(m: &Mla, x: &Array, offset: &RopeOffset) -> Result<Array> {
    m.rope.apply_interleaved_at(x, offset)
}

/// The indexer's queries `[B, index_heads, L, index_head_dim]` (from `qr`) and keys
/// `[B, 1, L, index_head_dim]` (LayerNorm of `wk x`), not yet rotated.
pub fn index_queries_keys(
    m: &Mla,
    w: &IndexerWeights,
    x: &Array,
    qr: &Array,
) -> Result<(Array, Array)> {
    let (b, s) = (x.dim(0), x.dim(1));
    let ix = &m.config.indexer;
    let q = w
        .wq_b
        .forward(qr)?
        .reshape(&[b, s, ix.n_heads as i32, ix.head_dim as i32])?
        .swap_axes(1, 2)?;
    let k = w.wk.forward(x)?;
    let k = mlx_rs::fast::layer_norm(&k, &w.k_norm_weight, &w.k_norm_bias, INDEX_NORM_EPS)?;
    let k = k.reshape(&[b, 1, s, ix.head_dim as i32])?;
    Ok((q, k))
}

/// The indexer's RoPE over the first `qk_rope_head_dim` dims of its queries or keys:
/// adjacent pairs when `indexer_rope_interleave`, else halves.
pub fn index_rope(m: &Mla, x: &Array, offset: &RopeOffset) -> Result<Array> {
    if m.config.indexer.rope_interleave {
        m.rope.apply_interleaved_at(x, offset)
    } else {
        m.rope.apply_at(x, offset)
    }
}

/// The indexer's per-head weights `[B, index_heads, L, 1]`: `weights_proj x` times
/// `index_heads^-1/2 · index_head_dim^-1/2` (one constant, as the reference folds it).
pub fn index_weights(m: &Mla, w: &IndexerWeights, x: &Array) -> Result<Array> {
    let ix = &m.config.indexer;
    let weight = (ix.n_heads as f64).powf(-0.5) * (ix.head_dim as f64).powf(-0.5);
    let weights = scalar::mul(&w.weights_proj.forward(x)?, weight)?;
    Ok(weights.swap_axes(-1, -2)?.expand_dims(-1)?)
}

/// The indexer's choice: the `index_topk` cached keys each query keeps
/// (`[B, 1, L, topk]`, argpartition order), or `None` while the cache holds no more
/// than `index_topk` keys. Scores are `relu(q kᵀ)` weighted per head by `weights_proj
/// x` ([`index_weights`]), summed over heads (one head at a time for several queries,
/// one reduction for one, as the reference sums them), masked with `-inf`.
pub fn index_topk(
    m: &Mla,
    q: &Array,
    keys: &Array,
    weights: &Array,
    mask: &AttnMask,
) -> Result<Option<Array>> {
    let ix = &m.config.indexer;
    if keys.dim(2) as usize <= ix.topk {
        return Ok(None);
    }
    let s = q.dim(2);
    let scores = mlx_rs::ops::matmul(q, keys.swap_axes(-1, -2)?)?;
    let scores = mlx_rs::ops::maximum(&scores, scalar::scalar(0.0, scores.dtype())?)?;
    let scores = mlx_rs::ops::multiply(&scores, weights)?;
    let scores = if s > 1 {
        // Python's `sum(...)` over the heads: `0 + head 0`, then each head in turn.
        let mut total = scalar::radd(0.0, &scores.try_index((.., 0..1))?)?;
        for h in 1..ix.n_heads as i32 {
            total = mlx_rs::ops::add(&total, scores.try_index((.., h..h + 1))?)?;
        }
        total
    } else {
        scores.sum_axis(1, true)?
    };
    let scores = match mask.as_array() {
        Some(mask) => mlx_rs::ops::select(
            mask,
            &scores,
            scalar::scalar(f64::NEG_INFINITY, scores.dtype())?,
        )?,
        None => scores,
    };
    // argpartition as the reference (its tie choice is what the bytes depend on); on
    // CUDA, whose argpartition is not repeatable, the stable sort ([`TopK`]).
    let k = ix.topk as i32;
    Ok(Some(top_k(&scores, k, TopK::for_default_device())?))
}

/// What a layer attends over after its cache update and the indexer's choice: for one
/// query the chosen latent and RoPE-key rows (gathered), for several the whole cache
/// under a mask that keeps only the chosen keys.
pub fn sparse(
    fetched: &MlaFetched,
    topk: Option<&Array>,
    mask: &AttnMask,
    queries: i32,
) -> Result<(Array, Array, AttnMask)> {
    let (latent, rope_key) = (fetched.latent.clone(), fetched.rope_key.clone());
    let Some(topk) = topk else {
        return Ok((latent, rope_key, mask.clone()));
    };
    if queries == 1 {
        // topk[:, :, 0, :, None], broadcast over each buffer's width.
        let idx = topk.try_index((.., .., 0))?.expand_dims(-1)?;
        let gather = |x: &Array| -> Result<Array> {
            let mut shape = idx.shape().to_vec();
            *shape.last_mut().expect("4-d") = x.dim(-1);
            Ok(x.take_along_axis(&mlx_rs::ops::broadcast_to(&idx, &shape)?, 2)?)
        };
        let mask = match mask.as_array() {
            Some(m) => AttnMask::Array(m.take_along_axis(topk, -1)?),
            None => mask.clone(),
        };
        return Ok((gather(&latent)?, gather(&rope_key)?, mask));
    }
    let mut shape = topk.shape().to_vec();
    *shape.last_mut().expect("4-d") = latent.dim(2);
    let chosen = mlx_rs::ops::zeros_dtype(&shape, Dtype::Bool)?.put_along_axis(
        topk,
        Array::from_bool(true),
        -1,
    )?;
    let mask = match mask.as_array() {
        Some(m) => mlx_rs::ops::logical_and(&chosen, m)?,
        None => chosen,
    };
    Ok((latent, rope_key, AttnMask::Array(mask)))
}

/// Attention of the queries over the latent: the RoPE part's scores (`q_pe · scale` against
/// the RoPE keys, masked with the dtype's finite minimum) go in as an additive mask; one
/// query attends in the absorbed form (`embed_q` on the query, the latent as keys and
/// values, `unembed_out` after), several over keys and values expanded from the latent.
/// Returns `[B, L, heads · v_head]`.
pub fn attend(
    m: &Mla,
    w: &MlaAttnWeights,
    q_nope: &Array,
    q_pe: &Array,
    latent: &Array,
    rope_key: &Array,
    mask: &AttnMask,
) -> Result<Array> {
    let (b, l) = (q_nope.dim(0), q_nope.dim(2));
    let pe = mlx_rs::ops::matmul(scalar::mul(q_pe, m.scale)?, rope_key.swap_axes(-1, -2)?)?;
    let pe = match mask.as_array() {
        Some(mask) => {
            let min = scalar::scalar(finfo_min(pe.dtype()), pe.dtype())?;
            mlx_rs::ops::select(mask, &pe, &min)?
        }
        None => pe,
    };
    let mask = Some(ScaledDotProductAttentionMask::Array(&pe));
    let scale = m.scale as f32;
    let out = if l == 1 {
        let q = w.embed_q.forward(q_nope, true)?;
        let o = mlx_rs::fast::scaled_dot_product_attention(&q, latent, latent, scale, mask, None)?;
        w.unembed_out.forward(&o, true)?
    } else {
        let k = w.embed_q.forward(latent, false)?;
        let v = w.unembed_out.forward(latent, true)?;
        mlx_rs::fast::scaled_dot_product_attention(q_nope, &k, &v, scale, mask, None)?
    };
    Ok(out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
}

/// `h + o_proj(o)`.
pub fn attention_out(w: &LayerWeights, h: &Array, o: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::add(h, w.attn.o_proj.forward(o)?)?)
}

/// `h + mlp(post_attention_layernorm(h))` for a dense layer: the SwiGLU
/// `intermediate_size` wide (SwiGLU compiled when the options say, as mlx-lm compiles it).
pub fn dense_ffn(m: &Mla, w: &LayerWeights, h: &Array) -> Result<Array> {
    let FeedForwardWeights::Dense(mlp) = &w.mlp else {
        return Err(Error::Unsupported(
            "a dense layer with routed experts' weights".into(),
        ));
    };
    let x = rms_norm(h, Some(&w.post_attn_norm), m.eps)?;
    Ok(mlx_rs::ops::add(
        h,
        mlp.forward(&x, m.options.compiled_swiglu)?,
    )?)
}

/// `h + mlp(post_attention_layernorm(h))` for a routed layer: [`experts`].
pub fn moe_ffn(m: &Mla, w: &LayerWeights, h: &Array) -> Result<Array> {
    let (FeedForwardWeights::Moe(moe), Some(c)) = (&w.mlp, m.config.moe.as_ref()) else {
        return Err(Error::Unsupported(
            "a routed layer without routed experts".into(),
        ));
    };
    let x = rms_norm(h, Some(&w.post_attn_norm), m.eps)?;
    Ok(mlx_rs::ops::add(
        h,
        experts(c, moe, &x, m.options.compiled_swiglu)?,
    )?)
}

/// The routed block: grouped sigmoid routing, `sum_k w_k · expert_k(x)` in float32 cast
/// back to the experts' dtype, plus the shared experts; the compiled functions (the
/// selection, SwiGLU) compiled when `compiled`, as mlx-lm compiles them.
pub fn experts(c: &MlaMoe, w: &MoeWeights, x: &Array, compiled: bool) -> Result<Array> {
    let (inds, scores) = route(c, w, x, compiled)?;
    let y = switch_glu([&w.gate, &w.up, &w.down], x, &inds, |gate, up| {
        crate::nn::swiglu::swiglu(gate, up, compiled)
    })?;
    let dtype = y.dtype();
    let y = mlx_rs::ops::multiply(&y, scores.expand_dims(-1)?)?
        .sum_axis(-2, false)?
        .as_dtype(dtype)?;
    match &w.shared {
        Some(shared) => Ok(mlx_rs::ops::add(&y, shared.forward(x, compiled)?)?),
        None => Ok(y),
    }
}

/// The router: `x @ gate.weightᵀ`, then mlx-lm's `group_expert_select` (the same graph,
/// compiled as it compiles it when `compiled`, else op by op): the chosen experts
/// `[.., K]` (argpartition order) and their float32 weights.
pub fn route(c: &MlaMoe, w: &MoeWeights, x: &Array, compiled: bool) -> Result<(Array, Array)> {
    let gates = mlx_rs::ops::matmul(x, w.router.t())?;
    let c = *c;
    let mut out = if compiled {
        crate::nn::compiled::call_many(
            select_key(&c),
            &[&gates, &w.correction_bias],
            false,
            move |a| group_expert_select(&a[0], &a[1], &c),
        )?
    } else {
        group_expert_select(&gates, &w.correction_bias, &c)?
    };
    let scores = out.pop();
    let inds = out.pop();
    match (inds, scores) {
        (Some(inds), Some(scores)) => Ok((inds, scores)),
        _ => Err(Error::Unsupported(
            "the compiled expert selection returned too little".into(),
        )),
    }
}

/// The compile-cache key of the selection: the constants it closes over.
fn select_key(c: &MlaMoe) -> crate::nn::compiled::Key {
    let bits = crate::synth::fnv1a(&format!(
        "{} {} {} {} {}",
        c.num_experts_per_tok,
        c.n_group,
        c.topk_group,
        c.routed_scaling_factor.to_bits(),
        c.norm_topk_prob
    ));
    ("mla-group-expert-select", bits)
}

/// The indices of the `k` smallest entries along `axis`, in argpartition's order (or,
/// under [`TopK::Sort`], a stable sort's).
fn smallest(x: &Array, k: i32, axis: i32, how: TopK) -> Result<Array> {
    let ranked = match how {
        TopK::Partition => mlx_rs::ops::argpartition_axis(x, k - 1, axis)?,
        TopK::Sort => mlx_rs::ops::argsort_axis(x, axis)?,
    };
    Ok(if axis == -1 {
        ranked.try_index((Ellipsis, ..k))?
    } else {
        ranked.try_index((Ellipsis, ..k, ..))?
    })
}

/// mlx-lm's `group_expert_select`, op for op (its argpartitions a stable sort on CUDA,
/// [`TopK`]).
fn group_expert_select(gates: &Array, bias: &Array, c: &MlaMoe) -> Result<Vec<Array>> {
    let how = TopK::for_default_device();
    let scores = mlx_rs::ops::sigmoid(gates.as_dtype(Dtype::Float32)?)?;
    let orig = scores.clone();
    let mut scores = mlx_rs::ops::add(&scores, bias)?;
    if c.n_group > 1 {
        let groups = c.n_group as i32;
        scores = mlx_rs::ops::unflatten(&scores, -1, &[groups, -1])?;
        let group_scores = mlx_rs::ops::indexing::topk_axis(&scores, 2, -1)?.sum_axis(-1, true)?;
        let k = (c.n_group - c.topk_group) as i32;
        let group_idx = smallest(&group_scores, k, -2, how)?;
        scores = scores.put_along_axis(&group_idx, Array::from_f32(0.0), -2)?;
        scores = mlx_rs::ops::flatten(&scores, -2, -1)?;
    }
    let k = c.num_experts_per_tok as i32;
    let inds = smallest(&mlx_rs::ops::negative(&scores)?, k, -1, how)?;
    let mut weights = orig.take_along_axis(&inds, -1)?;
    if k > 1 && c.norm_topk_prob {
        let denominator = weights.sum_axis(-1, true)?;
        weights = mlx_rs::ops::divide(&weights, &denominator)?;
    }
    let weights = scalar::mul(&weights, c.routed_scaling_factor)?;
    Ok(vec![inds, weights])
}

/// The final norm and `lm_head`.
pub fn head(m: &Mla, h: &Array) -> Result<Array> {
    let x = rms_norm(h, Some(&m.weights.norm), m.eps)?;
    m.weights.lm_head.head_forward(&x, &m.options)
}
