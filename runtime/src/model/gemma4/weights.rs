//! Gemma 4's weights, typed, with every tensor checked against the config before loading.

use std::collections::HashMap;

use mlx_rs::{Array, Dtype};

use super::config::Gemma4Config;
use super::plan::WeightFacts;
use crate::error::{Error, Result};
use crate::nn::fused::FusedProjection;
use crate::nn::linear::QuantizedWeight;
use crate::nn::mlp::Mlp;
use crate::nn::moe::{Moe, SwitchLinear};
use crate::nn::{Embedding, Linear};
use crate::weights::catalog::Catalog;
use crate::weights::expect::{Expect, Loaded, Storage};

/// Self-attention of one layer.
#[derive(Debug, Clone)]
pub struct AttnWeights {
    /// q_proj (H -> nh·D).
    pub q_proj: Linear,
    /// k_proj (donors only).
    pub k_proj: Option<Linear>,
    /// v_proj (donors without K=V).
    pub v_proj: Option<Linear>,
    /// o_proj (nh·D -> H).
    pub o_proj: Linear,
    /// q_norm weight `[D]`.
    pub q_norm: Array,
    /// k_norm weight `[D]` (donors only).
    pub k_norm: Option<Array>,
    /// q_proj, k_proj and v_proj (k_proj alone under K=V) as one matmul: donors with
    /// quantized weights, whose three projections are then views of it.
    pub qkv: Option<FusedProjection>,
}

/// The per-layer-input block of one layer (E2B/E4B).
#[derive(Debug, Clone)]
pub struct PleWeights {
    /// per_layer_input_gate (H -> P).
    pub gate: Linear,
    /// per_layer_projection (P -> H).
    pub projection: Linear,
    /// post_per_layer_input_norm weight `[H]`.
    pub post_norm: Array,
}

/// The MoE branch of one layer (26B-A4B).
#[derive(Debug, Clone)]
pub struct MoeWeights {
    /// Router and experts.
    pub moe: Moe,
    /// post_feedforward_layernorm_1 weight.
    pub post_ffn_norm_1: Array,
    /// pre_feedforward_layernorm_2 weight.
    pub pre_ffn_norm_2: Array,
    /// post_feedforward_layernorm_2 weight.
    pub post_ffn_norm_2: Array,
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// input_layernorm.
    pub input_norm: Array,
    /// post_attention_layernorm.
    pub post_attn_norm: Array,
    /// pre_feedforward_layernorm.
    pub pre_ffn_norm: Array,
    /// post_feedforward_layernorm.
    pub post_ffn_norm: Array,
    /// Self-attention.
    pub attn: AttnWeights,
    /// The dense GeGLU MLP.
    pub mlp: Mlp,
    /// The MoE branch.
    pub moe: Option<MoeWeights>,
    /// The per-layer-input block.
    pub ple: Option<PleWeights>,
    /// layer_scalar `[1]`.
    pub layer_scalar: Option<Array>,
}

/// Per-layer-input tables of the model (E2B/E4B).
#[derive(Debug, Clone)]
pub struct PleModelWeights {
    /// embed_tokens_per_layer `[vocab_ple, N·P]`.
    pub embed: Embedding,
    /// per_layer_model_projection (H -> N·P).
    pub projection: Linear,
    /// per_layer_projection_norm weight `[P]`.
    pub norm: Array,
}

/// All weights of a Gemma 4 text model.
#[derive(Debug, Clone)]
pub struct Gemma4Weights {
    /// embed_tokens (also the tied head).
    pub embed: Embedding,
    /// Per-layer-input tables.
    pub ple: Option<PleModelWeights>,
    /// Layers.
    pub layers: Vec<LayerWeights>,
    /// Final norm weight.
    pub norm: Array,
    /// Untied head, when tie_word_embeddings is false.
    pub lm_head: Option<Linear>,
    /// The activation dtype (the float type of the embedding table or its scales).
    pub dtype: Dtype,
}

/// Weight facts of a catalog: which layers carry a layer scalar.
pub fn weight_facts(config: &Gemma4Config, catalog: &Catalog) -> WeightFacts {
    WeightFacts {
        layer_scalar: (0..config.num_hidden_layers)
            .map(|i| catalog.contains(&format!("layers.{i}.layer_scalar")))
            .collect(),
    }
}

