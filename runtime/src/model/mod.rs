//! Models: the trait every implementation (monolith or generated) serves, the families,
//! and the family-neutral handles on a loaded model ([`Loaded`], [`ModelRef`]).

pub mod barrier;
pub mod gemma4;
pub mod llama;
pub mod segments;

use std::path::Path;
use std::rc::Rc;

use mlx_rs::Array;
use serde_json::Value;

use crate::cache::AnyCache;
use crate::config::Gemma4Config;
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::plan::{Family, ModelPlan};
use gemma4::Gemma4;
use llama::{Llama, LlamaConfig};

/// A language model implementation: one forward step over caches.
pub trait LanguageModel {
    /// Logits `[B, L, vocab]` (activation dtype) for `tokens` `[B, L]` int32, updating
    /// `caches` (one per donor layer).
    fn forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array>;

    /// The plan for the configured kv layout.
    fn plan(&self) -> &ModelPlan;

    /// The loaded model (config, weights, caches factory) of its family.
    fn loaded(&self) -> ModelRef<'_>;

    /// The implementation id (`gemma4-monolith`, or a generated model's id).
    fn implementation(&self) -> &str;

    /// How many forward calls took a specialized fast path (0 for the monolith).
    fn fast_path_calls(&self) -> u64 {
        0
    }
}

/// A loaded model of any family, borrowed.
#[derive(Debug, Clone, Copy)]
pub enum ModelRef<'a> {
    /// Gemma 4.
    Gemma4(&'a Gemma4),
    /// The Llama family.
    Llama(&'a Llama),
}

impl<'a> ModelRef<'a> {
    /// The family.
    pub fn family(self) -> Family {
        match self {
            ModelRef::Gemma4(_) => Family::Gemma4,
            ModelRef::Llama(_) => Family::Llama,
        }
    }

    /// The Gemma 4 model, if it is one.
    pub fn gemma4(self) -> Option<&'a Gemma4> {
        match self {
            ModelRef::Gemma4(m) => Some(m),
            ModelRef::Llama(_) => None,
        }
    }

    /// The Llama-family model, if it is one.
    pub fn llama(self) -> Option<&'a Llama> {
        match self {
            ModelRef::Llama(m) => Some(m),
            ModelRef::Gemma4(_) => None,
        }
    }

    /// The plan for the model's kv layout.
    pub fn plan(self) -> &'a ModelPlan {
        match self {
            ModelRef::Gemma4(m) => &m.plan,
            ModelRef::Llama(m) => &m.plan,
        }
    }

    /// Where the model's multi-token passes are evaluated before they go on (see
    /// [`barrier`]).
    pub fn barrier(self) -> barrier::Barrier {
        use segments::Staged;
        match self {
            ModelRef::Gemma4(m) => m.barrier(),
            ModelRef::Llama(m) => m.barrier(),
        }
    }

    /// The kv layout the plan was resolved with.
    pub fn kv_layout(self) -> &'a KvLayout {
        match self {
            ModelRef::Gemma4(m) => &m.kv_layout,
            ModelRef::Llama(m) => &m.kv_layout,
        }
    }

    /// vocab_size.
    pub fn vocab_size(self) -> usize {
        match self {
            ModelRef::Gemma4(m) => m.config.vocab_size,
            ModelRef::Llama(m) => m.config.vocab_size,
        }
    }

    /// eos_token_id, as a list.
    pub fn eos_token_ids(self) -> &'a [u32] {
        match self {
            ModelRef::Gemma4(m) => &m.config.eos_token_ids,
            ModelRef::Llama(m) => &m.config.eos_token_ids,
        }
    }

    /// bos_token_id.
    pub fn bos_token_id(self) -> Option<u32> {
        match self {
            ModelRef::Gemma4(m) => m.config.bos_token_id,
            ModelRef::Llama(m) => m.config.bos_token_id,
        }
    }

    /// The activation dtype.
    pub fn dtype(self) -> mlx_rs::Dtype {
        match self {
            ModelRef::Gemma4(m) => m.weights.dtype,
            ModelRef::Llama(m) => m.weights.dtype,
        }
    }

    /// Bytes of all weight arrays.
    pub fn weight_bytes(self) -> usize {
        match self {
            ModelRef::Gemma4(m) => m.weights.nbytes(),
            ModelRef::Llama(m) => m.weights.nbytes(),
        }
    }

    /// Empty float caches: what the first prefill runs on.
    pub fn float_caches(self, batch: usize) -> Vec<AnyCache> {
        match self {
            ModelRef::Gemma4(m) => m.float_caches(batch),
            ModelRef::Llama(m) => m.float_caches(batch),
        }
    }

    /// Empty caches of the plan's signatures.
    pub fn planned_caches(self, batch: usize) -> Vec<AnyCache> {
        match self {
            ModelRef::Gemma4(m) => m.planned_caches(batch),
            ModelRef::Llama(m) => m.planned_caches(batch),
        }
    }
}

