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
        let reference = Composition::Reference;
        let (q, kv) = match layer.kv {
            KvRole::Donor { cache, .. } => {
                let c = &mut caches[cache];
                let offset = c.rope_offset();
                let (q, k, v) = blocks::queries_keys_values(
                    m,
                    &w.attn,
                    &x,
                    head_dim,
                    layer.flags.k_eq_v,
                    reference,
                )?;
                let k = blocks::rope(rope, &k, &offset)?;
                let kv = c.update_and_fetch(&k, &v)?;
                (q, SharedKv { kv, offset })
            }
            KvRole::Sharer { donor } => {
                let q = blocks::queries(m, &w.attn, &x, head_dim, reference)?;
                let kv = shared[donor].clone().ok_or_else(|| {
                    Error::Unsupported(format!(
                        "layer {i} shares the K/V of layer {donor}, which has not run"
                    ))
                })?;
                (q, kv)
            }
        };
        let q = blocks::rope(rope, &q, &kv.offset)?;
        let o = blocks::attend(m, &q, &kv.kv, mask)?;
        crate::model::barrier::attention_done(&o, barrier)?;
        let pli = if layer.flags.per_layer_input {
            Some(blocks::per_layer_input(&inputs, i as i32)?)
        } else {
            None
        };
        h = after_attention(m, i, &h, &o, pli.as_ref())?;
        if matches!(layer.kv, KvRole::Donor { exported: true, .. }) {
            shared[i] = Some(kv);
        }
        crate::model::barrier::layer_done(&h, barrier)?;
    }
    blocks::head(m, &h)
}

/// Layer `i` after attention, in the blocks (and their order) of the generated post
/// stages (`generator::family::Gemma4Code::post_stage`), with the layer's flags read
/// here rather than resolved ahead of time.
fn after_attention(
    m: &Gemma4,
    i: usize,
    h: &Array,
    o: &Array,
    pli: Option<&Array>,
) -> Result<Array> {
    let flags = m.plan.layers[i].flags;
    let w = &m.weights.layers[i];
    let reference = Composition::Reference;
    let scalar = if flags.layer_scalar {
        Some(blocks::scalar_weight(w, i)?)
    } else {
        None
    };
    if flags.moe {
        let moe = blocks::moe_weights(w, i)?;
        let h = blocks::attention_out(m, w, h, o, reference)?;
        return match pli {
            Some(pli) => {
                let ple = blocks::ple_weights(w, i)?;
                let h = blocks::moe_ffn(m, w, moe, &h, reference)?;
                match scalar {
                    Some(s) => {
                        let d = blocks::per_layer_delta(m, ple, &h, pli)?;
                        blocks::scaled_residual(&h, &d, s, reference)
                    }
                    None => blocks::per_layer_gate(m, ple, &h, pli),
                }
            }
            None => match scalar {
                Some(s) => {
                    let d = blocks::moe_ffn_delta(m, w, moe, &h, reference)?;
                    blocks::scaled_residual(&h, &d, s, reference)
                }
                None => blocks::moe_ffn(m, w, moe, &h, reference),
            },
        };
    }
    let (h, f) = blocks::attention_residual(m, w, h, o, reference)?;
    let out = match pli {
        Some(pli) => {
            let h = blocks::ffn_residual(m, w, &h, &f, reference)?;
            let ple = blocks::ple_weights(w, i)?;
            let d = blocks::per_layer_raw(m, ple, &h, pli, reference)?;
            blocks::layer_end(m, i, &h, &d, &ple.post_norm, scalar, reference)?
        }
        None => {
            let d = blocks::ffn_raw(m, w, &f, reference)?;
            blocks::layer_end(m, i, &h, &d, &w.post_ffn_norm, scalar, reference)?
        }
    };
    out.into_iter()
        .next()
        .ok_or_else(|| Error::Unsupported(format!("layer {i}'s last residual returned nothing")))
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
