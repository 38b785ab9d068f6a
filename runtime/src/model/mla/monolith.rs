//! The MLA-family monolith: the generic forward pass that walks the plan at run time, in
//! mlx-lm's order (`DeepseekV32Model`): the reference generated code must match bit for
//! bit, and the path every call takes when no specialization fits.

use std::rc::Rc;

use mlx_rs::Array;

use super::Mla;
use super::blocks::{self, PreAttention};
use crate::cache::AnyCache;
use crate::error::{Error, Result};
use crate::family::FamilyModel;
use crate::model::{LanguageModel, ModelRef};
use crate::plan::ModelPlan;
use crate::signature::CacheSignature;

/// The id of the MLA-family monolith.
pub const MONOLITH_ID: &str = "mla-monolith";

/// Logits `[B, L, vocab]` of `tokens` (`[B, L]` int32), updating `caches`.
pub fn forward(m: &Mla, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
    m.check_caches(caches)?;
    let n = tokens.dim(1);
    let mut h = blocks::embed(m, tokens)?;
    let mask = blocks::mask(caches, n as usize)?;
    let barrier = m.barrier();
    // The top-k of the last layer with its own indexer, for the layers that share it.
    let mut chosen = None;
    for (i, layer) in m.plan.layers.iter().enumerate() {
        let w = &m.weights.layers[i];
        let index = layer.kv.cache_index();
        let AnyCache::Mla(c) = &mut caches[index] else {
            return Err(Error::Cache {
                cache: index,
                message: "is not an MLA cache".into(),
            });
        };
        let own_indexer = layer.cache == CacheSignature::Mla { indexer: true };
        let outputs = if own_indexer {
            blocks::pre_attention_indexed(m, w, &h)?
        } else {
            blocks::pre_attention(m, w, &h)?
        };
        let pre = PreAttention::from_outputs(outputs, own_indexer)?;
        let o = blocks::latent_attention(m, &w.attn, index, c, pre, &mask, &mut chosen)?;
        crate::model::barrier::attention_done(&o, barrier)?;
        h = blocks::attention_out(w, &h, &o)?;
        h = if layer.flags.moe {
            blocks::moe_ffn(m, w, &h)?
        } else {
            blocks::dense_ffn(m, w, &h)?
        };
        crate::model::barrier::layer_done(&h, barrier)?;
    }
    blocks::head(m, &h)
}

/// The monolith as a [`LanguageModel`].
#[derive(Debug, Clone)]
pub struct MlaMonolith {
    model: Rc<Mla>,
}

impl MlaMonolith {
    /// Wraps a loaded model.
    pub fn new(model: Rc<Mla>) -> Self {
        MlaMonolith { model }
    }
}

impl LanguageModel for MlaMonolith {
    fn forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
        forward(&self.model, tokens, caches)
    }

    fn plan(&self) -> &ModelPlan {
        &self.model.plan
    }

    fn loaded(&self) -> ModelRef<'_> {
        &*self.model
    }

    fn implementation(&self) -> &str {
        MONOLITH_ID
    }
}
