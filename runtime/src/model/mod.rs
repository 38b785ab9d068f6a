//! Models: the trait every implementation (monolith or generated) serves, and the
//! families.

pub mod gemma4;

use mlx_rs::Array;

use crate::cache::AnyCache;
use crate::error::Result;
use crate::plan::ModelPlan;

/// A language model implementation: one forward step over caches.
pub trait LanguageModel {
    /// Logits `[B, L, vocab]` (activation dtype) for `tokens` `[B, L]` int32, updating
    /// `caches` (one per donor layer).
    fn forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array>;

    /// The plan for the configured kv layout.
    fn plan(&self) -> &ModelPlan;

    /// The loaded model (config, weights, caches factory).
    fn gemma4(&self) -> &gemma4::Gemma4;

    /// The implementation id (`gemma4-monolith`, or a generated model's id).
    fn implementation(&self) -> &str;

    /// How many forward calls took a specialized fast path (0 for the monolith).
    fn fast_path_calls(&self) -> u64 {
        0
    }
}
