//! One forward step as generated Gemma 4 code runs it: the step's inputs (residual
//! stream, per-layer inputs, masks) and the stages of each layer (before the cache update:
//! norms, projections; after attention: output projection, feed-forward, per-layer input,
//! scalar), run directly or through their compiled segments (see
//! [`crate::model::segments`]).

use mlx_rs::Array;

use super::Gemma4;
use super::blocks::{self, Composition, StepInputs, StepMasks};
use crate::cache::AnyCache;
use crate::config::LayerType;
use crate::error::{Error, Result};
use crate::model::segments::{self, Staged};
use crate::nn::mask::AttnMask;
use crate::nn::{Rope, RopeOffset};

pub use crate::model::segments::{
    CompiledStages, DecodeSegments, Segment, Stage, args, compiled_stages, compiles,
};

/// A Gemma 4 stage: `(model, layer, inputs) -> outputs`.
pub type StageFn = segments::StageFn<Gemma4>;

impl Staged for Gemma4 {
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
    pub m: &'a Gemma4,
    /// The residual stream entering layer 0.
    pub h: Array,
    per_layer: Vec<Array>,
    masks: StepMasks,
    segments: Option<&'a mut DecodeSegments>,
    /// Which stages run compiled when `segments` is set.
    stages: CompiledStages,
    /// A layer's normed input made by the fused end of the layer before it
    /// ([`blocks::layer_end`]): `(layer, input_layernorm(h))`.
    next_input: Option<(usize, Array)>,
}

impl<'a> Step<'a> {
    /// Starts a step over `tokens` `[B, L]`: embedding, per-layer inputs (sliced per layer
    /// up front), masks from the caches. With `segments`, the step must be single-token
    /// and every stage runs compiled.
    pub fn new(
        m: &'a Gemma4,
        tokens: &Array,
        caches: &[AnyCache],
        mut segments: Option<&'a mut DecodeSegments>,
    ) -> Result<Self> {
        let mut out = segments::embed(m, segments.as_deref_mut(), tokens)?;
        let h = out.remove(0);
        let per_layer = out;
        let masks = blocks::masks(m, caches, tokens.dim(-1))?;
        Ok(Step {
            m,
            h,
            per_layer,
            masks,
            segments,
            stages: compiled_stages(&m.options),
            next_input: None,
        })
    }

    /// The mask of a layer type.
    pub fn mask(&self, t: LayerType) -> &AttnMask {
        self.masks.of(t)
    }

    /// Layer `i`'s per-layer input `[B, L, P]`.
    pub fn per_layer_input(&self, i: usize) -> Result<&Array> {
        self.per_layer.get(i).ok_or_else(|| {
            Error::Unsupported(format!("layer {i} has no per-layer input in this model"))
        })
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

    /// Layer `i`'s attention inputs from the residual stream `h`: `[q, k, v]` (`N` = 3, a
    /// layer with its own K/V) or `[q]` (`N` = 1), q and k rotated at `offset`. Runs the
    /// `pre` stage (compiled where the step compiles it) and RoPE; in a single-token step
    /// with the fused kernels ([`crate::kernels`]), norms and RoPE as one kernel instead,
    /// from the normed input the layer before made when there is one.
    pub fn attention_inputs<const N: usize>(
        &mut self,
        i: usize,
        pre: StageFn,
        h: &Array,
        rope: &Rope,
        offset: &RopeOffset,
    ) -> Result<[Array; N]> {
        let normed = self.next_input.take().filter(|(layer, _)| *layer == i);
        let m = self.m;
        if Composition::SingleToken.fused_kernels(h, &m.options) {
            let x = match normed {
                Some((_, x)) => x,
                None => blocks::input_norm(m, &m.weights.layers[i], h)?,
            };
            if let Some(out) = blocks::fused_attention_inputs(m, i, &x, N == 3, rope, offset)? {
                let n = out.len();
                return out.try_into().map_err(|_| {
                    Error::Unsupported(format!(
                        "fused attention inputs of layer {i}: {n} arrays, expected {N}"
                    ))
                });
            }
        }
        let mut out: [Array; N] = self.run(i, Stage::Pre, pre, &[h])?;
        for a in out.iter_mut().take(2) {
            *a = blocks::rope(rope, a, offset)?;
        }
        Ok(out)
    }

    /// Runs the `post` stage of layer `i` on `args` (as [`Step::run`]), returning the new
    /// residual stream; a second output is the next layer's normed input, kept for its
    /// [`Step::attention_inputs`].
    pub fn run_post(&mut self, i: usize, post: StageFn, args: &[&Array]) -> Result<Array> {
        let mut out = segments::run_stage_vec(
            self.m,
            self.segments.as_deref_mut(),
            self.stages,
            i,
            Stage::Post,
            post,
            args,
        )?
        .into_iter();
        let h = out.next().ok_or_else(|| {
            Error::Unsupported(format!("the post stage of layer {i} returned nothing"))
        })?;
        self.next_input = out.next().map(|x| (i + 1, x));
        Ok(h)
    }

    /// Final norm, head and softcap of the residual stream `h`.
    pub fn finish(self, h: &Array) -> Result<Array> {
        segments::head(self.m, self.segments, h)
    }
}

/// `[tokens] -> [h, pli_0, .., pli_{N-1}]` (no per-layer inputs without PLE tables).
fn embed_stage(m: &Gemma4, _layer: usize, args: &[Array]) -> Result<Vec<Array>> {
    let inputs: StepInputs = blocks::embed(m, &args[0])?;
    let mut out = Vec::with_capacity(1 + m.config.num_hidden_layers);
    out.push(inputs.h.clone());
    if inputs.per_layer.is_some() {
        out.extend(blocks::per_layer_inputs(&inputs)?);
    }
    Ok(out)
}

/// `[h] -> [logits]`.
fn head_stage(m: &Gemma4, _layer: usize, args: &[Array]) -> Result<Vec<Array>> {
    Ok(vec![blocks::head(m, &args[0])?])
}
