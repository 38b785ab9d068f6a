//! Models: the trait every implementation (monolith or generated) serves, and the
//! families' folders. The family-neutral handles on a loaded model are in
//! [`crate::family`] ([`Loaded`], [`FamilyModel`]); re-exported here.

pub mod barrier;
pub mod gemma4;
pub mod llama;
pub mod mla;
pub mod segments;
pub mod step;

use mlx_rs::Array;

use crate::cache::AnyCache;
use crate::error::Result;
use crate::plan::ModelPlan;

pub use crate::family::{AnyConfig, FamilyModel, Loaded, Resolved};

/// A loaded model of any family, borrowed.
pub type ModelRef<'a> = &'a dyn FamilyModel;

/// A language model implementation: one forward step over caches.
pub trait LanguageModel {
    /// Logits `[B, L, vocab]` (activation dtype) for `tokens` `[B, L]` int32, updating
    /// `caches` (one per donor layer).
    fn forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array>;

    /// The plan for the configured kv layout.
    fn plan(&self) -> &ModelPlan;

    /// The loaded model (config, weights, caches factory) of its family.
    fn loaded(&self) -> ModelRef<'_>;

    /// The implementation id (`gemma4-monolith`, or a generated model's id).
    fn implementation(&self) -> &str;

    /// How many forward calls took a specialized fast path (0 for the monolith).
    fn fast_path_calls(&self) -> u64 {
        0
    }
}