impl Gemma4Weights {
    /// Checks every tensor of `catalog` against `config`, then loads and evaluates them.
    /// `on_file(done, total)` reports progress per weight file.
    pub fn load(
        config: &Gemma4Config,
        catalog: &Catalog,
        on_file: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let mut expect = Expect::new(catalog, config.quantization.as_ref());
        let layout = check(config, &mut expect)?;
        let names = expect.finish();
        let mut loaded = Loaded::new(catalog.load(&names, on_file)?);
        let mut weights = build(config, &layout, &mut loaded)?;
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
    /// [`FusedProjection`]), one layer at a time so that at most one layer's projections
    /// exist twice while it runs. The separate projections become views of the fused
    /// weights: the monolith computes as before, the generated code may take one matmul.
    fn fuse_projections(&mut self) -> Result<()> {
        for l in &mut self.layers {
            let a = &mut l.attn;
            if let Some(k) = a.k_proj.as_mut() {
                let mut slots = vec![&mut a.q_proj, k];
                slots.extend(a.v_proj.as_mut());
                a.qkv = FusedProjection::fuse_in_place(&mut slots)?;
            }
            l.mlp.fuse()?;
        }
        Ok(())
    }

    /// Every weight array.
    pub fn arrays(&self) -> Vec<&Array> {
        fn quant(q: &QuantizedWeight) -> [&Array; 3] {
            [&q.weight, &q.scales, &q.biases]
        }
        fn lin<'a>(l: &'a Linear, out: &mut Vec<&'a Array>) {
            match l {
                Linear::Float { weight } => out.push(weight),
                Linear::Quantized(q) => out.extend(quant(q)),
            }
        }
        fn emb<'a>(e: &'a Embedding, out: &mut Vec<&'a Array>) {
            match e {
                Embedding::Float { weight } => out.push(weight),
                Embedding::Quantized(q) => out.extend(quant(q)),
            }
        }
        fn sw<'a>(s: &'a SwitchLinear, out: &mut Vec<&'a Array>) {
            match s {
                SwitchLinear::Float { weight } => out.push(weight),
                SwitchLinear::Quantized(q) => out.extend(quant(q)),
            }
        }
        let mut out = Vec::new();
        emb(&self.embed, &mut out);
        if let Some(p) = &self.ple {
            emb(&p.embed, &mut out);
            lin(&p.projection, &mut out);
            out.push(&p.norm);
        }
        out.push(&self.norm);
        if let Some(h) = &self.lm_head {
            lin(h, &mut out);
        }
        for l in &self.layers {
            out.extend([
                &l.input_norm,
                &l.post_attn_norm,
                &l.pre_ffn_norm,
                &l.post_ffn_norm,
                &l.attn.q_norm,
            ]);
            for p in [
                Some(&l.attn.q_proj),
                Some(&l.attn.o_proj),
                l.attn.k_proj.as_ref(),
                l.attn.v_proj.as_ref(),
            ]
            .into_iter()
            .flatten()
            {
                lin(p, &mut out);
            }
            out.extend(l.attn.k_norm.iter());
            for p in [&l.mlp.gate, &l.mlp.up, &l.mlp.down] {
                lin(p, &mut out);
            }
            if let Some(m) = &l.moe {
                lin(&m.moe.router_proj, &mut out);
                out.extend([&m.moe.router_scale, &m.moe.per_expert_scale]);
                for s in [&m.moe.gate, &m.moe.up, &m.moe.down] {
                    sw(s, &mut out);
                }
                out.extend([&m.post_ffn_norm_1, &m.pre_ffn_norm_2, &m.post_ffn_norm_2]);
            }
            if let Some(p) = &l.ple {
                lin(&p.gate, &mut out);
                lin(&p.projection, &mut out);
                out.push(&p.post_norm);
            }
            out.extend(l.layer_scalar.iter());
        }
        out
    }

    /// Bytes of all weight arrays.
    pub fn nbytes(&self) -> usize {
        self.arrays().iter().map(|a| a.nbytes()).sum()
    }
}

