//! The MLA family as a family: its [`Family`], its config as a [`ModelConfig`] and its
//! loaded model as a [`FamilyModel`].

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use mlx_rs::{Array, Dtype};
use serde_json::{Value, json};

use super::config::{MlaConfig, MlaRope};
use super::weights::{MlaWeights, TensorRole, canonical_tensors};
use super::{Mla, monolith, plan, synth};
use crate::cache::AnyCache;
use crate::error::Result;
use crate::family::{
    AnyConfig, ConfigBasics, Family, FamilyModel, Loaded, ModelConfig, ModelParts, RandomTensors,
    WeightFacts,
};
use crate::kv_layout::KvLayout;
use crate::memory::{CacheShape, CacheWidth, MemoryShape, product, sum};
use crate::model::LanguageModel;
use crate::model::barrier::{self, Barrier, FeedForward};
use crate::options::ExecOptions;
use crate::plan::ModelPlan;
use crate::quantization::{QuantSpec, QuantizationMap};
use crate::synth::SynthOptions;
use crate::weights::catalog::Catalog;

/// The MLA family (`model_type` deepseek_v32, glm_moe_dsa).
#[derive(Debug)]
pub struct MlaFamily;

/// The family's one value, as [`crate::families::ALL`] lists it.
pub static FAMILY: MlaFamily = MlaFamily;

impl Family for MlaFamily {
    fn name(&self) -> &'static str {
        "mla"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["deepseek_v32", "glm_moe_dsa"]
    }

    fn parse_config(&self, file: &str, value: &Value) -> Result<AnyConfig> {
        Ok(AnyConfig::new(MlaConfig::from_value(file, value)?))
    }

    fn monolith_id(&self) -> &'static str {
        monolith::MONOLITH_ID
    }
}

