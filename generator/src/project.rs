//! Where generation reads and writes in the repository, and what one `cargo xtask
//! generate` decides: the model modules, the models' `mod.rs`, the registry, and (for a
//! user's checkpoint) the inputs copied into `generated/models/<name>/`.

use std::path::{Path, PathBuf};

use crate::emit::{self, ModuleSpec};
use crate::error::{Error, Result};
use crate::ident::ModelName;
use crate::registry;
use crate::source::{CONFIG_FILE, KV_CONFIG_FILE, ModelSource, SourceTexts, WEIGHT_FACTS_FILE};
use crate::write::FileSet;

/// The model folders (inputs), one per model.
pub const MODELS_DIR: &str = "generated/models";
/// The generated model modules.
pub const MODULES_DIR: &str = "generated/src/models";
/// The generated list of model modules.
pub const MODELS_MOD: &str = "generated/src/models/mod.rs";
/// The generated registry.
pub const REGISTRY: &str = "generated/src/registry.rs";
/// The presets shipped with the repository.
pub const PRESETS: [&str; 14] = [
    "gemma4-e2b",
    "gemma4-e4b",
    "gemma4-12b",
    "gemma4-26b-a4b",
    "gemma4-31b",
    "llama-3.2-1b",
    "qwen3-0.6b",
    "minicpm4-8b",
    "minicpm-2b",
    "glm-5",
    "glm-5-4l",
    "glm-5.2",
    "glm-5.2-4l",
    "deepseek-v3.2",
];

/// The command that regenerates everything.
pub const REGENERATE_ALL: &str = "cargo xtask generate --all";

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// One model of `generated/models/`.
    One(String),
    /// Every model of `generated/models/`.
    All,
    /// A user's downloaded checkpoint, added to `generated/models/<name>/`.
    Checkpoint {
        /// The checkpoint folder (config.json, kv_config.json if any, safetensors).
        dir: PathBuf,
        /// The name to give it.
        name: String,
    },
}

/// The outcome of planning a generation: every file it decides, and the models it
/// generated.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The files, to check or apply.
    pub files: FileSet,
    /// The models generated, with their resolved inputs.
    pub models: Vec<ModelSource>,
}

/// The module path of a model.
pub fn module_path(name: &ModelName) -> String {
    format!("{MODULES_DIR}/{}.rs", name.module())
}

/// The input folder of a model, relative to the repository root.
pub fn model_folder(name: &ModelName) -> String {
    format!("{MODELS_DIR}/{}", name.as_str())
}

/// The models of `generated/models/` under `root`, in name order.
pub fn model_names(root: &Path) -> Result<Vec<ModelName>> {
    let dir = root.join(MODELS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let is_dir = entry
            .file_type()
            .map_err(|e| Error::io(entry.path(), e))?
            .is_dir();
        if !is_dir {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        names.push(ModelName::new(&name)?);
    }
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Ok(names)
}

/// Reads and resolves model `name` of `generated/models/` under `root`.
pub fn read_model(root: &Path, name: &ModelName) -> Result<ModelSource> {
    let folder = model_folder(name);
    let texts = SourceTexts::read(&root.join(&folder))?;
    ModelSource::from_texts(name.clone(), &folder, &texts)
}

/// The text of a model's module.
pub fn module_text(source: &ModelSource) -> Result<String> {
    emit::model_module(ModuleSpec {
        name: &source.name,
        source_folder: &source.folder,
        source_files: &source.files,
        plan: &source.plan,
    })
}

/// Plans the generation `selection` in the repository at `root`. Nothing is written.
pub fn plan(root: &Path, selection: &Selection) -> Result<Generation> {
    let existing = model_names(root)?;
    let mut files = FileSet::new();
    let mut models = Vec::new();
    let mut listed = existing.clone();
    match selection {
        Selection::All => {
            for name in &existing {
                models.push(read_model(root, name)?);
            }
        }
        Selection::One(name) => {
            let name = ModelName::new(name)?;
            if !existing.contains(&name) {
                return Err(Error::UnknownModel {
                    name: name.as_str().to_owned(),
                    known: known(&existing),
                });
            }
            models.push(read_model(root, &name)?);
        }
        Selection::Checkpoint { dir, name } => {
            let name = ModelName::new(name)?;
            let texts = SourceTexts::read_checkpoint(dir)?;
            let folder = model_folder(&name);
            let source = ModelSource::from_texts(name.clone(), &folder, &texts)?;
            files.text(format!("{folder}/{CONFIG_FILE}"), texts.config.clone());
            let optional = [
                (KV_CONFIG_FILE, &texts.kv_config),
                (WEIGHT_FACTS_FILE, &texts.weight_facts),
            ];
            for (file, text) in optional {
                let path = format!("{folder}/{file}");
                match text {
                    Some(t) => files.text(path, t.clone()),
                    None => files.absent(path),
                }
            }
            models.push(source);
            if !listed.contains(&name) {
                listed.push(name);
                listed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            }
        }
    }
    // A model folder without a module would leave the registry naming a missing module:
    // generate those too.
    for other in &existing {
        let generated = models.iter().any(|m| m.name == *other);
        if !generated && !root.join(module_path(other)).exists() {
            models.push(read_model(root, other)?);
        }
    }
    for source in &models {
        files.text(module_path(&source.name), module_text(source)?);
    }
    for orphan in orphan_modules(root, &listed)? {
        files.absent(orphan);
    }
    files.text(MODELS_MOD, registry::models_mod(&listed)?);
    files.text(REGISTRY, registry::registry(&listed)?);
    Ok(Generation { files, models })
}

/// Module files of `generated/src/models/` whose model folder is gone.
fn orphan_modules(root: &Path, listed: &[ModelName]) -> Result<Vec<String>> {
    let dir = root.join(MODULES_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut orphans = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(module) = file.strip_suffix(".rs") else {
            continue;
        };
        if module != "mod" && !listed.iter().any(|n| n.module() == module) {
            orphans.push(format!("{MODULES_DIR}/{file}"));
        }
    }
    orphans.sort();
    Ok(orphans)
}

fn known(names: &[ModelName]) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    names
        .iter()
        .map(ModelName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}
