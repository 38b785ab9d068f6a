//! Llama-family weights in mlx-community naming (`model.` prefix stripped by the
//! catalog), typed, with every tensor checked against the config before loading.

use std::collections::HashMap;

use mlx_rs::{Array, Dtype};

use super::config::LlamaConfig;
use crate::error::{Error, Result};
use crate::nn::fused::FusedProjection;
use crate::nn::swiglu::SwiGlu;
use crate::nn::{Embedding, Linear};
use crate::weights::catalog::Catalog;
use crate::weights::expect::{Expect, Loaded, Storage};

/// Self-attention of one layer.
#[derive(Debug, Clone)]
pub struct AttnWeights {
    /// q_proj (H -> nh·D).
    pub q_proj: Linear,
    /// k_proj (H -> nKv·D).
    pub k_proj: Linear,
    /// v_proj (H -> nKv·D).
    pub v_proj: Linear,
    /// o_proj (nh·D -> H).
    pub o_proj: Linear,
    /// q_norm weight `[D]` (Qwen3).
    pub q_norm: Option<Array>,
    /// k_norm weight `[D]` (Qwen3).
    pub k_norm: Option<Array>,
    /// q_proj, k_proj and v_proj as one matmul (quantized weights; the three are then
    /// views of it).
    pub qkv: Option<FusedProjection>,
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// input_layernorm.
    pub input_norm: Array,
    /// post_attention_layernorm.
    pub post_attn_norm: Array,
    /// Self-attention.
    pub attn: AttnWeights,
    /// The SwiGLU MLP.
    pub mlp: SwiGlu,
}

/// All weights of a Llama-family model.
#[derive(Debug, Clone)]
pub struct LlamaWeights {
    /// embed_tokens (also the tied head).
    pub embed: Embedding,
    /// Layers.
    pub layers: Vec<LayerWeights>,
    /// Final norm weight.
    pub norm: Array,
    /// Untied head, when tie_word_embeddings is false.
    pub lm_head: Option<Linear>,
    /// The activation dtype (the float type of the embedding table or its scales).
    pub dtype: Dtype,
}

/// A tensor (or quantizable module) of the canonical layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    /// A linear-like module `<name>.weight` `[out, in]`, float or quantized.
    Module {
        /// Output features.
        out: usize,
        /// Input features.
        inp: usize,
    },
    /// An RMSNorm weight `[dims]`.
    Norm(usize),
}

/// Every tensor of a Llama-family model (prefix stripped), in a fixed order: what the
/// loader checks and the synthesizer writes.
pub fn canonical_tensors(c: &LlamaConfig) -> Vec<(String, TensorRole)> {
    let module = |out: usize, inp: usize| TensorRole::Module { out, inp };
    let h = c.hidden_size;
    let d = c.head_dim;
    let (heads, kv) = (c.num_attention_heads, c.num_key_value_heads);
    let mut t: Vec<(String, TensorRole)> = vec![("embed_tokens".into(), module(c.vocab_size, h))];
    t.push(("norm.weight".into(), TensorRole::Norm(h)));
    if !c.tie_word_embeddings {
        t.push(("lm_head".into(), module(c.vocab_size, h)));
    }
    for i in 0..c.num_hidden_layers {
        let pre = format!("layers.{i}");
        t.push((format!("{pre}.input_layernorm.weight"), TensorRole::Norm(h)));
        t.push((
            format!("{pre}.post_attention_layernorm.weight"),
            TensorRole::Norm(h),
        ));
        t.push((format!("{pre}.self_attn.q_proj"), module(heads * d, h)));
        t.push((format!("{pre}.self_attn.k_proj"), module(kv * d, h)));
        t.push((format!("{pre}.self_attn.v_proj"), module(kv * d, h)));
        t.push((format!("{pre}.self_attn.o_proj"), module(h, heads * d)));
        if c.qk_norm {
            t.push((
                format!("{pre}.self_attn.q_norm.weight"),
                TensorRole::Norm(d),
            ));
            t.push((
                format!("{pre}.self_attn.k_norm.weight"),
                TensorRole::Norm(d),
            ));
        }
        let w = c.intermediate_size;
        t.push((format!("{pre}.mlp.gate_proj"), module(w, h)));
        t.push((format!("{pre}.mlp.up_proj"), module(w, h)));
        t.push((format!("{pre}.mlp.down_proj"), module(h, w)));
    }
    t
}

