//! Gemma 4 as a family: its [`Family`], its config as a [`ModelConfig`] and its loaded
//! model as a [`FamilyModel`].

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use mlx_rs::{Array, Dtype};
use serde_json::{Value, json};

use super::config::Gemma4Config;
use super::weights::{Gemma4Weights, TensorRole, canonical_tensors, weight_facts};
use super::{Gemma4, monolith, plan, synth};
use crate::cache::AnyCache;
use crate::config::LayerType;
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

/// The Gemma 4 family.
#[derive(Debug)]
pub struct Gemma4Family;

/// The family's one value, as [`crate::families::ALL`] lists it.
pub static FAMILY: Gemma4Family = Gemma4Family;

/// The id of the Gemma 4 monolith implementation.
pub const MONOLITH_ID: &str = "gemma4-monolith";

impl Family for Gemma4Family {
    fn name(&self) -> &'static str {
        "gemma4"
    }

    fn model_types(&self) -> &'static [&'static str] {
        &["gemma4", "gemma4_text", "gemma4_unified"]
    }

    /// Gemma 4 text configs may omit `model_type`.
    fn reads_untyped_configs(&self) -> bool {
        true
    }

    fn parse_config(&self, file: &str, value: &Value) -> Result<AnyConfig> {
        Ok(AnyConfig::new(Gemma4Config::from_value(file, value)?))
    }

    fn monolith_id(&self) -> &'static str {
        MONOLITH_ID
    }
}

impl ModelConfig for Gemma4Config {
    fn family(&self) -> &'static dyn Family {
        &FAMILY
    }

    fn basics(&self) -> ConfigBasics<'_> {
        crate::config_basics!(self)
    }

    fn num_caches(&self) -> usize {
        self.first_shared_layer()
    }

    fn sliding_window(&self) -> Option<usize> {
        Some(self.sliding_window)
    }

    fn has_moe(&self) -> bool {
        self.moe.is_some()
    }

    fn resolve(&self, kv: &KvLayout, facts: WeightFacts<'_>) -> Result<ModelPlan> {
        let facts = match facts {
            WeightFacts::AsShipped => plan::WeightFacts::all_scalars(self.num_hidden_layers),
            WeightFacts::Tensors(catalog) => weight_facts(self, catalog),
            WeightFacts::File { file, text } => {
                plan::WeightFacts::from_json(file, text, self.num_hidden_layers)?
            }
        };
        plan::resolve(self, kv, &facts)
    }

    fn weight_facts_file(&self, catalog: &Catalog) -> Option<String> {
        Some(weight_facts(self, catalog).to_json())
    }

    fn memory_shape(&self, plan: &ModelPlan) -> MemoryShape {
        let caches = plan
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.kv.is_donor())
            .map(|(i, l)| CacheShape {
                cache: i,
                signature: l.cache,
                width: CacheWidth::KeysValues {
                    kv_heads: self.kv_heads(i),
                    head_dim: self.head_dim_of(i),
                },
                window: match l.attention {
                    LayerType::Sliding => Some(self.sliding_window as u64),
                    LayerType::Full => None,
                },
            })
            .collect();
        let h = self.hidden_size as u64;
        let mlp = (0..self.num_hidden_layers)
            .map(|i| self.mlp_width(i))
            .max()
            .unwrap_or(0) as u64;
        let moe = self.moe.map_or(0, |m| {
            product([m.top_k as u64, m.intermediate_size as u64, 3])
        });
        let ple = product([
            self.num_hidden_layers as u64,
            self.hidden_size_per_layer_input as u64,
        ]);
        let heads = self.num_attention_heads as u64;
        let d = self.global_head_dim.max(self.head_dim) as u64;
        MemoryShape {
            caches,
            // Residual, norms, q/k/v/o, MLP gate/up/product, experts, per-layer inputs.
            activation_width: sum([
                product([6, h]),
                product([4, heads, d]),
                product([3, mlp]),
                moe,
                product([2, ple]),
            ]),
            attention_heads: heads,
            vocab: self.vocab_size as u64,
        }
    }

    fn estimate_weight_bytes(&self, quant: Option<QuantSpec>, dtype_bytes: u64) -> u64 {
        let total = canonical_tensors(self)
            .into_iter()
            .map(|(name, role)| match role {
                TensorRole::Module { lead, out, inp } => {
                    let rows = product(lead.iter().chain([&out]).map(|&d| d as u64));
                    let spec = match quant {
                        Some(_) if name.ends_with("router.proj") => Some(synth::ROUTER_QUANT),
                        q => q,
                    };
                    crate::memory::module_bytes(rows, inp as u64, spec, dtype_bytes)
                }
                TensorRole::Norm(d) | TensorRole::Vector(d) => product([d as u64, dtype_bytes]),
                TensorRole::LayerScalar => dtype_bytes,
            });
        sum(total)
    }

    fn twin(&self) -> AnyConfig {
        AnyConfig::new(synth::twin(self))
    }

    fn with_quantization(&self, quantization: Option<QuantizationMap>) -> AnyConfig {
        AnyConfig::new(Gemma4Config {
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
        let weights = Gemma4Weights::load(self, catalog, on_file)?;
        Ok(Loaded::new(Gemma4::new(
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
                "layers": self.num_hidden_layers,
                "donors": plan.num_caches(),
                "sharers": self.num_hidden_layers - plan.num_caches(),
                "hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size,
                "attention_heads": self.num_attention_heads,
                "kv_heads": self.num_key_value_heads,
                "global_kv_heads": self.num_global_key_value_heads,
                "head_dim": self.head_dim,
                "global_head_dim": self.global_head_dim,
                "sliding_window": self.sliding_window,
                "vocab_size": self.vocab_size,
                "per_layer_input": self.hidden_size_per_layer_input,
                "moe": self.moe.map(|m| json!({
                    "experts": m.num_experts, "top_k": m.top_k, "intermediate_size": m.intermediate_size
                })),
                "k_eq_v": self.attention_k_eq_v,
                "tie_word_embeddings": self.tie_word_embeddings,
                "eos_token_ids": self.eos_token_ids,
            }),
            format!(
                "config       {} layers ({} donors, {} sharers), hidden {}, mlp {}, heads {} (kv {}{}), head dim {}/{} (sliding/full), window {}, vocab {}{}{}",
                self.num_hidden_layers,
                plan.num_caches(),
                self.num_hidden_layers - plan.num_caches(),
                self.hidden_size,
                self.intermediate_size,
                self.num_attention_heads,
                self.num_key_value_heads,
                self.num_global_key_value_heads
                    .map(|g| format!(", global kv {g}"))
                    .unwrap_or_default(),
                self.head_dim,
                self.global_head_dim,
                self.sliding_window,
                self.vocab_size,
                if self.hidden_size_per_layer_input > 0 {
                    format!(", per-layer inputs {}", self.hidden_size_per_layer_input)
                } else {
                    String::new()
                },
                self.moe
                    .map(|m| format!(", moe {} experts top {}", m.num_experts, m.top_k))
                    .unwrap_or_default(),
            ),
        )
    }
}

impl FamilyModel for Gemma4 {
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
        Gemma4::float_caches(self, batch)
    }

    fn planned_caches(&self, batch: usize) -> Vec<AnyCache> {
        Gemma4::planned_caches(self, batch)
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
        Box::new(monolith::Gemma4Monolith::new(self))
    }

    fn with_options(&self, options: ExecOptions) -> Loaded {
        Loaded::new(Gemma4 {
            options,
            ..self.clone()
        })
    }
}
