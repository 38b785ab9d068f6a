//! The Gemma 4 plan: which layers slide, which share their donor's K/V, K=V, per-layer
//! inputs, MoE, layer scalars and double-wide MLPs, and each cache's signature.

use super::config::Gemma4Config;
use crate::config::LayerType;
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::plan::{KvRole, LayerFlags, LayerPlan, ModelPlan, check_kv_layout};
use crate::signature::CacheSignature;

/// Facts about the weights that change the computation, read from the tensors
/// themselves (never from an index file, gemma4.md §9 pitfall 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightFacts {
    /// Per layer: whether `layers.i.layer_scalar` exists.
    pub layer_scalar: Vec<bool>,
}

impl WeightFacts {
    /// The text of `weight_facts.json` for these facts.
    pub fn to_json(&self) -> String {
        let flags: Vec<&str> = self
            .layer_scalar
            .iter()
            .map(|&s| if s { "true" } else { "false" })
            .collect();
        format!(
            "{{\n  \"_note\": \"layer i carries layers.i.layer_scalar (read from the checkpoint's \
             safetensors headers by cargo xtask generate --model-dir)\",\n  \"layer_scalar\": [{}]\n}}\n",
            flags.join(", ")
        )
    }

    /// Reads a `weight_facts.json` (`file` names it in errors) for a model of `layers`
    /// layers.
    pub fn from_json(file: &str, text: &str, layers: usize) -> Result<Self> {
        let value = crate::json::parse(file, text)?;
        let bad = |message: String| Error::config(file, "layer_scalar", message);
        let items = value
            .get("layer_scalar")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("missing; expected a list of true/false, one per layer".into()))?;
        if items.len() != layers {
            return Err(bad(format!(
                "has {} entries, expected num_hidden_layers = {layers}",
                items.len()
            )));
        }
        let layer_scalar = items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_bool()
                    .ok_or_else(|| bad(format!("entry {i} is {v}, expected true or false")))
            })
            .collect::<Result<Vec<bool>>>()?;
        Ok(WeightFacts { layer_scalar })
    }

    /// Every layer carries a layer scalar, as every shipped checkpoint does.
    pub fn all_scalars(layers: usize) -> Self {
        WeightFacts {
            layer_scalar: vec![true; layers],
        }
    }
}

/// Resolves every per-layer branch of a Gemma 4 model.
pub fn resolve(config: &Gemma4Config, kv: &KvLayout, facts: &WeightFacts) -> Result<ModelPlan> {
    let n = config.num_hidden_layers;
    let first_shared = config.first_shared_layer();
    if facts.layer_scalar.len() != n {
        return Err(Error::Request(format!(
            "weight facts describe {} layers, the config {n}",
            facts.layer_scalar.len()
        )));
    }
    check_kv_layout(kv, first_shared, usize::MAX, |c| config.head_dim_of(c))?;

    // The donor of a shared type is the last own-KV layer of that type.
    let last_donor = |t: LayerType| {
        (0..first_shared)
            .rev()
            .find(|&i| config.layer_types[i] == t)
    };
    let exported: Vec<usize> = if first_shared < n {
        [LayerType::Sliding, LayerType::Full]
            .into_iter()
            .filter(|&t| config.layer_types[first_shared..].contains(&t))
            .filter_map(last_donor)
            .collect()
    } else {
        Vec::new()
    };

    let own_signature = |i: usize| {
        let base = match config.layer_types[i] {
            LayerType::Sliding => CacheSignature::Rotating,
            LayerType::Full => CacheSignature::Plain,
        };
        base.with_quant(kv.get(i))
    };

    let mut layers = Vec::with_capacity(n);
    for i in 0..n {
        let attention = config.layer_types[i];
        let kv_role = if i < first_shared {
            KvRole::Donor {
                cache: i,
                exported: exported.contains(&i),
            }
        } else {
            let donor = last_donor(attention).ok_or_else(|| {
                Error::config(
                    &config.source,
                    "layer_types",
                    format!(
                        "shared layer {i} has no donor of type {}",
                        attention.config_name()
                    ),
                )
            })?;
            KvRole::Sharer { donor }
        };
        let flags = LayerFlags {
            k_eq_v: config.k_eq_v(i) && kv_role.is_donor(),
            per_layer_input: config.hidden_size_per_layer_input > 0,
            moe: config.moe.is_some(),
            layer_scalar: facts.layer_scalar[i],
            double_wide_mlp: config.double_wide(i),
            qk_norm: false,
            residual_scale: false,
        };
        layers.push(LayerPlan {
            attention,
            kv: kv_role,
            cache: own_signature(kv_role.cache_index()),
            flags,
        });
    }
    Ok(ModelPlan {
        family: super::FAMILY_ID,
        layers,
    })
}
