//! Gemma 4 text: the loaded model ([`Gemma4`]), its building blocks and the monolith.

pub mod blocks;
pub mod monolith;
pub mod step;
pub mod weights;

use std::path::Path;

use crate::cache::{AnyCache, CacheGeometry};
use crate::config::{Gemma4Config, LayerType};
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::nn::Rope;
use crate::plan::ModelPlan;
use crate::weights::catalog::Catalog;
use weights::{Gemma4Weights, weight_facts};

/// A loaded Gemma 4 model: config, resolved plan, weights and load-time constants.
/// Shared (behind an `Rc`) by the monolith and generated implementations.
#[derive(Debug)]
pub struct Gemma4 {
    /// The validated config.
    pub config: Gemma4Config,
    /// The kv layout the plan was resolved with.
    pub kv_layout: KvLayout,
    /// The plan for the kv layout (the caches the model runs on after the first prefill).
    pub plan: ModelPlan,
    /// The weights.
    pub weights: Gemma4Weights,
    /// RoPE of sliding layers.
    pub rope_sliding: Rope,
    /// RoPE of full layers.
    pub rope_full: Rope,
    /// rms_norm_eps as the C float MLX receives.
    pub eps: f32,
}

impl Gemma4 {
    /// Builds the model from parts already read and checked.
    pub fn new(
        config: Gemma4Config,
        kv_layout: KvLayout,
        weights: Gemma4Weights,
        plan: ModelPlan,
    ) -> Result<Self> {
        let rope_sliding = Rope::new(&config.rope_sliding, config.head_dim)?;
        let rope_full = Rope::new(&config.rope_full, config.global_head_dim)?;
        let eps = config.rms_norm_eps as f32;
        Ok(Gemma4 {
            config,
            kv_layout,
            plan,
            weights,
            rope_sliding,
            rope_full,
            eps,
        })
    }

    /// Loads a model folder: `config.json`, weights, and `kv_layout` (pass
    /// [`KvLayout::float`] for float caches throughout).
    pub fn load(
        dir: &Path,
        kv_layout: KvLayout,
        on_file: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let config = Gemma4Config::from_file(&dir.join("config.json"))?;
        let catalog = Catalog::open(dir)?;
        let facts = weight_facts(&config, &catalog);
        let plan = ModelPlan::resolve(&config, &kv_layout, &facts)?;
        let weights = Gemma4Weights::load(&config, &catalog, on_file)?;
        Gemma4::new(config, kv_layout, weights, plan)
    }

    /// Builds a model from tensors in memory (canonical names), e.g. a synthetic twin.
    pub fn from_tensors(
        config: Gemma4Config,
        kv_layout: KvLayout,
        tensors: impl IntoIterator<Item = (String, mlx_rs::Array)>,
    ) -> Result<Self> {
        let catalog = Catalog::from_arrays(tensors)?;
        let facts = weight_facts(&config, &catalog);
        let plan = ModelPlan::resolve(&config, &kv_layout, &facts)?;
        let weights = Gemma4Weights::load(&config, &catalog, |_, _| {})?;
        Gemma4::new(config, kv_layout, weights, plan)
    }

    /// The RoPE of a layer type.
    pub fn rope(&self, t: LayerType) -> &Rope {
        match t {
            LayerType::Sliding => &self.rope_sliding,
            LayerType::Full => &self.rope_full,
        }
    }

    /// The geometry of cache `cache` for `batch` rows.
    pub fn cache_geometry(&self, cache: usize, batch: usize) -> CacheGeometry {
        CacheGeometry {
            batch,
            kv_heads: self.config.kv_heads(cache),
            head_dim: self.config.head_dim_of(cache),
            dtype_bytes: self.weights.dtype.size(),
        }
    }

    /// Empty float caches (one per donor): what the first prefill runs on.
    pub fn float_caches(&self, batch: usize) -> Vec<AnyCache> {
        self.caches_for(&self.plan.with_float_caches(), batch)
    }

    /// Empty caches of the plan's signatures.
    pub fn planned_caches(&self, batch: usize) -> Vec<AnyCache> {
        self.caches_for(&self.plan, batch)
    }

    fn caches_for(&self, plan: &ModelPlan, batch: usize) -> Vec<AnyCache> {
        plan.layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.kv.is_donor())
            .map(|(i, l)| {
                AnyCache::new(
                    l.cache,
                    self.cache_geometry(i, batch),
                    self.config.sliding_window,
                )
            })
            .collect()
    }

    /// Checks that `caches` fit this model: one per donor, rings for sliding layers,
    /// growing caches for full layers (a sliding cache must never be a plain one).
    pub fn check_caches(&self, caches: &[AnyCache]) -> Result<()> {
        let expected = self.plan.num_caches();
        if caches.len() != expected {
            return Err(Error::Request(format!(
                "the model has {expected} KV caches (one per donor layer), {} were given",
                caches.len()
            )));
        }
        for (i, c) in caches.iter().enumerate() {
            let sliding = self.plan.layers[i].attention == LayerType::Sliding;
            if c.signature().is_rotating() != sliding {
                return Err(Error::Cache {
                    cache: i,
                    message: format!(
                        "is {} but layer {i} is {} attention",
                        c.signature(),
                        self.plan.layers[i].attention
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Bytes of an MLX dtype.
trait DtypeSize {
    fn size(&self) -> usize;
}

impl DtypeSize for mlx_rs::Dtype {
    fn size(&self) -> usize {
        use mlx_rs::Dtype::*;
        match self {
            Bool | Uint8 | Int8 => 1,
            Uint16 | Int16 | Float16 | Bfloat16 => 2,
            Uint32 | Int32 | Float32 => 4,
            _ => 8,
        }
    }
}
