//! `ModelPlan`: the one place where a model's per-layer branches are decided.
//!
//! The monolith walks the plan at run time; the generator unrolls it into code. Only
//! structure lives here (attention kind, KV role, cache signature, flags); dimensions
//! are read from the weights at run time.

use serde::{Deserialize, Serialize};

use crate::config::{Gemma4Config, LayerType};
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::signature::CacheSignature;

/// The architecture family a plan belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Gemma 4 text (E2B, E4B, 12B, 26B-A4B, 31B).
    Gemma4,
    /// Llama-style dense decoders (`model_type` llama or qwen3): every layer full
    /// attention over its own cache, SwiGLU MLP, optional q/k norm.
    Llama,
}

impl Family {
    /// The family's name in ids and messages.
    pub fn name(self) -> &'static str {
        match self {
            Family::Gemma4 => "gemma4",
            Family::Llama => "llama",
        }
    }
}

/// Who owns the K/V a layer attends over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvRole {
    /// Projects its own K/V into cache `cache`; `exported` when sharers read it.
    Donor {
        /// The cache index (equal to the layer index).
        cache: usize,
        /// Whether later layers reuse this layer's fetched K/V.
        exported: bool,
    },
    /// Reuses the fetched K/V and RoPE offset of layer `donor` (same forward pass).
    Sharer {
        /// The donor layer (the last own-KV layer of the same type).
        donor: usize,
    },
}

impl KvRole {
    /// The cache this layer reads: its own, or its donor's.
    pub fn cache_index(self) -> usize {
        match self {
            KvRole::Donor { cache, .. } => cache,
            KvRole::Sharer { donor } => donor,
        }
    }

    /// Whether the layer owns its K/V.
    pub fn is_donor(self) -> bool {
        matches!(self, KvRole::Donor { .. })
    }
}

/// Per-layer switches that change the computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct LayerFlags {
    /// Full layer without v_proj: V is the raw k projection.
    pub k_eq_v: bool,
    /// Per-layer input gate (E2B/E4B).
    pub per_layer_input: bool,
    /// MoE block beside the dense MLP (26B-A4B).
    pub moe: bool,
    /// A learned `layer_scalar` multiplies the residual stream.
    pub layer_scalar: bool,
    /// The MLP is `2 × intermediate_size` wide (E2B shared layers).
    pub double_wide_mlp: bool,
    /// RMSNorm over the head dim on queries and keys before RoPE (Llama family: Qwen3).
    /// Gemma 4 always norms them and never sets this; it is hashed only when set, so
    /// the plans of the families that never set it keep their fingerprints.
    #[serde(default, skip_serializing_if = "is_false")]
    pub qk_norm: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One layer, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerPlan {
    /// Sliding or full attention.
    pub attention: LayerType,
    /// Donor or sharer.
    pub kv: KvRole,
    /// The signature of the cache this layer reads (its own, or its donor's).
    pub cache: CacheSignature,
    /// Flags.
    pub flags: LayerFlags,
}

/// Facts about the weights that change the computation, read from the tensors
/// themselves (never from an index file, gemma4.md §9 pitfall 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightFacts {
    /// Per layer: whether `layers.i.layer_scalar` exists.
    pub layer_scalar: Vec<bool>,
}

impl WeightFacts {
    /// Every layer carries a layer scalar, as every shipped checkpoint does.
    pub fn all_scalars(layers: usize) -> Self {
        WeightFacts {
            layer_scalar: vec![true; layers],
        }
    }
}

/// The resolved plan of a model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelPlan {
    /// The family.
    pub family: Family,
    /// One entry per layer.
    pub layers: Vec<LayerPlan>,
}

impl ModelPlan {
    /// Whether any layer routes through experts.
    pub fn has_moe(&self) -> bool {
        self.layers.iter().any(|l| l.flags.moe)
    }

