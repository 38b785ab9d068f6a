//! A model folder: its config, weight catalog (headers only), kv layout choice and plan,
//! loading with a progress bar, and choosing the implementation.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use runtime::config::Gemma4Config;
use runtime::kv_layout::KvLayout;
use runtime::model::gemma4::weights::weight_facts;
use runtime::model::{AnyConfig, LanguageModel, Loaded};
use runtime::plan::{ModelPlan, WeightFacts};
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

    /// The Gemma 4 config, or an error saying `what` supports only Gemma 4.
    pub fn gemma4(&self, what: &str) -> Result<&Gemma4Config> {
        self.config.gemma4().with_context(|| {
            format!(
                "{what} supports Gemma 4 models only; {} is a {} model",
                self.dir.display(),
                self.config.family().name()
            )
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

    /// The weight catalog (headers only).
    pub fn catalog(&self) -> Result<Catalog> {
        Ok(Catalog::open(&self.dir)?)
    }

    /// The plan for `layout`, with the weight facts of `catalog` (every layer scalar
    /// present when there are no weights).
    pub fn plan(&self, catalog: Option<&Catalog>, layout: &KvLayout) -> Result<ModelPlan> {
        match &self.config {
            AnyConfig::Gemma4(config) => {
                let facts = match catalog {
                    Some(c) => weight_facts(config, c),
                    None => WeightFacts::all_scalars(config.num_hidden_layers),
                };
                Ok(ModelPlan::resolve(config, layout, &facts)?)
            }
            AnyConfig::Llama(config) => Ok(ModelPlan::resolve_llama(config, layout)?),
        }
    }

    /// Loads the weights, with a progress bar on stderr when it is a terminal.
    pub fn load(&self, layout: KvLayout) -> Result<Loaded> {
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
        let model = Loaded::load(&self.dir, layout, |done, total| {
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

/// Bytes of one activation element of the weights in `catalog`: the float type of the
/// embedding table (or of its scales, when quantized), as the loader decides it.
pub fn activation_dtype_bytes(catalog: &Catalog) -> u64 {
    catalog
        .get("embed_tokens.scales")
        .or_else(|| catalog.get("embed_tokens.weight"))
        .map_or(2, |e| e.info.dtype.size())
}
