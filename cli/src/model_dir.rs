//! A model folder: its config, weight catalog (headers only), kv layout choice and plan,
//! loading with a progress bar, and choosing the implementation.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use runtime::family::WeightFacts;
use runtime::kv_layout::KvLayout;
use runtime::model::{AnyConfig, LanguageModel, Loaded, Resolved};
use runtime::options::ExecOptions;
use runtime::plan::ModelPlan;
use runtime::quantization::QuantSpec;
use runtime::registry::{ImplChoice, Registry};
use runtime::weights::catalog::Catalog;

/// `--kv`: which KV caches to quantize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvChoice {
    /// Every cache in float.
    Float,
    /// The folder's kv_config.json.
    Config,
    /// Every cache at this many bits, group 64.
    Bits(u32),
}

impl FromStr for KvChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "float" => Ok(KvChoice::Float),
            "config" => Ok(KvChoice::Config),
            _ => s.parse::<u32>().map(KvChoice::Bits).map_err(|_| {
                format!("expected float, config or a bit width (2, 4, 8), found {s:?}")
            }),
        }
    }
}

/// `--impl`: auto, monolith, generated, or a registered implementation id.
pub fn parse_impl(s: &str) -> Result<ImplChoice, String> {
    match s {
        "" => Err("expected auto, monolith, generated or an implementation id".into()),
        "auto" => Ok(ImplChoice::Auto),
        "monolith" => Ok(ImplChoice::Monolith),
        "generated" => Ok(ImplChoice::Generated),
        id => Ok(ImplChoice::Declared(id.to_owned())),
    }
}

/// The registry of every generated implementation this binary carries.
pub fn registry() -> Result<Registry> {
    Ok(Registry::new(generated::implementations())?)
}

/// An opened model folder (config read, nothing loaded).
#[derive(Debug)]
pub struct ModelDir {
    /// The folder.
    pub dir: PathBuf,
    /// Its config (the family its `model_type` names).
    pub config: AnyConfig,
}

impl ModelDir {
    /// Opens `dir`: it must be a folder with a config.json.
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.exists() {
            bail!("model folder {} does not exist", dir.display());
        }
        if !dir.is_dir() {
            bail!("{} is not a folder", dir.display());
        }
        let path = dir.join("config.json");
        if !path.is_file() {
            bail!("{} has no config.json", dir.display());
        }
        let config = AnyConfig::from_file(&path)?;
        Ok(ModelDir {
            dir: dir.to_owned(),
            config,
        })
    }

    /// The folder's kv_config.json, if it has one.
    pub fn kv_config_path(&self) -> Option<PathBuf> {
        Some(self.dir.join("kv_config.json")).filter(|p| p.is_file())
    }

    /// The kv layout `choice` asks for; `None` is the folder's kv_config.json when it has
    /// one, else float caches.
    pub fn kv_layout(&self, choice: Option<KvChoice>) -> Result<KvLayout> {
        let choice = choice.unwrap_or(if self.kv_config_path().is_some() {
            KvChoice::Config
        } else {
            KvChoice::Float
        });
        match choice {
            KvChoice::Float => Ok(KvLayout::float()),
            KvChoice::Config => {
                let path = self.kv_config_path().with_context(|| {
                    format!("--kv config: {} has no kv_config.json", self.dir.display())
                })?;
                Ok(KvLayout::from_file(&path)?)
            }
            KvChoice::Bits(bits) => uniform_layout(&self.config, bits),
        }
    }

    /// The plan for `layout`, with the weight facts of `catalog` (as every shipped
    /// checkpoint has them when there are no weights): for what needs no load.
    pub fn plan(&self, catalog: Option<&Catalog>, layout: &KvLayout) -> Result<ModelPlan> {
        let facts = catalog.map_or(WeightFacts::AsShipped, WeightFacts::Tensors);
        Ok(self.config.resolve(layout, facts)?)
    }

    /// The weight catalog (headers only).
    pub fn catalog(&self) -> Result<Catalog> {
        Ok(Catalog::open(&self.dir)?)
    }

    /// The folder planned for `layout`: its tensors catalogued (headers only) and the
    /// plan resolved once, for admission, inspection and the load.
    pub fn resolve(&self, layout: KvLayout) -> Result<Resolved> {
        Ok(Resolved::open(&self.dir, layout)?)
    }

    /// The tokens that end generation, as mlx-lm chooses them: generation_config.json's
    /// `eos_token_id` (a number or a list) when it gives one, else the config's
    /// (`config_eos`), plus the tokenizer's `eos_token`. A chat model's end-of-turn token
    /// is often only in one of these.
    pub fn stop_tokens(&self, config_eos: &[u32], tokenizer: &Tokenizer) -> Result<Vec<u32>> {
        stop_tokens(&self.dir, config_eos, tokenizer)
    }

    /// Loads the weights of `resolved` (this folder, planned), with a progress bar on
    /// stderr when it is a terminal.
    pub fn load(&self, resolved: Resolved, options: ExecOptions) -> Result<Loaded> {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new_spinner();
            bar.set_message(format!("loading {}", self.dir.display()));
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        } else {
            ProgressBar::hidden()
        };
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} files")
            .expect("a valid template")
            .progress_chars("=> ");
        let started = std::time::Instant::now();
        let model = resolved.load(options, &mut |done, total| {
            if bar.length().is_none() {
                bar.set_style(style.clone());
                bar.set_length(total as u64);
            }
            bar.set_position(done as u64);
        });
        bar.finish_and_clear();
        let model = model?;
        tracing::info!(
            "loaded {} in {:.2} s",
            self.dir.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(model)
    }
}

