//! The MLA family (`model_type` deepseek_v32, glm_moe_dsa): multi-head latent attention
//! with DeepSeek Sparse Attention's indexer, grouped-routing MoE; the loaded model
//! ([`Mla`]), its config, weights, building blocks, plan, monolith and synthetic twins.

pub mod blocks;
pub mod config;
pub mod family;
pub mod monolith;
pub mod plan;
pub mod step;
pub mod synth;
pub mod weights;

pub use config::{MlaConfig, MlaKind, MlaRope};
pub use family::FAMILY;

/// The id MLA-family plans carry.
pub const FAMILY_ID: FamilyId = FamilyId("mla");

use crate::cache::{AnyCache, MlaCache, MlaGeometry};
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::nn::Rope;
use crate::options::ExecOptions;
use crate::plan::{FamilyId, ModelPlan};
use crate::signature::CacheSignature;
use weights::MlaWeights;

/// A loaded MLA-family model: config, resolved plan, weights and load-time constants.
#[derive(Debug, Clone)]
pub struct Mla {
    /// The validated config.
    pub config: MlaConfig,
    /// The kv layout the plan was resolved with (MLA caches are never quantized).
    pub kv_layout: KvLayout,
    /// The plan.
    pub plan: ModelPlan,
    /// The weights.
    pub weights: MlaWeights,
    /// The RoPE over `qk_rope_head_dim` dims (attention and indexer alike).
    pub rope: Rope,
    /// rms_norm_eps as the C float MLX receives.
    pub eps: f32,
    /// The attention scale ([`MlaConfig::attention_scale`]).
    pub scale: f64,
    /// How it executes.
    pub options: ExecOptions,
}

impl Mla {
    /// Builds the model from parts already read and checked; `plan` resolved from
    /// `config` for `kv_layout` ([`plan::resolve`]).
    pub fn new(
        config: MlaConfig,
        kv_layout: KvLayout,
        weights: MlaWeights,
        plan: ModelPlan,
        options: ExecOptions,
    ) -> Result<Self> {
        let dims = config.qk_rope_head_dim;
        let rope = match config.rope {
            MlaRope::Default { theta } => Rope::Default {
                dims: dims as i32,
                base: theta as f32,
            },
            MlaRope::Linear { theta, factor } => Rope::Linear {
                dims: dims as i32,
                base: theta as f32,
                scale: (1.0 / factor) as f32,
            },
            MlaRope::Yarn { theta, scaling } => Rope::yarn(dims, theta, scaling)?,
        };
        Ok(Mla {
            eps: config.rms_norm_eps as f32,
            scale: config.attention_scale(),
            config,
            kv_layout,
            plan,
            weights,
            rope,
            options,
        })
    }

    /// The geometry of a cache of signature `signature` for `batch` rows.
    pub fn cache_geometry(&self, signature: CacheSignature, batch: usize) -> MlaGeometry {
        MlaGeometry {
            batch,
            latent: self.config.kv_lora_rank,
            rope: self.config.qk_rope_head_dim,
            index: matches!(signature, CacheSignature::Mla { indexer: true })
                .then_some(self.config.indexer.head_dim),
            dtype_bytes: crate::memory::dtype_bytes(self.weights.dtype) as usize,
        }
    }

    /// Empty caches of the plan's signatures (MLA caches are float, so these are also
    /// what the first prefill runs on).
    pub fn planned_caches(&self, batch: usize) -> Vec<AnyCache> {
        self.plan
            .layers
            .iter()
            .map(|l| AnyCache::Mla(MlaCache::new(self.cache_geometry(l.cache, batch))))
            .collect()
    }

    /// Checks that `caches` fit this model: one MLA cache per layer, of its signature.
    pub fn check_caches(&self, caches: &[AnyCache]) -> Result<()> {
        let expected = self.plan.num_caches();
        if caches.len() != expected {
            return Err(Error::Request(format!(
                "the model has {expected} caches (one per layer), {} were given",
                caches.len()
            )));
        }
        for (i, (c, l)) in caches.iter().zip(&self.plan.layers).enumerate() {
            if c.signature() != l.cache {
                return Err(Error::Cache {
                    cache: i,
                    message: format!("is {} but layer {i} needs {}", c.signature(), l.cache),
                });
            }
        }
        Ok(())
    }
}
