//! The Llama-family monolith: the generic forward pass that walks the plan at run time.
//! It is the reference generated code must match bit for bit, and the path every call
//! takes when no specialization fits.

use std::rc::Rc;

use mlx_rs::Array;

use super::Llama;
use super::blocks::{self, Composition, Residual};
use crate::cache::AnyCache;
use crate::error::Result;
use crate::family::FamilyModel;
use crate::model::{LanguageModel, ModelRef};
use crate::plan::ModelPlan;

/// The id of the Llama-family monolith.
pub const MONOLITH_ID: &str = "llama-monolith";

/// Logits `[B, L, vocab]` of `tokens` (`[B, L]` int32), updating `caches`.
pub fn forward(m: &Llama, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
    m.check_caches(caches)?;
    let mut h = blocks::embed(m, tokens)?;
    let mask = blocks::mask(caches, tokens.dim(1))?;
    let barrier = m.barrier();
    for (i, layer) in m.plan.layers.iter().enumerate() {
        let w = &m.weights.layers[i];
        let qk_norm = layer.flags.qk_norm;
        let x = blocks::input_norm(m, w, &h)?;
        let (q, k, v) =
            blocks::queries_keys_values(m, &w.attn, &x, qk_norm, Composition::Reference)?;
        let c = &mut caches[layer.kv.cache_index()];
        let offset = c.rope_offset();
        let q = blocks::rope(&m.rope, &q, &offset)?;
        let k = blocks::rope(&m.rope, &k, &offset)?;
        let kv = c.update_and_fetch(&k, &v)?;
        let o = blocks::attend(m, &q, &kv, &mask)?;
        crate::model::barrier::attention_done(&o, barrier)?;
        let residual = Residual::of(layer.flags.residual_scale);
        h = blocks::attention_out(m, w, &h, &o, residual, Composition::Reference)?;
        h = blocks::mlp(m, w, &h, residual, Composition::Reference)?;
        crate::model::barrier::layer_done(&h, barrier)?;
    }
    blocks::head(m, &h)
}

/// The monolith as a [`LanguageModel`].
#[derive(Debug, Clone)]
pub struct LlamaMonolith {
    model: Rc<Llama>,
}

impl LlamaMonolith {
    /// Wraps a loaded model.
    pub fn new(model: Rc<Llama>) -> Self {
        LlamaMonolith { model }
    }
}

impl LanguageModel for LlamaMonolith {
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
