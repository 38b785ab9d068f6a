//! MLA-family weights as mlx-lm holds them after `sanitize` (what mlx-community
//! conversions contain: experts stacked into `switch_mlp`, `kv_b_proj` split into the
//! per-head `embed_q` and `unembed_out`), `model.` prefix stripped by the catalog; typed,
//! every tensor checked against the config before loading.

use std::collections::HashMap;

use mlx_rs::{Array, Dtype};

use super::config::MlaConfig;
use crate::error::{Error, Result};
use crate::nn::moe::SwitchLinear;
use crate::nn::multi_linear::MultiLinear;
use crate::nn::swiglu::SwiGlu;
use crate::nn::{Embedding, Linear};
use crate::weights::catalog::Catalog;
use crate::weights::expect::{Expect, Loaded, Storage};

/// The DSA indexer of one layer.
#[derive(Debug, Clone)]
pub struct IndexerWeights {
    /// wq_b (q_lora -> index heads · index_head_dim).
    pub wq_b: Linear,
    /// wk (H -> index_head_dim).
    pub wk: Linear,
    /// k_norm (LayerNorm) weight `[index_head_dim]`.
    pub k_norm_weight: Array,
    /// k_norm bias `[index_head_dim]`.
    pub k_norm_bias: Array,
    /// weights_proj (H -> index heads).
    pub weights_proj: Linear,
}

/// Multi-head latent attention of one layer.
#[derive(Debug, Clone)]
pub struct MlaAttnWeights {
    /// q_a_proj (H -> q_lora).
    pub q_a_proj: Linear,
    /// q_a_layernorm weight `[q_lora]`.
    pub q_a_norm: Array,
    /// q_b_proj (q_lora -> heads · (nope + rope)).
    pub q_b_proj: Linear,
    /// kv_a_proj_with_mqa (H -> kv_lora + rope).
    pub kv_a_proj: Linear,
    /// kv_a_layernorm weight `[kv_lora]`.
    pub kv_a_norm: Array,
    /// embed_q `[heads, kv_lora, nope]`.
    pub embed_q: MultiLinear,
    /// unembed_out `[heads, v_head, kv_lora]`.
    pub unembed_out: MultiLinear,
    /// o_proj (heads · v_head -> H).
    pub o_proj: Linear,
    /// The indexer, for a layer that runs its own.
    pub indexer: Option<IndexerWeights>,
}

/// The routed experts of one layer.
#[derive(Debug, Clone)]
pub struct MoeWeights {
    /// gate.weight `[E, H]` (never quantized: mlx-lm's `MoEGate` is not a linear layer).
    pub router: Array,
    /// gate.e_score_correction_bias `[E]`, kept in float32 as mlx-lm keeps it.
    pub correction_bias: Array,
    /// switch_mlp.gate_proj `[E, moe_inter, H]`.
    pub gate: SwitchLinear,
    /// switch_mlp.up_proj `[E, moe_inter, H]`.
    pub up: SwitchLinear,
    /// switch_mlp.down_proj `[E, H, moe_inter]`.
    pub down: SwitchLinear,
    /// shared_experts, when the config has them.
    pub shared: Option<SwiGlu>,
}

/// A layer's feed-forward block.
#[derive(Debug, Clone)]
pub enum FeedForwardWeights {
    /// The dense SwiGLU (`intermediate_size` wide).
    Dense(SwiGlu),
    /// Router, routed experts and shared experts.
    Moe(MoeWeights),
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// input_layernorm.
    pub input_norm: Array,
    /// post_attention_layernorm.
    pub post_attn_norm: Array,
    /// Self-attention.
    pub attn: MlaAttnWeights,
    /// The feed-forward block.
    pub mlp: FeedForwardWeights,
}

/// All weights of an MLA-family model.
#[derive(Debug, Clone)]
pub struct MlaWeights {
    /// embed_tokens.
    pub embed: Embedding,
    /// Layers.
    pub layers: Vec<LayerWeights>,
    /// Final norm weight.
    pub norm: Array,
    /// lm_head.
    pub lm_head: Linear,
    /// The activation dtype (the float type of the embedding table or its scales).
    pub dtype: Dtype,
}

