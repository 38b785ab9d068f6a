//! The families this runtime reads: the one place that names them. Adding a family is a
//! folder under `model/` implementing [`crate::family`]'s traits and a line here.

use serde_json::Value;

use crate::error::Result;
use crate::family::Family;

/// Every family, in the order `model_type`s are matched.
pub static ALL: &[&dyn Family] = &[
    &crate::model::gemma4::FAMILY,
    &crate::model::llama::FAMILY,
    &crate::model::mla::FAMILY,
];

/// The family named `name` (`gemma4`, `llama`, `mla`).
pub fn by_name(name: &str) -> Option<&'static dyn Family> {
    ALL.iter().copied().find(|f| f.name() == name)
}

/// The ids of every family's monolith.
pub fn monolith_ids() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|f| f.monolith_id())
}

/// The family a parsed config.json belongs to, by its top-level `model_type`; an error
/// naming the file, the key and every type this runtime reads otherwise.
pub fn of_config(file: &str, value: &Value) -> Result<&'static dyn Family> {
    let top = crate::json::Obj::new(file, "", value)?;
    let found = match top.opt_str("model_type")? {
        None => ALL.iter().find(|f| f.reads_untyped_configs()),
        Some(t) => ALL.iter().find(|f| f.model_types().contains(&t)),
    };
    if let Some(f) = found {
        return Ok(*f);
    }
    let known: Vec<&str> = ALL.iter().flat_map(|f| f.model_types()).copied().collect();
    let what = match top.opt_str("model_type")? {
        Some(t) => format!("unsupported model type {t:?}"),
        None => "no model_type".to_owned(),
    };
    Err(top.err(
        "model_type",
        format!("{what}; expected one of {}", known.join(", ")),
    ))
}

/// The family of the config.json at `path`.
pub fn of_config_file(path: &std::path::Path) -> Result<&'static dyn Family> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::Error::io(path, e))?;
    let file = path.display().to_string();
    of_config(&file, &crate::json::parse(&file, &text)?)
}