/// A loaded model of any family, shared by the implementations built over it.
#[derive(Debug, Clone)]
pub enum Loaded {
    /// Gemma 4.
    Gemma4(Rc<Gemma4>),
    /// The Llama family.
    Llama(Rc<Llama>),
}

impl Loaded {
    /// Loads a model folder of the family its `config.json` names (`model_type`).
    pub fn load(
        dir: &Path,
        kv_layout: KvLayout,
        on_file: impl FnMut(usize, usize),
    ) -> Result<Self> {
        Ok(match family_of_file(&dir.join("config.json"))? {
            Family::Gemma4 => Loaded::Gemma4(Rc::new(Gemma4::load(dir, kv_layout, on_file)?)),
            Family::Llama => Loaded::Llama(Rc::new(Llama::load(dir, kv_layout, on_file)?)),
        })
    }

    /// Builds a model from tensors in memory (canonical names), e.g. a synthetic twin.
    pub fn from_tensors(
        config: AnyConfig,
        kv_layout: KvLayout,
        tensors: impl IntoIterator<Item = (String, Array)>,
    ) -> Result<Self> {
        Ok(match config {
            AnyConfig::Gemma4(c) => {
                Loaded::Gemma4(Rc::new(Gemma4::from_tensors(c, kv_layout, tensors)?))
            }
            AnyConfig::Llama(c) => {
                Loaded::Llama(Rc::new(Llama::from_tensors(c, kv_layout, tensors)?))
            }
        })
    }

    /// The borrowed form.
    pub fn as_ref(&self) -> ModelRef<'_> {
        match self {
            Loaded::Gemma4(m) => ModelRef::Gemma4(m),
            Loaded::Llama(m) => ModelRef::Llama(m),
        }
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.as_ref().family()
    }

    /// The plan.
    pub fn plan(&self) -> &ModelPlan {
        self.as_ref().plan()
    }

    /// The family's monolith over this model.
    pub fn monolith(&self) -> Box<dyn LanguageModel> {
        match self {
            Loaded::Gemma4(m) => Box::new(gemma4::monolith::Gemma4Monolith::new(m.clone())),
            Loaded::Llama(m) => Box::new(llama::monolith::LlamaMonolith::new(m.clone())),
        }
    }
}

/// A validated config of any family.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyConfig {
    /// Gemma 4.
    Gemma4(Gemma4Config),
    /// The Llama family.
    Llama(LlamaConfig),
}