/// A tensor (or quantizable module) of the canonical layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    /// A linear-like module `<name>.weight` `[.., out, in]` (`lead`: a leading heads or
    /// experts axis), float or quantized.
    Module {
        /// The leading axis (heads of a multi-linear, experts of a switch linear).
        lead: Option<usize>,
        /// Output features.
        out: usize,
        /// Input features.
        inp: usize,
    },
    /// A float vector (norm weights and biases) in the activation dtype.
    Vector(usize),
    /// A float matrix never quantized (the router weight).
    Matrix {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// A float32 vector (the routing correction bias).
    Float32Vector(usize),
}

/// Every tensor of an MLA-family model (prefix stripped), in a fixed order: what the
/// loader checks and the synthesizer writes.
pub fn canonical_tensors(c: &MlaConfig) -> Vec<(String, TensorRole)> {
    let module = |out: usize, inp: usize| TensorRole::Module {
        lead: None,
        out,
        inp,
    };
    let h = c.hidden_size;
    let heads = c.num_attention_heads;
    let mut t: Vec<(String, TensorRole)> = vec![("embed_tokens".into(), module(c.vocab_size, h))];
    t.push(("norm.weight".into(), TensorRole::Vector(h)));
    t.push(("lm_head".into(), module(c.vocab_size, h)));
    for i in 0..c.num_hidden_layers {
        let pre = format!("layers.{i}");
        let a = format!("{pre}.self_attn");
        t.push((
            format!("{pre}.input_layernorm.weight"),
            TensorRole::Vector(h),
        ));
        t.push((
            format!("{pre}.post_attention_layernorm.weight"),
            TensorRole::Vector(h),
        ));
        t.push((format!("{a}.q_a_proj"), module(c.q_lora_rank, h)));
        t.push((
            format!("{a}.q_a_layernorm.weight"),
            TensorRole::Vector(c.q_lora_rank),
        ));
        t.push((
            format!("{a}.q_b_proj"),
            module(heads * c.q_head_dim(), c.q_lora_rank),
        ));
        t.push((
            format!("{a}.kv_a_proj_with_mqa"),
            module(c.kv_lora_rank + c.qk_rope_head_dim, h),
        ));
        t.push((
            format!("{a}.kv_a_layernorm.weight"),
            TensorRole::Vector(c.kv_lora_rank),
        ));
        t.push((
            format!("{a}.embed_q"),
            TensorRole::Module {
                lead: Some(heads),
                out: c.kv_lora_rank,
                inp: c.qk_nope_head_dim,
            },
        ));
        t.push((
            format!("{a}.unembed_out"),
            TensorRole::Module {
                lead: Some(heads),
                out: c.v_head_dim,
                inp: c.kv_lora_rank,
            },
        ));
        t.push((format!("{a}.o_proj"), module(h, heads * c.v_head_dim)));
        let ix = &c.indexer;
        // A shared layer has no indexer (transformers' GLM-5.2 layout).
        if c.indexer_types[i] == super::config::IndexerType::Full {
            t.push((
                format!("{a}.indexer.wq_b"),
                module(ix.n_heads * ix.head_dim, c.q_lora_rank),
            ));
            t.push((format!("{a}.indexer.wk"), module(ix.head_dim, h)));
            t.push((
                format!("{a}.indexer.k_norm.weight"),
                TensorRole::Vector(ix.head_dim),
            ));
            t.push((
                format!("{a}.indexer.k_norm.bias"),
                TensorRole::Vector(ix.head_dim),
            ));
            t.push((format!("{a}.indexer.weights_proj"), module(ix.n_heads, h)));
        }
        match c.moe.filter(|m| m.routes(i)) {
            None => {
                let w = c.intermediate_size;
                t.push((format!("{pre}.mlp.gate_proj"), module(w, h)));
                t.push((format!("{pre}.mlp.up_proj"), module(w, h)));
                t.push((format!("{pre}.mlp.down_proj"), module(h, w)));
            }
            Some(m) => {
                let e = m.n_routed_experts;
                let w = m.moe_intermediate_size;
                t.push((
                    format!("{pre}.mlp.gate.weight"),
                    TensorRole::Matrix { rows: e, cols: h },
                ));
                t.push((
                    format!("{pre}.mlp.gate.e_score_correction_bias"),
                    TensorRole::Float32Vector(e),
                ));
                let switch = |out: usize, inp: usize| TensorRole::Module {
                    lead: Some(e),
                    out,
                    inp,
                };
                t.push((format!("{pre}.mlp.switch_mlp.gate_proj"), switch(w, h)));
                t.push((format!("{pre}.mlp.switch_mlp.up_proj"), switch(w, h)));
                t.push((format!("{pre}.mlp.switch_mlp.down_proj"), switch(h, w)));
                if let Some(n) = m.n_shared_experts {
                    let s = n * w;
                    t.push((format!("{pre}.mlp.shared_experts.gate_proj"), module(s, h)));
                    t.push((format!("{pre}.mlp.shared_experts.up_proj"), module(s, h)));
                    t.push((format!("{pre}.mlp.shared_experts.down_proj"), module(h, s)));
                }
            }
        }
    }
    t
}