/// A tensor (or quantizable module) of the canonical mlx-community layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorRole {
    /// A linear-like module `<name>.weight` `[lead.., out, in]`, float or quantized.
    Module {
        /// Leading (expert) dims.
        lead: Vec<usize>,
        /// Output features.
        out: usize,
        /// Input features.
        inp: usize,
    },
    /// An RMSNorm weight `[dims]`.
    Norm(usize),
    /// Another float vector `[dims]` (router scales).
    Vector(usize),
    /// The optional `layer_scalar` `[1]`.
    LayerScalar,
}

/// Every tensor of a Gemma 4 text model in mlx-community naming (prefix stripped), in a
/// fixed order: what the loader checks and the synthesizer writes.
pub fn canonical_tensors(c: &Gemma4Config) -> Vec<(String, TensorRole)> {
    let module = |out: usize, inp: usize| TensorRole::Module {
        lead: Vec::new(),
        out,
        inp,
    };
    let h = c.hidden_size;
    let n = c.num_hidden_layers;
    let p = c.hidden_size_per_layer_input;
    let mut t: Vec<(String, TensorRole)> = vec![("embed_tokens".into(), module(c.vocab_size, h))];
    if p > 0 {
        t.push((
            "embed_tokens_per_layer".into(),
            module(c.vocab_size_per_layer_input, n * p),
        ));
        t.push(("per_layer_model_projection".into(), module(n * p, h)));
        t.push((
            "per_layer_projection_norm.weight".into(),
            TensorRole::Norm(p),
        ));
    }
    t.push(("norm.weight".into(), TensorRole::Norm(h)));
    if !c.tie_word_embeddings {
        t.push(("lm_head".into(), module(c.vocab_size, h)));
    }
    for i in 0..n {
        let pre = format!("layers.{i}");
        let d = c.head_dim_of(i);
        let heads = c.num_attention_heads;
        let kv = c.kv_heads(i);
        for norm in NORMS {
            t.push((format!("{pre}.{norm}.weight"), TensorRole::Norm(h)));
        }
        t.push((format!("{pre}.self_attn.q_proj"), module(heads * d, h)));
        t.push((format!("{pre}.self_attn.o_proj"), module(h, heads * d)));
        t.push((
            format!("{pre}.self_attn.q_norm.weight"),
            TensorRole::Norm(d),
        ));
        if i < c.first_shared_layer() {
            t.push((format!("{pre}.self_attn.k_proj"), module(kv * d, h)));
            t.push((
                format!("{pre}.self_attn.k_norm.weight"),
                TensorRole::Norm(d),
            ));
            if !c.k_eq_v(i) {
                t.push((format!("{pre}.self_attn.v_proj"), module(kv * d, h)));
            }
        }
        let width = c.mlp_width(i);
        t.push((format!("{pre}.mlp.gate_proj"), module(width, h)));
        t.push((format!("{pre}.mlp.up_proj"), module(width, h)));
        t.push((format!("{pre}.mlp.down_proj"), module(h, width)));
        if let Some(m) = c.moe {
            t.push((format!("{pre}.router.proj"), module(m.num_experts, h)));
            t.push((format!("{pre}.router.scale"), TensorRole::Vector(h)));
            t.push((
                format!("{pre}.router.per_expert_scale"),
                TensorRole::Vector(m.num_experts),
            ));
            for norm in MOE_NORMS {
                t.push((format!("{pre}.{norm}.weight"), TensorRole::Norm(h)));
            }
            let lead = vec![m.num_experts];
            let e = m.intermediate_size;
            let sw = format!("{pre}.experts.switch_glu");
            t.push((
                format!("{sw}.gate_proj"),
                TensorRole::Module {
                    lead: lead.clone(),
                    out: e,
                    inp: h,
                },
            ));
            t.push((
                format!("{sw}.up_proj"),
                TensorRole::Module {
                    lead: lead.clone(),
                    out: e,
                    inp: h,
                },
            ));
            t.push((
                format!("{sw}.down_proj"),
                TensorRole::Module {
                    lead,
                    out: h,
                    inp: e,
                },
            ));
        }
        if p > 0 {
            t.push((format!("{pre}.per_layer_input_gate"), module(p, h)));
            t.push((format!("{pre}.per_layer_projection"), module(h, p)));
            t.push((
                format!("{pre}.post_per_layer_input_norm.weight"),
                TensorRole::Norm(h),
            ));
        }
        t.push((format!("{pre}.layer_scalar"), TensorRole::LayerScalar));
    }
    t
}

