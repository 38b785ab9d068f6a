//! The presets (`generated/models/<NAME>`: config.json and, where there is one,
//! kv_config.json), embedded in the binary so it works from any directory.

use anyhow::{Result, anyhow};
use runtime::kv_layout::KvLayout;
use runtime::model::AnyConfig;

/// One embedded preset.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// Its name (the folder name).
    pub name: &'static str,
    /// config.json.
    pub config: &'static str,
    /// kv_config.json, if the preset has one.
    pub kv_config: Option<&'static str>,
}

macro_rules! preset {
    ($name:literal) => {
        Preset {
            name: $name,
            config: include_str!(concat!("../../generated/models/", $name, "/config.json")),
            kv_config: None,
        }
    };
    ($name:literal, kv) => {
        Preset {
            name: $name,
            config: include_str!(concat!("../../generated/models/", $name, "/config.json")),
            kv_config: Some(include_str!(concat!(
                "../../generated/models/",
                $name,
                "/kv_config.json"
            ))),
        }
    };
}

/// Every preset, in name order.
pub const PRESETS: [Preset; 17] = [
    preset!("deepseek-v3.2"),
    preset!("gemma4-12b", kv),
    preset!("gemma4-26b-a4b", kv),
    preset!("gemma4-26b-a4b-float"),
    preset!("gemma4-31b"),
    preset!("gemma4-e2b"),
    preset!("gemma4-e4b", kv),
    preset!("gemma4-e4b-float"),
    preset!("glm-5"),
    preset!("glm-5-4l"),
    preset!("glm-5.2"),
    preset!("glm-5.2-4l"),
    preset!("llama-3.2-1b", kv),
    preset!("llama-3.2-1b-float"),
    preset!("minicpm-2b"),
    preset!("minicpm4-8b", kv),
    preset!("qwen3-0.6b"),
];

impl Preset {
    /// The preset called `name`.
    pub fn find(name: &str) -> Result<Preset> {
        PRESETS
            .iter()
            .find(|p| p.name == name)
            .copied()
            .ok_or_else(|| {
                let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
                anyhow!("unknown preset {name:?} (presets: {})", names.join(", "))
            })
    }

    /// Its config, parsed.
    pub fn config(&self) -> Result<AnyConfig> {
        Ok(AnyConfig::from_json_str(
            &format!("(embedded preset {})/config.json", self.name),
            self.config,
        )?)
    }

    /// Its kv layout (float when it has no kv_config.json).
    pub fn kv_layout(&self) -> Result<KvLayout> {
        match self.kv_config {
            Some(text) => Ok(KvLayout::from_json_str(
                &format!("(embedded preset {})/kv_config.json", self.name),
                text,
            )?),
            None => Ok(KvLayout::float()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every folder of generated/models is embedded, with its kv_config.json when it has one.
    #[test]
    fn every_preset_folder_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/models");
        let mut folders: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| e.path().join("config.json").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        folders.sort();
        let embedded: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        assert_eq!(folders, embedded);
        for p in PRESETS {
            let kv = root.join(p.name).join("kv_config.json");
            assert_eq!(kv.is_file(), p.kv_config.is_some(), "{}", p.name);
            p.config().unwrap();
            p.kv_layout().unwrap();
        }
        assert!(Preset::find("nope").is_err());
    }
}
