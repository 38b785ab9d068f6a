//! A model's inputs: `config.json`, `kv_config.json` (optional: float caches without it)
//! and the weight facts, read from a folder of `generated/models/` or from a user's
//! downloaded checkpoint, then resolved into a plan.
//!
//! Weight facts of a `generated/models/` folder come from its `weight_facts.json` when it
//! has one (written by `--model-dir` from the checkpoint's safetensors headers), else they
//! are those of every shipped checkpoint: a `layer_scalar` on every layer.

use std::path::Path;

use runtime::family::WeightFacts;
use runtime::fingerprint::Fingerprint;
use runtime::kv_layout::KvLayout;
use runtime::model::AnyConfig;
use runtime::plan::ModelPlan;
use runtime::weights::catalog::Catalog;

use crate::error::{Error, Result};
use crate::ident::ModelName;

/// The model config.
pub const CONFIG_FILE: &str = "config.json";
/// The per-cache KV quantization (mlx-optiq).
pub const KV_CONFIG_FILE: &str = "kv_config.json";
/// Which layers carry a layer scalar, when not every layer does.
pub const WEIGHT_FACTS_FILE: &str = "weight_facts.json";

/// The texts of a model's inputs, as stored in its `generated/models/` folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTexts {
    /// `config.json`.
    pub config: String,
    /// `kv_config.json`, if the model has one.
    pub kv_config: Option<String>,
    /// `weight_facts.json`, if the model has one.
    pub weight_facts: Option<String>,
}

impl SourceTexts {
    /// Reads the inputs stored in `folder`.
    pub fn read(folder: &Path) -> Result<Self> {
        Ok(SourceTexts {
            config: read(&folder.join(CONFIG_FILE))?,
            kv_config: read_optional(&folder.join(KV_CONFIG_FILE))?,
            weight_facts: read_optional(&folder.join(WEIGHT_FACTS_FILE))?,
        })
    }

    /// Reads a user's downloaded model: its config and kv_config verbatim, and the weight
    /// facts read from its safetensors headers (written as `weight_facts.json`).
    pub fn read_checkpoint(dir: &Path) -> Result<Self> {
        let config_path = dir.join(CONFIG_FILE);
        let config_text = read(&config_path)?;
        let config = AnyConfig::from_json_str(&config_path.display().to_string(), &config_text)?;
        let kv_config = read_optional(&dir.join(KV_CONFIG_FILE))?;
        let catalog = Catalog::open(dir)?;
        // What the family reads from the tensors (Gemma 4: its layer scalars); nothing for
        // a family whose plan is the config and kv layout alone.
        let weight_facts = config.weight_facts_file(&catalog);
        Ok(SourceTexts {
            config: config_text,
            kv_config,
            weight_facts,
        })
    }

    /// The file names present, in header order.
    pub fn files(&self) -> Vec<&'static str> {
        let mut files = vec![CONFIG_FILE];
        if self.kv_config.is_some() {
            files.push(KV_CONFIG_FILE);
        }
        if self.weight_facts.is_some() {
            files.push(WEIGHT_FACTS_FILE);
        }
        files
    }
}

/// A model's inputs, validated and resolved.
#[derive(Debug, Clone)]
pub struct ModelSource {
    /// The model name (its folder under `generated/models/`).
    pub name: ModelName,
    /// The folder, relative to the repository root (`generated/models/<name>`).
    pub folder: String,
    /// The input files the plan was resolved from.
    pub files: Vec<&'static str>,
    /// The validated config (its `model_type` picks the family).
    pub config: AnyConfig,
    /// The kv layout (float when the model has no kv_config.json).
    pub kv_layout: KvLayout,
    /// The resolved plan.
    pub plan: ModelPlan,
}

impl ModelSource {
    /// Validates and resolves the inputs of model `name` stored in `folder` (a path
    /// relative to the repository root, used in messages and the generated header).
    pub fn from_texts(name: ModelName, folder: &str, texts: &SourceTexts) -> Result<Self> {
        let file = |f: &str| format!("{folder}/{f}");
        let config = AnyConfig::from_json_str(&file(CONFIG_FILE), &texts.config)?;
        let kv_layout = match &texts.kv_config {
            Some(text) => KvLayout::from_json_str(&file(KV_CONFIG_FILE), text)?,
            None => KvLayout::float(),
        };
        let facts_file = file(WEIGHT_FACTS_FILE);
        let facts = match &texts.weight_facts {
            Some(text) => WeightFacts::File {
                file: &facts_file,
                text,
            },
            None => WeightFacts::AsShipped,
        };
        let plan = config.resolve(&kv_layout, facts)?;
        Ok(ModelSource {
            name,
            folder: folder.to_owned(),
            files: texts.files(),
            config,
            kv_layout,
            plan,
        })
    }

    /// The plan's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.plan)
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}
