//! One forward step as generated Llama-family code runs it ([`crate::model::step`]).
//!
//! A layer's stages: before RoPE and the cache update (input norm, projections, q/k
//! norms) and after attention (output projection, residual, post-attention norm, SwiGLU
//! MLP, residual). RoPE, cache updates and attention run eagerly between them.

use mlx_rs::Array;

use super::Llama;
use super::blocks;
use crate::cache::AnyCache;
use crate::error::Result;
use crate::model::segments::{self, Staged};
use crate::model::step::OneMask;
use crate::nn::mask::AttnMask;

pub use crate::model::segments::{
    CompiledStages, DecodeSegments, Segment, Stage, args, compiled_stages, compiles,
};

/// A Llama-family stage: `(model, layer, inputs) -> outputs`.
pub type StageFn = segments::StageFn<Llama>;

/// One forward step of a Llama-family model in progress.
pub type Step<'a> = crate::model::step::Step<'a, Llama>;

impl Staged for Llama {
    const FAMILY: crate::plan::FamilyId = super::FAMILY_ID;
    const EMBED: StageFn = embed_stage;
    const HEAD: StageFn = head_stage;

    fn monolith_forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
        super::monolith::forward(self, tokens, caches)
    }
}

impl OneMask for Llama {
    type Carry = ();

    fn step_mask(caches: &[AnyCache], n: usize) -> Result<AttnMask> {
        blocks::mask(caches, n as i32)
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