impl ModelConfig for MlaConfig {
    fn family(&self) -> &'static dyn Family {
        &FAMILY
    }

    fn basics(&self) -> ConfigBasics<'_> {
        crate::config_basics!(self, max_position_embeddings: Some(self.max_position_embeddings))
    }

    fn num_caches(&self) -> usize {
        self.num_hidden_layers
    }

    fn has_moe(&self) -> bool {
        self.moe.is_some()
    }

    fn resolve(&self, kv: &KvLayout, facts: WeightFacts<'_>) -> Result<ModelPlan> {
        if let WeightFacts::File { file, .. } = facts {
            return Err(crate::Error::config(
                file,
                "layer_scalar",
                "the MLA family reads nothing from its tensors to plan; remove this file",
            ));
        }
        plan::resolve(self, kv)
    }

    /// The MLA family reads nothing from its tensors to resolve a plan.
    fn weight_facts_file(&self, _catalog: &Catalog) -> Option<String> {
        None
    }

    fn memory_shape(&self, plan: &ModelPlan) -> MemoryShape {
        let caches = plan
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| CacheShape {
                cache: i,
                signature: l.cache,
                width: CacheWidth::Float {
                    elements: self.kv_lora_rank
                        + self.qk_rope_head_dim
                        + match l.cache {
                            crate::signature::CacheSignature::Mla { indexer: true } => {
                                self.indexer.head_dim
                            }
                            _ => 0,
                        },
                },
                window: None,
            })
            .collect();
        let h = self.hidden_size as u64;
        let heads = self.num_attention_heads as u64;
        let ffn = match self.moe {
            Some(m) => product([
                3,
                m.moe_intermediate_size as u64,
                (m.num_experts_per_tok + m.n_shared_experts.unwrap_or(0)) as u64,
            ]),
            None => 0,
        }
        .max(product([3, self.intermediate_size as u64]));
        MemoryShape {
            caches,
            // Residual and norms, the compressed query and latent, per-head queries,
            // expanded keys and values (prefill), the output, the indexer's queries, the
            // feed-forward.
            activation_width: sum([
                product([6, h]),
                (self.q_lora_rank + self.kv_lora_rank) as u64,
                product([
                    heads,
                    (self.q_head_dim() * 2 + self.v_head_dim * 2 + self.kv_lora_rank) as u64,
                ]),
                product([self.indexer.n_heads as u64, self.indexer.head_dim as u64]),
                ffn,
            ]),
            // The attention's and the indexer's score matrices are live together.
            attention_heads: heads + self.indexer.n_heads as u64,
            vocab: self.vocab_size as u64,
        }
    }

    fn estimate_weight_bytes(&self, quant: Option<QuantSpec>, dtype_bytes: u64) -> u64 {
        sum(canonical_tensors(self)
            .into_iter()
            .map(|(_, role)| match role {
                TensorRole::Module { lead, out, inp } => product([
                    lead.unwrap_or(1) as u64,
                    crate::memory::module_bytes(out as u64, inp as u64, quant, dtype_bytes),
                ]),
                TensorRole::Vector(d) => product([d as u64, dtype_bytes]),
                TensorRole::Matrix { rows, cols } => {
                    product([rows as u64, cols as u64, dtype_bytes])
                }
                TensorRole::Float32Vector(d) => product([d as u64, 4]),
            }))
    }

    fn twin(&self) -> AnyConfig {
        AnyConfig::new(synth::twin(self))
    }

    fn with_quantization(&self, quantization: Option<QuantizationMap>) -> AnyConfig {
        AnyConfig::new(MlaConfig {
            quantization,
            ..self.clone()
        })
    }

    fn random_tensors(&self, opts: SynthOptions, dtype: Dtype) -> Result<RandomTensors> {
        synth::random_tensors_as(self, opts, dtype)
    }

    fn write_folder(
        &self,
        dir: &Path,
        tensors: &BTreeMap<String, Array>,
        quant: Option<&QuantizationMap>,
    ) -> Result<()> {
        synth::write_folder(dir, self, tensors, quant)
    }

    fn load(
        &self,
        catalog: &Catalog,
        plan: ModelPlan,
        kv_layout: KvLayout,
        options: ExecOptions,
        on_file: &mut dyn FnMut(usize, usize),
    ) -> Result<Loaded> {
        let weights = MlaWeights::load(self, catalog, on_file)?;
        Ok(Loaded::new(Mla::new(
            self.clone(),
            kv_layout,
            weights,
            plan,
            options,
        )?))
    }

    fn summary(&self, plan: &ModelPlan) -> (Value, String) {
        let moe_layers = plan.layers.iter().filter(|l| l.flags.moe).count();
        (
            json!({
                "family": "mla",
                "model_type": self.kind.model_type(),
                "layers": self.num_hidden_layers,
                "moe_layers": moe_layers,
                "hidden_size": self.hidden_size,
                "attention_heads": self.num_attention_heads,
                "q_lora_rank": self.q_lora_rank,
                "kv_lora_rank": self.kv_lora_rank,
                "qk_nope_head_dim": self.qk_nope_head_dim,
                "qk_rope_head_dim": self.qk_rope_head_dim,
                "v_head_dim": self.v_head_dim,
                "attention_scale": self.attention_scale(),
                "indexer": {
                    "heads": self.indexer.n_heads,
                    "head_dim": self.indexer.head_dim,
                    "topk": self.indexer.topk,
                    "rope_interleave": self.indexer.rope_interleave,
                },
                "moe": self.moe.map(|m| json!({
                    "routed_experts": m.n_routed_experts,
                    "shared_experts": m.n_shared_experts,
                    "experts_per_token": m.num_experts_per_tok,
                    "groups": m.n_group,
                    "kept_groups": m.topk_group,
                    "intermediate_size": m.moe_intermediate_size,
                    "routed_scaling_factor": m.routed_scaling_factor,
                    "first_k_dense_replace": m.first_k_dense_replace,
                })),
                "rope": rope_phrase(&self.rope),
                "vocab_size": self.vocab_size,
                "eos_token_ids": self.eos_token_ids,
            }),
            format!(
                "config       {} layers ({}, {} routed), hidden {}, heads {}, q/kv lora {}/{}, \
                 qk nope/rope {}/{}, v {}, indexer {} heads x {} top-{}, {}{}, vocab {}",
                self.num_hidden_layers,
                self.kind.model_type(),
                moe_layers,
                self.hidden_size,
                self.num_attention_heads,
                self.q_lora_rank,
                self.kv_lora_rank,
                self.qk_nope_head_dim,
                self.qk_rope_head_dim,
                self.v_head_dim,
                self.indexer.n_heads,
                self.indexer.head_dim,
                self.indexer.topk,
                rope_phrase(&self.rope),
                match self.moe {
                    Some(m) => format!(
                        ", experts {} (+{} shared) top-{} in {} groups keep {}",
                        m.n_routed_experts,
                        m.n_shared_experts.unwrap_or(0),
                        m.num_experts_per_tok,
                        m.n_group,
                        m.topk_group
                    ),
                    None => String::new(),
                },
                self.vocab_size,
            ),
        )
    }
}

impl FamilyModel for Mla {
    fn parts(&self) -> ModelParts<'_> {
        crate::model_parts!(self)
    }

    fn dtype(&self) -> Dtype {
        self.weights.dtype
    }

    fn weight_bytes(&self) -> usize {
        self.weights.nbytes()
    }

    fn float_caches(&self, batch: usize) -> Vec<AnyCache> {
        self.planned_caches(batch)
    }

    fn planned_caches(&self, batch: usize) -> Vec<AnyCache> {
        Mla::planned_caches(self, batch)
    }

    fn barrier(&self) -> Barrier {
        let ffn = if self.plan.has_moe() {
            FeedForward::WithMoe
        } else {
            FeedForward::Dense
        };
        barrier::for_model(ffn, &self.options)
    }

    fn monolith(self: Rc<Self>) -> Box<dyn LanguageModel> {
        Box::new(monolith::MlaMonolith::new(self))
    }

    fn with_options(&self, options: ExecOptions) -> Loaded {
        Loaded::new(Mla {
            options,
            ..self.clone()
        })
    }
}

/// `rope theta 10000`, `yarn rope theta 10000 factor 40`, ...
fn rope_phrase(rope: &MlaRope) -> String {
    match rope {
        MlaRope::Default { theta } => format!("rope theta {theta}"),
        MlaRope::Linear { theta, factor } => format!("linear rope theta {theta} factor {factor}"),
        MlaRope::Yarn { theta, scaling } => format!(
            "yarn rope theta {theta} factor {} (original {} positions)",
            scaling.factor, scaling.original_max_position_embeddings
        ),
    }
}
