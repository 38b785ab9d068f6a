//! A model folder: its config, weight catalog (headers only), kv layout choice and plan,
//! loading with a progress bar, and choosing the implementation.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

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
