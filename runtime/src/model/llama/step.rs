//! One forward step as generated Llama-family code runs it: the residual stream entering
//! layer 0, the mask, and the stages of each layer, run directly or through their
//! compiled segments (the same scheme as `gemma4::step`, whose switch it shares).
//!
//! A layer's stages: before RoPE and the cache update (input norm, projections, q/k
//! norms) and after attention (output projection, residual, post-attention norm, SwiGLU
//! MLP, residual). RoPE, cache updates and attention run eagerly between them.

use mlx_rs::Array;

use super::Llama;
use super::blocks;
use crate::cache::AnyCache;
use crate::config::LayerType;
use crate::error::Result;
use crate::model::segments::{self, Staged};
use crate::nn::mask::AttnMask;

pub use crate::model::segments::{
    CompiledStages, DecodeSegments, Segment, Stage, args, compiled_stages, compiles,
};

/// A Llama-family stage: `(model, layer, inputs) -> outputs`.
pub type StageFn = segments::StageFn<Llama>;

impl Staged for Llama {
    const FAMILY: crate::plan::FamilyId = super::FAMILY_ID;
    const EMBED: StageFn = embed_stage;
    const HEAD: StageFn = head_stage;

    fn monolith_forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
        super::monolith::forward(self, tokens, caches)
    }
}

/// One forward step in progress.
pub struct Step<'a> {
    /// The model.
    pub m: &'a Llama,
    /// The residual stream entering layer 0.
    pub h: Array,
    mask: AttnMask,
    segments: Option<&'a mut DecodeSegments>,
    /// Which stages run compiled when `segments` is set.
    stages: CompiledStages,
}

impl<'a> Step<'a> {
    /// Starts a step over `tokens` `[B, L]`: embedding, the mask from the first cache.
    /// With `segments`, the step must be single-token and every stage runs compiled.
    pub fn new(
        m: &'a Llama,
        tokens: &Array,
        caches: &[AnyCache],
        mut segments: Option<&'a mut DecodeSegments>,
    ) -> Result<Self> {
        let h = segments::embed(m, segments.as_deref_mut(), tokens)?.remove(0);
        let mask = blocks::mask(caches, tokens.dim(-1))?;
        Ok(Step {
            m,
            h,
            mask,
            segments,
            stages: compiled_stages(&m.options),
        })
    }

    /// The mask of a layer type (every Llama-family layer is full attention).
    pub fn mask(&self, _t: LayerType) -> &AttnMask {
        &self.mask
    }

    /// Runs `stage` of layer `i` on `args`, compiled when this step has segments,
    /// returning exactly `N` outputs.
    pub fn run<const N: usize>(
        &mut self,
        i: usize,
        stage: Stage,
        f: StageFn,
        args: &[&Array],
    ) -> Result<[Array; N]> {
        segments::run_stage(
            self.m,
            self.segments.as_deref_mut(),
            self.stages,
            i,
            stage,
            f,
            args,
        )
    }

    /// Final norm and head of the residual stream `h`.
    pub fn finish(self, h: &Array) -> Result<Array> {
        segments::head(self.m, self.segments, h)
    }
}

/// `[tokens] -> [h]`.
fn embed_stage(m: &Llama, _layer: usize, args: &[Array]) -> Result<Vec<Array>> {
    Ok(vec![blocks::embed(m, &args[0])?])
}

/// `[h] -> [logits]`.
fn head_stage(m: &Llama, _layer: usize, args: &[Array]) -> Result<Vec<Array>> {
    Ok(vec![blocks::head(m, &args[0])?])
}