impl MlaWeights {
    /// Checks every tensor of `catalog` against `config`, then loads and evaluates them.
    pub fn load(
        config: &MlaConfig,
        catalog: &Catalog,
        on_file: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let mut expect = Expect::new(catalog, config.quantization.as_ref());
        let mut storage = HashMap::new();
        for (name, role) in canonical_tensors(config) {
            match role {
                TensorRole::Module { lead, out, inp } => {
                    let lead: Vec<usize> = lead.into_iter().collect();
                    let s = expect.module(&name, &lead, out, inp)?;
                    storage.insert(name, s);
                }
                TensorRole::Vector(d) | TensorRole::Float32Vector(d) => {
                    expect.float(&name, &[d])?
                }
                TensorRole::Matrix { rows, cols } => expect.float(&name, &[rows, cols])?,
            }
        }
        let names = expect.finish();
        let mut t = Loaded::new(catalog.load(&names, on_file)?);
        let weights = build(config, &storage, &mut t)?;
        mlx_rs::transforms::eval(weights.arrays()).map_err(|e| {
            Error::weights(
                catalog.dir.display().to_string(),
                "(data)",
                format!("reading the tensors failed: {e}"),
            )
        })?;
        Ok(weights)
    }

    /// Every weight array.
    pub fn arrays(&self) -> Vec<&Array> {
        fn lin<'a>(l: &'a Linear, out: &mut Vec<&'a Array>) {
            match l {
                Linear::Float { weight } => out.push(weight),
                Linear::Quantized(q) => out.extend([&q.weight, &q.scales, &q.biases]),
            }
        }
        fn switch<'a>(l: &'a SwitchLinear, out: &mut Vec<&'a Array>) {
            match l {
                SwitchLinear::Float { weight } => out.push(weight),
                SwitchLinear::Quantized(q) => out.extend([&q.weight, &q.scales, &q.biases]),
            }
        }
        let mut out = Vec::new();
        match &self.embed {
            Embedding::Float { weight } => out.push(weight),
            Embedding::Quantized(q) => out.extend([&q.weight, &q.scales, &q.biases]),
        }
        out.push(&self.norm);
        lin(&self.lm_head, &mut out);
        for l in &self.layers {
            out.extend([&l.input_norm, &l.post_attn_norm]);
            let a = &l.attn;
            for p in [&a.q_a_proj, &a.q_b_proj, &a.kv_a_proj, &a.o_proj] {
                lin(p, &mut out);
            }
            out.extend([&a.q_a_norm, &a.kv_a_norm]);
            out.extend(a.embed_q.arrays());
            out.extend(a.unembed_out.arrays());
            if let Some(ix) = &a.indexer {
                for p in [&ix.wq_b, &ix.wk, &ix.weights_proj] {
                    lin(p, &mut out);
                }
                out.extend([&ix.k_norm_weight, &ix.k_norm_bias]);
            }
            match &l.mlp {
                FeedForwardWeights::Dense(m) => {
                    for p in [&m.gate, &m.up, &m.down] {
                        lin(p, &mut out);
                    }
                }
                FeedForwardWeights::Moe(m) => {
                    out.extend([&m.router, &m.correction_bias]);
                    for p in [&m.gate, &m.up, &m.down] {
                        switch(p, &mut out);
                    }
                    if let Some(s) = &m.shared {
                        for p in [&s.gate, &s.up, &s.down] {
                            lin(p, &mut out);
                        }
                    }
                }
            }
        }
        out
    }

    /// Bytes of all weight arrays.
    pub fn nbytes(&self) -> usize {
        self.arrays().iter().map(|a| a.nbytes()).sum()
    }
}

