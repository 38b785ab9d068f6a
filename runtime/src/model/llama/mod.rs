//! The Llama family (`model_type` llama, qwen3, minicpm): the loaded model ([`Llama`]), its
//! config, weights, building blocks, monolith, the step generated code runs, and its
//! synthetic twins.

pub mod blocks;
pub mod config;
pub mod family;
pub mod monolith;
pub mod plan;
pub mod step;
pub mod synth;
pub mod weights;

pub use config::{LlamaConfig, LlamaKind, LlamaRope, MiniCpmScales};
pub use family::FAMILY;

/// The id Llama-family plans carry.
pub const FAMILY_ID: FamilyId = FamilyId("llama");

use crate::cache::{AnyCache, CacheGeometry};
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::nn::Rope;
use crate::nn::scaled::inv_sqrt_scale;
use crate::options::ExecOptions;
use crate::plan::{FamilyId, ModelPlan};
use blocks::Rotation;
use weights::LlamaWeights;

/// A loaded Llama-family model: config, resolved plan, weights and load-time constants.
/// Shared (behind an `Rc`) by the monolith and generated implementations.
#[derive(Debug, Clone)]
pub struct Llama {
    /// The validated config.
    pub config: LlamaConfig,
    /// The kv layout the plan was resolved with.
    pub kv_layout: KvLayout,
    /// The plan for the kv layout.
    pub plan: ModelPlan,
    /// The weights.
    pub weights: LlamaWeights,
    /// The RoPE of every layer.
    pub rope: Rotation,
    /// rms_norm_eps as the C float MLX receives.
    pub eps: f32,
    /// The attention scale `head_dim ** -0.5`.
    pub scale: f64,
    /// How it executes.
    pub options: ExecOptions,
}

impl Llama {
    /// Builds the model from parts already read and checked; `plan` resolved from
    /// `config` for `kv_layout` ([`plan::resolve`]).
    pub fn new(
        config: LlamaConfig,
        kv_layout: KvLayout,
        weights: LlamaWeights,
        plan: ModelPlan,
        options: ExecOptions,
    ) -> Result<Self> {
        let dims = config.head_dim as i32;
        let rope = match &config.rope {
            LlamaRope::Default { theta } => Rope::Default {
                dims,
                base: *theta as f32,
            },
            LlamaRope::Llama3 { theta, scaling } => {
                Rope::llama3(config.head_dim, *theta, *scaling)?
            }
            LlamaRope::Linear { theta, factor } => Rope::Linear {
                dims,
                base: *theta as f32,
                scale: (1.0 / factor) as f32,
            },
            LlamaRope::LongRope { theta, scaling, .. } => {
                Rope::long_rope(config.head_dim, *theta, scaling)?
            }
            LlamaRope::Yarn { theta, scaling } => Rope::yarn(config.head_dim, *theta, *scaling)?,
        };
        let rope = Rotation {
            rope,
            traditional: config.rope_traditional,
        };
        Ok(Llama {
            eps: config.rms_norm_eps as f32,
            scale: inv_sqrt_scale(config.head_dim),
            config,
            kv_layout,
            plan,
            weights,
            rope,
            options,
        })
    }

    /// The geometry of every cache for `batch` rows.
    pub fn cache_geometry(&self, batch: usize) -> CacheGeometry {
        CacheGeometry {
            batch,
            kv_heads: self.config.num_key_value_heads,
            head_dim: self.config.head_dim,
            dtype_bytes: crate::memory::dtype_bytes(self.weights.dtype) as usize,
        }
    }

    /// Empty float caches (one per layer): what the first prefill runs on.
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
            .map(|l| AnyCache::new(l.cache, self.cache_geometry(batch), 0))
            .collect()
    }

    /// Checks that `caches` fit this model: one growing cache per layer.
    pub fn check_caches(&self, caches: &[AnyCache]) -> Result<()> {
        let expected = self.plan.num_caches();
        if caches.len() != expected {
            return Err(Error::Request(format!(
                "the model has {expected} KV caches (one per layer), {} were given",
                caches.len()
            )));
        }
        for (i, c) in caches.iter().enumerate() {
            if c.signature().is_rotating() {
                return Err(Error::Cache {
                    cache: i,
                    message: format!("is {} but layer {i} is full attention", c.signature()),
                });
            }
        }
        Ok(())
    }
}
