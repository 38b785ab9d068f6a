//! The monolith: the generic Gemma 4 forward pass that walks the plan at run time.
//!
//! It is the reference generated code must match bit for bit, and the path every call
//! takes when no specialization fits (float first prefill, other kv layouts,
//! caller-made caches).

use std::rc::Rc;

use mlx_rs::Array;

use super::Gemma4;
use super::blocks::{self, Composition, SharedKv};
use crate::cache::AnyCache;
use crate::error::{Error, Result};
use crate::family::FamilyModel;
use crate::model::{LanguageModel, ModelRef};
use crate::plan::{KvRole, ModelPlan};

/// Logits `[B, L, vocab]` of `tokens` (`[B, L]` int32), updating `caches`.
pub fn forward(m: &Gemma4, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
    m.check_caches(caches)?;
    let inputs = blocks::embed(m, tokens)?;
    let masks = blocks::masks(m, caches, inputs.len)?;
    let mut shared: Vec<Option<SharedKv>> = vec![None; m.plan.layers.len()];
    let mut h = inputs.h.clone();
    let barrier = m.barrier();
    for (i, layer) in m.plan.layers.iter().enumerate() {
        let w = &m.weights.layers[i];
        let head_dim = m.config.head_dim_of(i) as i32;
        let rope = m.rope(layer.attention);
        let mask = masks.of(layer.attention);
        let x = blocks::input_norm(m, w, &h)?;
        let q = blocks::queries(m, &w.attn, &x, head_dim, Composition::Reference)?;
        let kv = match layer.kv {
            KvRole::Donor { cache, .. } => {
                let c = &mut caches[cache];
                let offset = c.offset() as i32;
                let (k, v) = blocks::keys_values(
                    m,
                    &w.attn,
                    &x,
                    head_dim,
                    layer.flags.k_eq_v,
                    Composition::Reference,
                )?;
                let k = blocks::rope(rope, &k, offset)?;
                let kv = c.update_and_fetch(&k, &v)?;
                SharedKv { kv, offset }
            }
            KvRole::Sharer { donor } => shared[donor].clone().ok_or_else(|| {
                Error::Unsupported(format!(
                    "layer {i} shares the K/V of layer {donor}, which has not run"
                ))
            })?,
        };
        let q = blocks::rope(rope, &q, kv.offset)?;
        let o = blocks::attend(&q, &kv.kv, mask)?;
        crate::model::barrier::attention_done(&o, barrier)?;
        h = blocks::attention_out(m, w, &h, &o, Composition::Reference)?;
        h = if layer.flags.moe {
            blocks::moe_ffn(m, w, blocks::moe_weights(w, i)?, &h, Composition::Reference)?
        } else {
            blocks::dense_ffn(m, w, &h, Composition::Reference)?
        };
        if layer.flags.per_layer_input {
            let pli = blocks::per_layer_input(&inputs, i as i32)?;
            h = blocks::per_layer_gate(m, blocks::ple_weights(w, i)?, &h, &pli)?;
        }
        if layer.flags.layer_scalar {
            h = blocks::layer_scalar(&h, blocks::scalar_weight(w, i)?)?;
        }
        if matches!(layer.kv, KvRole::Donor { exported: true, .. }) {
            shared[i] = Some(kv);
        }
        crate::model::barrier::layer_done(&h, barrier)?;
    }
    blocks::head(m, &h)
}

/// The monolith as a [`LanguageModel`].
#[derive(Debug, Clone)]
pub struct Gemma4Monolith {
    model: Rc<Gemma4>,
}

impl Gemma4Monolith {
    /// Wraps a loaded model.
    pub fn new(model: Rc<Gemma4>) -> Self {
        Gemma4Monolith { model }
    }

    /// The loaded model.
    pub fn model(&self) -> &Rc<Gemma4> {
        &self.model
    }
}

impl LanguageModel for Gemma4Monolith {
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
        super::MONOLITH_ID
    }
}
