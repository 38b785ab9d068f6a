//! Helpers shared by the generator's tests: the repository, the presets, and small
//! synthetic models built from a preset's config with a few keys replaced.

#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};

use generator::project;
use generator::{ModelName, ModelSource, SourceTexts};
use serde_json::Value;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("generator/ lives in the repository root")
        .to_owned()
}

/// A preset's inputs as checked in.
pub fn preset(name: &str) -> ModelSource {
    let name = ModelName::new(name).expect("preset name");
    project::read_model(&repo_root(), &name).expect("preset reads and resolves")
}

/// A preset's config.json, parsed.
pub fn preset_config_json(name: &str) -> Value {
    let path = repo_root()
        .join(project::MODELS_DIR)
        .join(name)
        .join("config.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("preset config")).expect("json")
}

/// `config` with `changes` applied (top-level keys).
pub fn with(mut config: Value, changes: Value) -> Value {
    for (k, v) in changes.as_object().expect("an object of changes") {
        config[k] = v.clone();
    }
    config
}

/// `layer_types` from a pattern of `s` (sliding) and `f` (full).
pub fn layer_types(pattern: &str) -> Value {
    pattern
        .chars()
        .map(|c| match c {
            's' => "sliding_attention",
            'f' => "full_attention",
            other => panic!("layer pattern takes s and f, found {other}"),
        })
        .collect::<Vec<_>>()
        .into()
}

/// A kv_config.json of `(cache, bits)` entries, group 64.
pub fn kv_config(entries: &[(usize, u32)]) -> String {
    let items: Vec<String> = entries
        .iter()
        .map(|(c, b)| format!("{{\"layer_idx\": {c}, \"bits\": {b}, \"group_size\": 64}}"))
        .collect();
    format!("[{}]\n", items.join(", "))
}

/// The inputs of a synthetic model.
pub fn texts(config: &Value, kv: Option<String>, facts: Option<&[bool]>) -> SourceTexts {
    SourceTexts {
        config: serde_json::to_string_pretty(config).expect("json"),
        kv_config: kv,
        weight_facts: facts.map(|f| {
            runtime::model::gemma4::plan::WeightFacts {
                layer_scalar: f.to_vec(),
            }
            .to_json()
        }),
    }
}

/// Resolves a synthetic model named `name`.
pub fn synthetic(name: &str, texts: &SourceTexts) -> generator::Result<ModelSource> {
    let name = ModelName::new(name).expect("test model name");
    let folder = format!("generator/tests/synthetic/{}", name.as_str());
    ModelSource::from_texts(name, &folder, texts)
}