const NORMS: [&str; 4] = [
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
];
const MOE_NORMS: [&str; 3] = [
    "post_feedforward_layernorm_1",
    "pre_feedforward_layernorm_2",
    "post_feedforward_layernorm_2",
];

/// What checking decided: each module's storage, and the layers whose experts come in
/// the fused HF layout.
#[derive(Default)]
struct Layout {
    storage: HashMap<String, Storage>,
    fused_experts: Vec<bool>,
    scalars: Vec<bool>,
}

impl Layout {
    fn of(&self, module: &str) -> Result<Storage> {
        self.storage
            .get(module)
            .copied()
            .ok_or_else(|| Error::weights("(checked weights)", module, "was not checked"))
    }
}

fn check(c: &Gemma4Config, e: &mut Expect<'_>) -> Result<Layout> {
    let mut layout = Layout {
        fused_experts: vec![false; c.num_hidden_layers],
        scalars: vec![false; c.num_hidden_layers],
        ..Layout::default()
    };
    for i in 0..c.num_hidden_layers {
        layout.fused_experts[i] =
            c.moe.is_some() && e.has(&format!("layers.{i}.experts.gate_up_proj"));
    }
    for (name, role) in canonical_tensors(c) {
        let layer: Option<usize> = name
            .strip_prefix("layers.")
            .and_then(|r| r.split('.').next())
            .and_then(|i| i.parse().ok());
        match role {
            TensorRole::Module { lead, out, inp } => {
                if name.contains(".experts.switch_glu.")
                    && layer.is_some_and(|i| layout.fused_experts[i])
                {
                    continue;
                }
                let storage = e.module(&name, &lead, out, inp)?;
                layout.storage.insert(name, storage);
            }
            TensorRole::Norm(d) | TensorRole::Vector(d) => e.float(&name, &[d])?,
            TensorRole::LayerScalar => {
                if e.has(&name) {
                    e.float(&name, &[1])?;
                    layout.scalars[layer.expect("layer tensor")] = true;
                }
            }
        }
    }
    if let Some(m) = c.moe {
        for i in (0..c.num_hidden_layers).filter(|&i| layout.fused_experts[i]) {
            let h = c.hidden_size;
            e.float(
                &format!("layers.{i}.experts.gate_up_proj"),
                &[m.num_experts, 2 * m.intermediate_size, h],
            )?;
            e.float(
                &format!("layers.{i}.experts.down_proj"),
                &[m.num_experts, h, m.intermediate_size],
            )?;
        }
    }
    Ok(layout)
}

