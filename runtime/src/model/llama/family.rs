//! The Llama family as a family: its [`Family`], its config as a [`ModelConfig`] and its
//! loaded model as a [`FamilyModel`].

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use mlx_rs::{Array, Dtype};
use serde_json::{Value, json};

use super::config::{LlamaConfig, LlamaRope};
use super::weights::{LlamaWeights, TensorRole, canonical_tensors};
use super::{Llama, monolith, plan, synth};
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

/// The Llama family (`model_type` llama, qwen3).
#[derive(Debug)]
pub struct LlamaFamily;

/// The family's one value, as [`crate::families::ALL`] lists it.
pub static FAMILY: LlamaFamily = LlamaFamily;

impl Family for LlamaFamily {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["llama", "qwen3", "minicpm"]
    }

    fn parse_config(&self, file: &str, value: &Value) -> Result<AnyConfig> {
        Ok(AnyConfig::new(LlamaConfig::from_value(file, value)?))
    }

    fn monolith_id(&self) -> &'static str {
        monolith::MONOLITH_ID
    }
}

impl ModelConfig for LlamaConfig {
    fn family(&self) -> &'static dyn Family {
        &FAMILY
    }

    fn basics(&self) -> ConfigBasics<'_> {
        crate::config_basics!(self)
    }

    fn num_caches(&self) -> usize {
        self.num_hidden_layers
    }

    fn resolve(&self, kv: &KvLayout, facts: WeightFacts<'_>) -> Result<ModelPlan> {
        if let WeightFacts::File { file, .. } = facts {
            return Err(crate::Error::config(
                file,
                "layer_scalar",
                "the Llama family has no layer scalars; remove this file",
            ));
        }
        plan::resolve(self, kv)
    }

    /// The Llama family reads nothing from its tensors to resolve a plan.
    fn weight_facts_file(&self, _catalog: &Catalog) -> Option<String> {
        None
    }

    fn memory_shape(&self, plan: &ModelPlan) -> MemoryShape {
        let caches = plan
            .cache_signatures()
            .into_iter()
            .enumerate()
            .map(|(i, signature)| CacheShape {
                cache: i,
                signature,
                width: CacheWidth::KeysValues {
                    kv_heads: self.num_key_value_heads,
                    head_dim: self.head_dim,
                },
                window: None,
            })
            .collect();
        let h = self.hidden_size as u64;
        let heads = self.num_attention_heads as u64;
        MemoryShape {
            caches,
            // Residual, norms, q/k/v/o, MLP gate/up/product.
            activation_width: sum([
                product([6, h]),
                product([4, heads, self.head_dim as u64]),
                product([3, self.intermediate_size as u64]),
            ]),
            attention_heads: heads,
            vocab: self.vocab_size as u64,
        }
    }

    fn estimate_weight_bytes(&self, quant: Option<QuantSpec>, dtype_bytes: u64) -> u64 {
        sum(canonical_tensors(self)
            .into_iter()
            .map(|(_, role)| match role {
                TensorRole::Module { out, inp } => {
                    crate::memory::module_bytes(out as u64, inp as u64, quant, dtype_bytes)
                }
                TensorRole::Norm(d) => product([d as u64, dtype_bytes]),
            }))
    }

    fn twin(&self) -> AnyConfig {
        AnyConfig::new(synth::twin(self))
    }

    fn with_quantization(&self, quantization: Option<QuantizationMap>) -> AnyConfig {
        AnyConfig::new(LlamaConfig {
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
        let weights = LlamaWeights::load(self, catalog, on_file)?;
        Ok(Loaded::new(Llama::new(
            self.clone(),
            kv_layout,
            weights,
            plan,
            options,
        )?))
    }

    fn summary(&self, plan: &ModelPlan) -> (Value, String) {
        (
            json!({
                "family": "llama",
                "model_type": self.kind.model_type(),
                "layers": self.num_hidden_layers,
                "donors": plan.num_caches(),
                "sharers": 0,
                "hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size,
                "attention_heads": self.num_attention_heads,
                "kv_heads": self.num_key_value_heads,
                "head_dim": self.head_dim,
                "qk_norm": self.qk_norm,
                "rope": rope_phrase(&self.rope, self.rope_traditional),
                "minicpm": self.minicpm.map(|m| json!({
                    "scale_emb": m.scale_emb,
                    "scale_depth": m.scale_depth,
                    "dim_model_base": m.dim_model_base,
                    "residual_scale": m.residual(self.num_hidden_layers),
                    "logit_divisor": m.logit_divisor(self.hidden_size),
                })),
                "vocab_size": self.vocab_size,
                "tie_word_embeddings": self.tie_word_embeddings,
                "eos_token_ids": self.eos_token_ids,
            }),
            format!(
                "config       {} layers ({}), hidden {}, mlp {} (SwiGLU), heads {} (kv {}), head dim {}{}, vocab {}, {}{}",
                self.num_hidden_layers,
                self.kind.model_type(),
                self.hidden_size,
                self.intermediate_size,
                self.num_attention_heads,
                self.num_key_value_heads,
                self.head_dim,
                if self.qk_norm { ", q/k norm" } else { "" },
                self.vocab_size,
                rope_phrase(&self.rope, self.rope_traditional),
                match self.minicpm {
                    Some(m) => format!(
                        ", scales: embedding x{}, residuals x{:.6}, head input / {}",
                        m.scale_emb,
                        m.residual(self.num_hidden_layers),
                        m.logit_divisor(self.hidden_size)
                    ),
                    None => String::new(),
                },
            ),
        )
    }
}

impl FamilyModel for Llama {
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
        Llama::float_caches(self, batch)
    }

    fn planned_caches(&self, batch: usize) -> Vec<AnyCache> {
        Llama::planned_caches(self, batch)
    }

    fn barrier(&self) -> Barrier {
        barrier::for_model(FeedForward::Dense, &self.options)
    }

    fn monolith(self: Rc<Self>) -> Box<dyn LanguageModel> {
        Box::new(monolith::LlamaMonolith::new(self))
    }

    fn with_options(&self, options: ExecOptions) -> Loaded {
        Loaded::new(Llama {
            options,
            ..self.clone()
        })
    }
}

/// `rope theta 10000`, `llama3 rope theta 500000 factor 32`, ... (`, adjacent pairs`
/// under `rope_traditional`).
fn rope_phrase(rope: &LlamaRope, traditional: bool) -> String {
    let pairs = if traditional { ", adjacent pairs" } else { "" };
    let phrase = match rope {
        LlamaRope::Default { theta } => format!("rope theta {theta}"),
        LlamaRope::Llama3 { theta, scaling } => {
            format!("llama3 rope theta {theta} factor {}", scaling.factor)
        }
        LlamaRope::Linear { theta, factor } => format!("linear rope theta {theta} factor {factor}"),
        LlamaRope::LongRope { theta, scaling, .. } => format!(
            "longrope theta {theta} (original {} positions, input scale {})",
            scaling.original_max_position_embeddings,
            scaling.mscale()
        ),
        LlamaRope::Yarn { theta, scaling } => format!(
            "yarn rope theta {theta} factor {} (original {} positions, input scale {})",
            scaling.factor,
            scaling.original_max_position_embeddings,
            scaling.input_scale()
        ),
    };
    format!("{phrase}{pairs}")
}