/// [`ModelDir::stop_tokens`] of the folder `dir`.
pub fn stop_tokens(dir: &Path, config_eos: &[u32], tokenizer: &Tokenizer) -> Result<Vec<u32>> {
    let path = dir.join("generation_config.json");
    let mut ids = config_eos.to_vec();
    if path.is_file() {
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not valid JSON", path.display()))?;
        let bad = || {
            anyhow::anyhow!(
                "{}: `eos_token_id` must be a token id or a list of them",
                path.display()
            )
        };
        let id = |x: &serde_json::Value| {
            x.as_u64()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(bad)
        };
        match v.get("eos_token_id") {
            // mlx-lm skips falsy values (`if eos_token_id := ...`): null, 0, [].
            None | Some(serde_json::Value::Null) => {}
            Some(x) if x.as_u64() == Some(0) => {}
            Some(serde_json::Value::Array(list)) if !list.is_empty() => {
                ids = list.iter().map(id).collect::<Result<_>>()?;
            }
            Some(serde_json::Value::Array(_)) => {}
            Some(x) => ids = vec![id(x)?],
        }
    }
    if let Some(eos) = tokenizer.eos_token_id()
        && !ids.contains(&eos)
    {
        ids.push(eos);
    }
    Ok(ids)
}

/// Every cache of `config` at `bits`, group 64 (`--kv BITS`).
pub fn uniform_layout(config: &AnyConfig, bits: u32) -> Result<KvLayout> {
    if ![2, 4, 8].contains(&bits) {
        bail!("--kv {bits}: KV caches support 2, 4 or 8 bits");
    }
    let quant = QuantSpec {
        bits,
        group_size: 64,
    };
    Ok(KvLayout::uniform(config.num_caches(), quant))
}

/// The implementation `choice` selects for `model`.
pub fn select(model: Loaded, choice: &ImplChoice) -> Result<Box<dyn LanguageModel>> {
    Ok(registry()?.select(model, choice)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> Tokenizer {
        let json = serde_json::to_string(&crate::synth::tokenizer_json(512).unwrap()).unwrap();
        let config = crate::synth::tokenizer_config_json().to_string();
        Tokenizer::from_parts(
            "tokenizer.json",
            json.as_bytes(),
            Some(("tokenizer_config.json", &config)),
            None,
        )
        .unwrap()
    }

    #[test]
    fn stop_tokens_follow_mlx_lm_generation_config_then_the_tokenizer_eos() {
        let dir = std::env::temp_dir().join(format!("mlx-aot-stop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = tokenizer();
        let eos = t
            .eos_token_id()
            .expect("the synthetic tokenizer names <eos>");
        // No generation_config.json: the config's, plus the tokenizer's eos once.
        let _ = std::fs::remove_file(dir.join("generation_config.json"));
        assert_eq!(stop_tokens(&dir, &[7, eos], &t).unwrap(), vec![7, eos]);
        // A list replaces the config's.
        std::fs::write(
            dir.join("generation_config.json"),
            r#"{"eos_token_id": [106, 9]}"#,
        )
        .unwrap();
        assert_eq!(stop_tokens(&dir, &[7], &t).unwrap(), vec![106, 9, eos]);
        std::fs::write(dir.join("generation_config.json"), r#"{"eos_token_id": 5}"#).unwrap();
        assert_eq!(stop_tokens(&dir, &[7], &t).unwrap(), vec![5, eos]);
        // A bad value names the file and the key.
        std::fs::write(
            dir.join("generation_config.json"),
            r#"{"eos_token_id": "x"}"#,
        )
        .unwrap();
        let e = stop_tokens(&dir, &[7], &t).unwrap_err().to_string();
        assert!(
            e.contains("generation_config.json") && e.contains("eos_token_id"),
            "{e}"
        );
        std::fs::write(dir.join("generation_config.json"), "{").unwrap();
        assert!(
            stop_tokens(&dir, &[7], &t)
                .unwrap_err()
                .to_string()
                .contains("not valid JSON")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
