//! One forward step of a family whose layers all attend under one mask (Llama, MLA), as
//! its generated code runs it: the residual stream entering layer 0, the mask, and the
//! stages of each layer, run directly or through their compiled segments
//! ([`crate::model::segments`]). Gemma 4, with two masks and per-layer inputs, has its
//! own.

use mlx_rs::Array;

use crate::cache::AnyCache;
use crate::config::LayerType;
use crate::error::Result;
use crate::model::segments::{
    self, CompiledStages, DecodeSegments, Stage, StageFn, Staged, compiled_stages,
};
use crate::nn::mask::AttnMask;

/// A [`Staged`] model whose every layer attends under the one mask of its first cache.
pub trait OneMask: Staged {
    /// What a step carries from layer to layer besides the residual stream (the MLA
    /// family's last indexer choice; nothing for Llama).
    type Carry: Default;

    /// The mask of an `n`-token step over `caches`.
    fn step_mask(caches: &[AnyCache], n: usize) -> Result<AttnMask>;
}

/// One forward step in progress.
pub struct Step<'a, M: OneMask> {
    /// The model.
    pub m: &'a M,
    /// The residual stream entering layer 0.
    pub h: Array,
    /// What the layers hand on to later ones ([`OneMask::Carry`]).
    pub carry: M::Carry,
    mask: AttnMask,
    segments: Option<&'a mut DecodeSegments>,
    /// Which stages run compiled when `segments` is set.
    stages: CompiledStages,
}

impl<'a, M: OneMask> Step<'a, M> {
    /// Starts a step over `tokens` `[B, L]`: embedding, the mask from the first cache.
    /// With `segments`, the step must be single-token and every stage runs compiled.
    pub fn new(
        m: &'a M,
        tokens: &Array,
        caches: &[AnyCache],
        mut segments: Option<&'a mut DecodeSegments>,
    ) -> Result<Self> {
        let h = segments::embed(m, segments.as_deref_mut(), tokens)?.remove(0);
        let mask = M::step_mask(caches, tokens.dim(-1) as usize)?;
        Ok(Step {
            m,
            h,
            carry: M::Carry::default(),
            mask,
            segments,
            stages: compiled_stages(m.options()),
        })
    }

    /// The mask of a layer type (every layer of these families is full attention).
    pub fn mask(&self, _t: LayerType) -> &AttnMask {
        &self.mask
    }

    /// The mask with the carried state, for a layer that reads one and updates the other.
    pub fn mask_and_carry(&mut self, _t: LayerType) -> (&AttnMask, &mut M::Carry) {
        (&self.mask, &mut self.carry)
    }

    /// Runs `stage` of layer `i` on `args`, compiled when this step has segments,
    /// returning exactly `N` outputs.
    pub fn run<const N: usize>(
        &mut self,
        i: usize,
        stage: Stage,
        f: StageFn<M>,
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