    /// Resolves every per-layer branch of a Gemma 4 model.
    pub fn resolve(config: &Gemma4Config, kv: &KvLayout, facts: &WeightFacts) -> Result<Self> {
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
            };
            layers.push(LayerPlan {
                attention,
                kv: kv_role,
                cache: own_signature(kv_role.cache_index()),
                flags,
            });
        }
        Ok(ModelPlan {
            family: Family::Gemma4,
            layers,
        })
    }

    /// Resolves a Llama-family model: every layer full attention and a donor of its own
    /// growing cache (float, or quantized as the kv layout says), q/k norm as the
    /// config says.
    pub fn resolve_llama(config: &crate::model::llama::LlamaConfig, kv: &KvLayout) -> Result<Self> {
        let n = config.num_hidden_layers;
        check_kv_layout(kv, n, n, |_| config.head_dim)?;
        let layers = (0..n)
            .map(|i| LayerPlan {
                attention: LayerType::Full,
                kv: KvRole::Donor {
                    cache: i,
                    exported: false,
                },
                cache: CacheSignature::Plain.with_quant(kv.get(i)),
                flags: LayerFlags {
                    qk_norm: config.qk_norm,
                    ..LayerFlags::default()
                },
            })
            .collect();
        Ok(ModelPlan {
            family: Family::Llama,
            layers,
        })
    }

    /// The number of caches (donor layers).
    pub fn num_caches(&self) -> usize {
        self.layers.iter().filter(|l| l.kv.is_donor()).count()
    }

    /// The signature of each cache, in cache order.
    pub fn cache_signatures(&self) -> Vec<CacheSignature> {
        self.layers
            .iter()
            .filter(|l| l.kv.is_donor())
            .map(|l| l.cache)
            .collect()
    }

    /// The first layer of each attention type: masks are built from its cache.
    pub fn first_of(&self, t: LayerType) -> Option<usize> {
        self.layers.iter().position(|l| l.attention == t)
    }

    /// The same plan with every cache in float (what the first prefill runs on).
    pub fn with_float_caches(&self) -> Self {
        let mut plan = self.clone();
        for layer in &mut plan.layers {
            layer.cache = layer.cache.with_quant(None);
        }
        plan
    }
}

/// Checks a kv layout against the caches `0..caches` and their head dims: every entry
/// names an existing cache, with bits dividing 32 and a group size dividing the head dim.
fn check_kv_layout(
    kv: &KvLayout,
    caches: usize,
    layers: usize,
    head_dim: impl Fn(usize) -> usize,
) -> Result<()> {
    let first_shared = caches;
    for entry in kv.entries() {
        if entry.cache >= layers {
            return Err(Error::config(
                &kv.source,
                format!("[{}].layer_idx", entry.position),
                format!(
                    "cache {} does not exist: the model has {layers} layers",
                    entry.cache
                ),
            ));
        }
        if entry.cache >= first_shared {
            return Err(Error::config(
                &kv.source,
                format!("[{}].layer_idx", entry.position),
                format!(
                    "cache {} does not exist: only layers 0..{first_shared} own K/V caches \
                     (layer {} shares the K/V of an earlier layer)",
                    entry.cache, entry.cache
                ),
            ));
        }
        let d = head_dim(entry.cache);
        let q = entry.quant;
        // mlx-lm preallocates `dim // (32 // bits)` packed columns, which is only the
        // quantized width when bits divides 32.
        if !32u32.is_multiple_of(q.bits) {
            return Err(Error::config(
                &kv.source,
                format!("[{}].bits", entry.position),
                format!("KV caches support 2, 4 or 8 bits, found {}", q.bits),
            ));
        }
        if !d.is_multiple_of(q.group_size as usize) || !(d * q.bits as usize).is_multiple_of(32) {
            return Err(Error::config(
                &kv.source,
                format!("[{}].group_size", entry.position),
                format!(
                    "layer {} has head dim {d}, which {q} cannot quantize (head dim must \
                     be a multiple of the group size)",
                    entry.cache
                ),
            ));
        }
    }
    Ok(())
}