fn build(c: &MlaConfig, storage: &HashMap<String, Storage>, t: &mut Loaded) -> Result<MlaWeights> {
    let of = |name: &str| -> Result<Storage> {
        storage
            .get(name)
            .copied()
            .ok_or_else(|| Error::weights("(checked weights)", name, "was not checked"))
    };
    let embed = t.embedding("embed_tokens", of("embed_tokens")?)?;
    let dtype = match &embed {
        Embedding::Float { weight } => weight.dtype(),
        Embedding::Quantized(q) => q.scales.dtype(),
    };
    let norm = t.take("norm.weight")?;
    let lm_head = t.linear("lm_head", of("lm_head")?)?;
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let pre = format!("layers.{i}");
        let a = format!("{pre}.self_attn");
        let mut linear = |name: String| -> Result<Linear> {
            let s = of(&name)?;
            t.linear(&name, s)
        };
        let q_a_proj = linear(format!("{a}.q_a_proj"))?;
        let q_b_proj = linear(format!("{a}.q_b_proj"))?;
        let kv_a_proj = linear(format!("{a}.kv_a_proj_with_mqa"))?;
        let o_proj = linear(format!("{a}.o_proj"))?;
        let indexer = match c.indexer_types[i] {
            super::config::IndexerType::Shared => None,
            super::config::IndexerType::Full => Some(IndexerWeights {
                wq_b: linear(format!("{a}.indexer.wq_b"))?,
                wk: linear(format!("{a}.indexer.wk"))?,
                weights_proj: linear(format!("{a}.indexer.weights_proj"))?,
                k_norm_weight: t.take(&format!("{a}.indexer.k_norm.weight"))?,
                k_norm_bias: t.take(&format!("{a}.indexer.k_norm.bias"))?,
            }),
        };
        let swiglu = |t: &mut Loaded, m: &str| -> Result<SwiGlu> {
            let mut l = |p: &str| -> Result<Linear> {
                let name = format!("{m}.{p}");
                t.linear(&name, of(&name)?)
            };
            Ok(SwiGlu {
                gate: l("gate_proj")?,
                up: l("up_proj")?,
                down: l("down_proj")?,
                gate_up: None,
            })
        };
        let mlp = match c.moe.filter(|m| m.routes(i)) {
            None => FeedForwardWeights::Dense(swiglu(t, &format!("{pre}.mlp"))?),
            Some(m) => {
                let mut switch = |p: &str| -> Result<SwitchLinear> {
                    let name = format!("{pre}.mlp.switch_mlp.{p}");
                    t.switch_linear(&name, of(&name)?)
                };
                let (gate, up, down) = (
                    switch("gate_proj")?,
                    switch("up_proj")?,
                    switch("down_proj")?,
                );
                let shared = match m.n_shared_experts {
                    Some(_) => Some(swiglu(t, &format!("{pre}.mlp.shared_experts"))?),
                    None => None,
                };
                let bias_name = format!("{pre}.mlp.gate.e_score_correction_bias");
                FeedForwardWeights::Moe(MoeWeights {
                    router: t.take(&format!("{pre}.mlp.gate.weight"))?,
                    correction_bias: t.take(&bias_name)?,
                    gate,
                    up,
                    down,
                    shared,
                })
            }
        };
        let embed_q = t.multi_linear(&format!("{a}.embed_q"), of(&format!("{a}.embed_q"))?)?;
        let unembed_out = t.multi_linear(
            &format!("{a}.unembed_out"),
            of(&format!("{a}.unembed_out"))?,
        )?;
        layers.push(LayerWeights {
            input_norm: t.take(&format!("{pre}.input_layernorm.weight"))?,
            post_attn_norm: t.take(&format!("{pre}.post_attention_layernorm.weight"))?,
            attn: MlaAttnWeights {
                q_a_proj,
                q_a_norm: t.take(&format!("{a}.q_a_layernorm.weight"))?,
                q_b_proj,
                kv_a_proj,
                kv_a_norm: t.take(&format!("{a}.kv_a_layernorm.weight"))?,
                embed_q,
                unembed_out,
                o_proj,
                indexer,
            },
            mlp,
        });
    }
    Ok(MlaWeights {
        embed,
        layers,
        norm,
        lm_head,
        dtype,
    })
}
