//! One forward step as generated MLA-family code runs it ([`crate::model::step`]).
//!
//! A layer's stages: before RoPE and the cache update ([`blocks::pre_attention`], or
//! [`blocks::pre_attention_indexed`] for a layer with its own indexer: input norm, the
//! query, latent and indexer projections) and after attention ([`blocks::attention_out`],
//! then [`blocks::dense_ffn`] or [`blocks::moe_ffn`]: output projection, residual,
//! post-attention norm, dense or routed SwiGLU, residual). RoPE, the cache update, the
//! indexer's top-k and attention ([`blocks::latent_attention`]) run eagerly between them.

use mlx_rs::Array;

use super::Mla;
use super::blocks;
use crate::cache::AnyCache;
use crate::error::Result;
use crate::model::segments::{self, Staged};
use crate::model::step::OneMask;
use crate::nn::mask::AttnMask;

pub use crate::model::segments::{DecodeSegments, Stage, args};

/// An MLA-family stage: `(model, layer, inputs) -> outputs`.
pub type StageFn = segments::StageFn<Mla>;

/// One forward step of an MLA-family model in progress.
pub type Step<'a> = crate::model::step::Step<'a, Mla>;

impl Staged for Mla {
    const FAMILY: crate::plan::FamilyId = super::FAMILY_ID;
    const EMBED: StageFn = embed_stage;
    const HEAD: StageFn = head_stage;

    fn monolith_forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
        super::monolith::forward(self, tokens, caches)
    }
}

impl OneMask for Mla {
    /// The top-k of the last layer with its own indexer, for the layers that share it.
    type Carry = Option<Array>;

    fn step_mask(caches: &[AnyCache], n: usize) -> Result<AttnMask> {
        blocks::mask(caches, n)
    }
}

/// `[tokens] -> [h]`.
fn embed_stage(m: &Mla, _layer: usize, args: &[Array]) -> Result<Vec<Array>> {
    Ok(vec![blocks::embed(m, &args[0])?])
}

/// `[h] -> [logits]`.
fn head_stage(m: &Mla, _layer: usize, args: &[Array]) -> Result<Vec<Array>> {
    Ok(vec![blocks::head(m, &args[0])?])
}