impl LlamaWeights {
    /// Checks every tensor of `catalog` against `config`, then loads and evaluates them.
    pub fn load(
        config: &LlamaConfig,
        catalog: &Catalog,
        on_file: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let mut expect = Expect::new(catalog, config.quantization.as_ref());
        let mut storage = HashMap::new();
        for (name, role) in canonical_tensors(config) {
            match role {
                TensorRole::Module { out, inp } => {
                    let s = expect.module(&name, &[], out, inp)?;
                    storage.insert(name, s);
                }
                TensorRole::Norm(d) => expect.float(&name, &[d])?,
            }
        }
        let names = expect.finish();
        let mut t = Loaded::new(catalog.load(&names, on_file)?);
        let mut weights = build(config, &storage, &mut t)?;
        mlx_rs::transforms::eval(weights.arrays()).map_err(|e| {
            Error::weights(
                catalog.dir.display().to_string(),
                "(data)",
                format!("reading the tensors failed: {e}"),
            )
        })?;
        weights.fuse_projections()?;
        Ok(weights)
    }

    /// Fuses each layer's q/k/v and gate/up projections where their weights allow (see
    /// [`FusedProjection`]), a layer at a time; the separate projections become views of
    /// the fused weights, so the monolith computes as before and generated single-token
    /// steps may take one matmul.
    fn fuse_projections(&mut self) -> Result<()> {
        for l in &mut self.layers {
            let a = &mut l.attn;
            a.qkv =
                FusedProjection::fuse_in_place(&mut [&mut a.q_proj, &mut a.k_proj, &mut a.v_proj])?;
            l.mlp.fuse()?;
        }
        Ok(())
    }

    /// Every weight array.
    pub fn arrays(&self) -> Vec<&Array> {
        fn lin<'a>(l: &'a Linear, out: &mut Vec<&'a Array>) {
            match l {
                Linear::Float { weight } => out.push(weight),
                Linear::Quantized(q) => out.extend([&q.weight, &q.scales, &q.biases]),
            }
        }
        let mut out = Vec::new();
        match &self.embed {
            Embedding::Float { weight } => out.push(weight),
            Embedding::Quantized(q) => out.extend([&q.weight, &q.scales, &q.biases]),
        }
        out.push(&self.norm);
        if let Some(h) = &self.lm_head {
            lin(h, &mut out);
        }
        for l in &self.layers {
            out.extend([&l.input_norm, &l.post_attn_norm]);
            for p in [
                &l.attn.q_proj,
                &l.attn.k_proj,
                &l.attn.v_proj,
                &l.attn.o_proj,
                &l.mlp.gate,
                &l.mlp.up,
                &l.mlp.down,
            ] {
                lin(p, &mut out);
            }
            out.extend(l.attn.q_norm.iter());
            out.extend(l.attn.k_norm.iter());
        }
        out
    }

    /// Bytes of all weight arrays.
    pub fn nbytes(&self) -> usize {
        self.arrays().iter().map(|a| a.nbytes()).sum()
    }
}

fn build(
    c: &LlamaConfig,
    storage: &HashMap<String, Storage>,
    t: &mut Loaded,
) -> Result<LlamaWeights> {
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
    let lm_head = if c.tie_word_embeddings {
        None
    } else {
        Some(t.linear("lm_head", of("lm_head")?)?)
    };
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let pre = format!("layers.{i}");
        let mut linear = |name: String| -> Result<Linear> {
            let s = of(&name)?;
            t.linear(&name, s)
        };
        let q_proj = linear(format!("{pre}.self_attn.q_proj"))?;
        let k_proj = linear(format!("{pre}.self_attn.k_proj"))?;
        let v_proj = linear(format!("{pre}.self_attn.v_proj"))?;
        let o_proj = linear(format!("{pre}.self_attn.o_proj"))?;
        let mlp = SwiGlu {
            gate: linear(format!("{pre}.mlp.gate_proj"))?,
            up: linear(format!("{pre}.mlp.up_proj"))?,
            down: linear(format!("{pre}.mlp.down_proj"))?,
            gate_up: None,
        };
        let (q_norm, k_norm) = if c.qk_norm {
            (
                Some(t.take(&format!("{pre}.self_attn.q_norm.weight"))?),
                Some(t.take(&format!("{pre}.self_attn.k_norm.weight"))?),
            )
        } else {
            (None, None)
        };
        layers.push(LayerWeights {
            input_norm: t.take(&format!("{pre}.input_layernorm.weight"))?,
            post_attn_norm: t.take(&format!("{pre}.post_attention_layernorm.weight"))?,
            attn: AttnWeights {
                q_proj,
                k_proj,
                v_proj,
                o_proj,
                q_norm,
                k_norm,
                qkv: None,
            },
            mlp,
        });
    }
    Ok(LlamaWeights {
        embed,
        layers,
        norm,
        lm_head,
        dtype,
    })
}
