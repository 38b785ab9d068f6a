//! One forward step as generated Llama-family code runs it: the residual stream entering
//! layer 0, the mask, and the stages of each layer, run directly or through their
//! compiled segments (the same scheme as `gemma4::step`, whose switch it shares).
//!
//! A layer's stages: before RoPE and the cache update (input norm, projections, q/k
//! norms) and after attention (output projection, residual, post-attention norm, SwiGLU
//! MLP, residual). RoPE, cache updates and attention run eagerly between them.

use std::rc::Rc;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use super::Llama;
use super::blocks;
use crate::cache::AnyCache;
use crate::config::LayerType;
use crate::error::{Error, Result};
use crate::nn::mask::AttnMask;

pub use crate::model::gemma4::step::{
    CompiledStages, compiled_decode, compiled_stages, set_compiled_decode,
};

/// Whether `m`'s single-token steps run compiled: when [`compiled_decode`] is on and the
/// activations are 16-bit (as for Gemma 4). Which stages compile follows
/// [`compiled_stages`], shared with Gemma 4: on the CPU all of them, on a GPU those before
/// attention (embedding, pre-attention stages, head).
pub fn compiles(m: &Llama) -> bool {
    compiled_decode()
        && matches!(
            m.weights.dtype,
            mlx_rs::Dtype::Bfloat16 | mlx_rs::Dtype::Float16
        )
}

/// A stage: `(model, layer, inputs) -> outputs`.
pub type StageFn = fn(&Llama, usize, &[Array]) -> Result<Vec<Array>>;

/// The two stages of a layer: before the cache update, after attention.
#[derive(Debug, Clone, Copy)]
pub struct LayerStages {
    /// `[h] -> [q, k, v]`.
    pub pre: StageFn,
    /// `[h, o] -> [h]`.
    pub post: StageFn,
}

type Compiled = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// A stage compiled for one layer of one model.
pub struct Segment {
    compiled: Compiled,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Segment")
    }
}

impl Segment {
    /// Compiles `stage` of `layer` (traced at its first call, per input shape).
    pub fn new(model: Rc<Llama>, layer: usize, stage: StageFn) -> Self {
        let f = move |args: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
            stage(&model, layer, args).map_err(|e| Exception::custom(e.to_string()))
        };
        Segment {
            compiled: Box::new(mlx_rs::transforms::compile::compile(f, false)),
        }
    }

    /// Runs the compiled stage.
    pub fn call(&mut self, args: &[Array]) -> Result<Vec<Array>> {
        Ok((self.compiled)(args)?)
    }
}

/// The compiled segments of a model's single-token step.
#[derive(Debug)]
pub struct DecodeSegments {
    embed: Segment,
    pre: Vec<Segment>,
    post: Vec<Segment>,
    head: Segment,
}

impl DecodeSegments {
    /// Compiles every stage of `layers` (one entry per layer) for `model`.
    pub fn new(model: &Rc<Llama>, layers: &[LayerStages]) -> Self {
        DecodeSegments {
            embed: Segment::new(model.clone(), 0, embed_stage),
            pre: layers
                .iter()
                .enumerate()
                .map(|(i, s)| Segment::new(model.clone(), i, s.pre))
                .collect(),
            post: layers
                .iter()
                .enumerate()
                .map(|(i, s)| Segment::new(model.clone(), i, s.post))
                .collect(),
            head: Segment::new(model.clone(), 0, head_stage),
        }
    }
}

/// Which stage of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before the cache update.
    Pre,
    /// After attention.
    Post,
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
        let h = match segments.as_deref_mut() {
            Some(s) => {
                if tokens.ndim() != 2 || tokens.dim(1) != 1 {
                    return Err(Error::Request(format!(
                        "the compiled step takes one token per row, got tokens of shape {:?}",
                        tokens.shape()
                    )));
                }
                s.embed.call(std::slice::from_ref(tokens))?.remove(0)
            }
            None => embed_stage(m, 0, std::slice::from_ref(tokens))?.remove(0),
        };
        let mask = blocks::mask(caches, tokens.dim(-1))?;
        Ok(Step {
            m,
            h,
            mask,
            segments,
            stages: compiled_stages(),
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
        let args: Vec<Array> = args.iter().map(|a| (*a).clone()).collect();
        let eager_post = stage == Stage::Post && self.stages != CompiledStages::All;
        let out = match self.segments.as_deref_mut() {
            Some(s) if !eager_post => {
                let seg = match stage {
                    Stage::Pre => s.pre.get_mut(i),
                    Stage::Post => s.post.get_mut(i),
                };
                seg.ok_or_else(|| Error::Unsupported(format!("no compiled segment for layer {i}")))?
                    .call(&args)?
            }
            _ => f(self.m, i, &args)?,
        };
        let n = out.len();
        out.try_into().map_err(|_| {
            Error::Unsupported(format!(
                "stage {stage:?} of layer {i} returned {n} arrays, expected {N}"
            ))
        })
    }

    /// Final norm and head of the residual stream `h`.
    pub fn finish(self, h: &Array) -> Result<Array> {
        match self.segments {
            Some(s) => Ok(s.head.call(std::slice::from_ref(h))?.remove(0)),
            None => Ok(head_stage(self.m, 0, std::slice::from_ref(h))?.remove(0)),
        }
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

pub use crate::model::gemma4::step::args;
