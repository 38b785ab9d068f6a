//! `ModelPlan`: the one place where a model's per-layer branches are decided.
//!
//! The monolith walks the plan at run time; the generator unrolls it into code. Only
//! structure lives here (attention kind, KV role, cache signature, flags); dimensions
//! are read from the weights at run time.

use serde::{Deserialize, Serialize};

use crate::config::LayerType;
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::signature::CacheSignature;

/// The family a plan belongs to, by its name (`gemma4`, `llama`): the name each family
/// gives itself ([`crate::family::Family::name`]). Serialized as the bare name, so it is
/// part of every fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct FamilyId(pub &'static str);

impl FamilyId {
    /// The family's name in ids and messages.
    pub fn name(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for FamilyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
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
    /// Both residual branches are scaled by `scale_depth / sqrt(layers)` (Llama family:
    /// MiniCPM, which also scales the embedding and the head input). Hashed only when
    /// set, as `qk_norm`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub residual_scale: bool,
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

/// The resolved plan of a model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ModelPlan {
    /// The family.
    pub family: FamilyId,
    /// One entry per layer.
    pub layers: Vec<LayerPlan>,
}

impl ModelPlan {
    /// Whether any layer routes through experts.
    pub fn has_moe(&self) -> bool {
        self.layers.iter().any(|l| l.flags.moe)
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
pub(crate) fn check_kv_layout(
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