impl AnyConfig {
    /// Reads and validates `path` (a `config.json`) as the family its `model_type` names.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_json_str(&path.display().to_string(), &text)
    }

    /// Parses and validates the text of a config.json; `file` names it in errors.
    pub fn from_json_str(file: &str, text: &str) -> Result<Self> {
        let value = crate::json::parse(file, text)?;
        Ok(match family_of(file, &value)? {
            Family::Gemma4 => AnyConfig::Gemma4(Gemma4Config::from_value(file, &value)?),
            Family::Llama => AnyConfig::Llama(LlamaConfig::from_value(file, &value)?),
        })
    }

    /// The family.
    pub fn family(&self) -> Family {
        match self {
            AnyConfig::Gemma4(_) => Family::Gemma4,
            AnyConfig::Llama(_) => Family::Llama,
        }
    }

    /// num_hidden_layers.
    pub fn num_hidden_layers(&self) -> usize {
        match self {
            AnyConfig::Gemma4(c) => c.num_hidden_layers,
            AnyConfig::Llama(c) => c.num_hidden_layers,
        }
    }

    /// vocab_size.
    pub fn vocab_size(&self) -> usize {
        match self {
            AnyConfig::Gemma4(c) => c.vocab_size,
            AnyConfig::Llama(c) => c.vocab_size,
        }
    }

    /// The number of KV caches (donor layers).
    pub fn num_caches(&self) -> usize {
        match self {
            AnyConfig::Gemma4(c) => c.first_shared_layer(),
            AnyConfig::Llama(c) => c.num_hidden_layers,
        }
    }

    /// The Gemma 4 config, if it is one.
    pub fn gemma4(&self) -> Option<&Gemma4Config> {
        match self {
            AnyConfig::Gemma4(c) => Some(c),
            AnyConfig::Llama(_) => None,
        }
    }

    /// Seeded random tensors for this config (floats in `dtype`), and the quantization
    /// map describing them (see [`crate::synth::random_tensors_as`]).
    pub fn random_tensors(
        &self,
        opts: crate::synth::SynthOptions,
        dtype: mlx_rs::Dtype,
    ) -> Result<(
        std::collections::BTreeMap<String, Array>,
        Option<crate::quantization::QuantizationMap>,
    )> {
        match self {
            AnyConfig::Gemma4(c) => crate::synth::random_tensors_as(c, opts, dtype),
            AnyConfig::Llama(c) => llama::synth::random_tensors_as(c, opts, dtype),
        }
    }

    /// The same config with `quantization` set (the map random tensors came with).
    pub fn with_quantization(mut self, q: Option<crate::quantization::QuantizationMap>) -> Self {
        match &mut self {
            AnyConfig::Gemma4(c) => c.quantization = q,
            AnyConfig::Llama(c) => c.quantization = q,
        }
        self
    }

    /// Whether the model has MoE experts (whose CPU `gather_mm` takes float32 only).
    pub fn has_moe(&self) -> bool {
        matches!(self, AnyConfig::Gemma4(c) if c.moe.is_some())
    }

    /// The sliding window, for families that have one.
    pub fn sliding_window(&self) -> Option<usize> {
        match self {
            AnyConfig::Gemma4(c) => Some(c.sliding_window),
            AnyConfig::Llama(_) => None,
        }
    }

    /// Writes a synthetic model folder (weights and config.json) in the family's layout.
    pub fn write_folder(
        &self,
        dir: &Path,
        tensors: &std::collections::BTreeMap<String, Array>,
        quant: Option<&crate::quantization::QuantizationMap>,
    ) -> Result<()> {
        match self {
            AnyConfig::Gemma4(c) => crate::synth::write_folder(dir, c, tensors, quant),
            AnyConfig::Llama(c) => llama::synth::write_folder(dir, c, tensors, quant),
        }
    }

    /// The shrunk twin (same plan, small dimensions).
    pub fn twin(&self) -> Self {
        match self {
            AnyConfig::Gemma4(c) => AnyConfig::Gemma4(crate::synth::twin(c)),
            AnyConfig::Llama(c) => AnyConfig::Llama(llama::synth::twin(c)),
        }
    }
}

/// The family a parsed config.json belongs to, by its top-level `model_type` (absent:
/// Gemma 4, whose text configs may omit it).
pub fn family_of(file: &str, value: &Value) -> Result<Family> {
    let top = crate::json::Obj::new(file, "", value)?;
    match top.opt_str("model_type")? {
        None | Some("gemma4" | "gemma4_text" | "gemma4_unified") => Ok(Family::Gemma4),
        Some("llama" | "qwen3") => Ok(Family::Llama),
        Some(other) => Err(top.err(
            "model_type",
            format!(
                "unsupported model type {other:?}; expected gemma4, gemma4_text, \
                 gemma4_unified, llama or qwen3"
            ),
        )),
    }
}

/// The family of the config.json at `path`.
pub fn family_of_file(path: &Path) -> Result<Family> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let file = path.display().to_string();
    family_of(&file, &crate::json::parse(&file, &text)?)
}
