//! Gemma 4 text: its config, plan, weights, building blocks, monolith, the step generated
//! code runs, synthetic twins, and the family's trait implementations.

pub mod blocks;
pub mod config;
pub mod family;
pub mod monolith;
pub mod plan;
pub mod step;
pub mod synth;
pub mod weights;

pub use config::{Gemma4Config, MoeConfig};
pub use family::{FAMILY, MONOLITH_ID};

use crate::cache::{AnyCache, CacheGeometry};
use crate::config::LayerType;
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::nn::Rope;
use crate::options::ExecOptions;
use crate::plan::{FamilyId, ModelPlan};
use weights::Gemma4Weights;

/// The id Gemma 4 plans carry.
pub const FAMILY_ID: FamilyId = FamilyId("gemma4");

/// A loaded Gemma 4 model: config, resolved plan, weights and load-time constants.
/// Shared (behind an `Rc`) by the monolith and generated implementations.
#[derive(Debug, Clone)]
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
    /// How it executes.
    pub options: ExecOptions,
}

impl Gemma4 {
    /// Builds the model from parts already read and checked; `plan` resolved from
    /// `config` for `kv_layout` ([`plan::resolve`]).
    pub fn new(
        config: Gemma4Config,
        kv_layout: KvLayout,
        weights: Gemma4Weights,
        plan: ModelPlan,
        options: ExecOptions,
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
            options,
        })
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
            dtype_bytes: crate::memory::dtype_bytes(self.weights.dtype) as usize,
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