fn build(c: &Gemma4Config, layout: &Layout, t: &mut Loaded) -> Result<Gemma4Weights> {
    let embed = t.embedding("embed_tokens", layout.of("embed_tokens")?)?;
    let dtype = match &embed {
        Embedding::Float { weight } => weight.dtype(),
        Embedding::Quantized(q) => q.scales.dtype(),
    };
    let ple = if c.hidden_size_per_layer_input > 0 {
        Some(PleModelWeights {
            embed: t.embedding(
                "embed_tokens_per_layer",
                layout.of("embed_tokens_per_layer")?,
            )?,
            projection: t.linear(
                "per_layer_model_projection",
                layout.of("per_layer_model_projection")?,
            )?,
            norm: t.take("per_layer_projection_norm.weight")?,
        })
    } else {
        None
    };
    let norm = t.take("norm.weight")?;
    let lm_head = if c.tie_word_embeddings {
        None
    } else {
        Some(t.linear("lm_head", layout.of("lm_head")?)?)
    };
    let linear = |t: &mut Loaded, name: String| -> Result<Linear> {
        let storage = layout.of(&name)?;
        t.linear(&name, storage)
    };
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let pre = format!("layers.{i}");
        let donor = i < c.first_shared_layer();
        let attn = AttnWeights {
            q_proj: linear(t, format!("{pre}.self_attn.q_proj"))?,
            k_proj: if donor {
                Some(linear(t, format!("{pre}.self_attn.k_proj"))?)
            } else {
                None
            },
            v_proj: if donor && !c.k_eq_v(i) {
                Some(linear(t, format!("{pre}.self_attn.v_proj"))?)
            } else {
                None
            },
            o_proj: linear(t, format!("{pre}.self_attn.o_proj"))?,
            q_norm: t.take(&format!("{pre}.self_attn.q_norm.weight"))?,
            k_norm: if donor {
                Some(t.take(&format!("{pre}.self_attn.k_norm.weight"))?)
            } else {
                None
            },
            qkv: None,
        };
        let mlp = Mlp {
            gate: linear(t, format!("{pre}.mlp.gate_proj"))?,
            up: linear(t, format!("{pre}.mlp.up_proj"))?,
            down: linear(t, format!("{pre}.mlp.down_proj"))?,
            gate_up: None,
        };
        let moe = match c.moe {
            None => None,
            Some(m) => {
                let (gate, up, down) = if layout.fused_experts[i] {
                    // mlx-lm's sanitize: split on axis -2 (gate first), each made contiguous.
                    let fused = t.take(&format!("{pre}.experts.gate_up_proj"))?;
                    let halves = fused.split_equal(2, -2)?;
                    (
                        SwitchLinear::Float {
                            weight: halves[0].contiguous()?,
                        },
                        SwitchLinear::Float {
                            weight: halves[1].contiguous()?,
                        },
                        SwitchLinear::Float {
                            weight: t.take(&format!("{pre}.experts.down_proj"))?,
                        },
                    )
                } else {
                    let sw = format!("{pre}.experts.switch_glu");
                    let mut switch = |part: &str| -> Result<SwitchLinear> {
                        let name = format!("{sw}.{part}");
                        t.switch_linear(&name, layout.of(&name)?)
                    };
                    (
                        switch("gate_proj")?,
                        switch("up_proj")?,
                        switch("down_proj")?,
                    )
                };
                Some(MoeWeights {
                    moe: Moe {
                        router_proj: linear(t, format!("{pre}.router.proj"))?,
                        router_scale: t.take(&format!("{pre}.router.scale"))?,
                        per_expert_scale: t.take(&format!("{pre}.router.per_expert_scale"))?,
                        gate,
                        up,
                        down,
                        top_k: m.top_k as i32,
                    },
                    post_ffn_norm_1: t
                        .take(&format!("{pre}.post_feedforward_layernorm_1.weight"))?,
                    pre_ffn_norm_2: t.take(&format!("{pre}.pre_feedforward_layernorm_2.weight"))?,
                    post_ffn_norm_2: t
                        .take(&format!("{pre}.post_feedforward_layernorm_2.weight"))?,
                })
            }
        };
        let ple = if c.hidden_size_per_layer_input > 0 {
            Some(PleWeights {
                gate: linear(t, format!("{pre}.per_layer_input_gate"))?,
                projection: linear(t, format!("{pre}.per_layer_projection"))?,
                post_norm: t.take(&format!("{pre}.post_per_layer_input_norm.weight"))?,
            })
        } else {
            None
        };
        layers.push(LayerWeights {
            input_norm: t.take(&format!("{pre}.input_layernorm.weight"))?,
            post_attn_norm: t.take(&format!("{pre}.post_attention_layernorm.weight"))?,
            pre_ffn_norm: t.take(&format!("{pre}.pre_feedforward_layernorm.weight"))?,
            post_ffn_norm: t.take(&format!("{pre}.post_feedforward_layernorm.weight"))?,
            attn,
            mlp,
            moe,
            ple,
            layer_scalar: if layout.scalars[i] {
                Some(t.take(&format!("{pre}.layer_scalar"))?)
            } else {
                None
            },
        });
    }
    Ok(Gemma4Weights {
        embed,
        ple,
        layers,
        norm,
        lm_head,
        dtype,
    })
}
