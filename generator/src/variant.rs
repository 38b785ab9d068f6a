//! Layer variants: what of a layer's plan its code is specialized on, and the name of the
//! function that runs it.
//!
//! Two layers with the same [`Variant`] run the same function. A variant holds exactly
//! what changes the emitted code: donor or sharer (and whether a donor exports its K/V),
//! the attention type, the cache the layer attends over (kind, bits, group size) and the
//! flags that add or replace a block. `double_wide_mlp` is fingerprinted but changes no
//! code (the MLP width is read from the weights), so it is not part of a variant.

use std::fmt::Write as _;

use runtime::config::LayerType;
use runtime::model::{gemma4, llama, mla};
use runtime::plan::{FamilyId, KvRole, LayerPlan};
use runtime::quantization::QuantSpec;
use runtime::signature::CacheSignature;

use crate::error::{Error, Result};

/// Whether a layer projects its own K/V.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Owns a cache; `exported` when sharers attend over its fetched K/V.
    Donor {
        /// Whether the function also returns the fetched K/V for sharers.
        exported: bool,
    },
    /// Attends over the K/V its donor fetched in the same step.
    Sharer,
}

/// The specialization of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Variant {
    /// The family whose blocks the function calls.
    pub family: FamilyId,
    /// Donor or sharer.
    pub role: Role,
    /// Sliding or full attention.
    pub attention: LayerType,
    /// The cache the layer attends over: its own (donors) or its donor's (sharers).
    pub cache: CacheSignature,
    /// V is the raw k projection.
    pub k_eq_v: bool,
    /// The per-layer-input gate runs after the feed-forward block.
    pub per_layer_input: bool,
    /// The MoE feed-forward block replaces the dense one.
    pub moe: bool,
    /// The residual stream is multiplied by the layer scalar.
    pub layer_scalar: bool,
    /// Queries and keys are RMS-normed over the head dim (Llama family: Qwen3).
    pub qk_norm: bool,
    /// Both residual branches are scaled (Llama family: MiniCPM).
    pub residual_scale: bool,
}

impl Variant {
    /// The variant of layer `index` of a plan of `family`.
    pub fn of(family: FamilyId, index: usize, layer: &LayerPlan) -> Result<Self> {
        crate::family::find(family)?;
        let sliding = layer.attention == LayerType::Sliding;
        if layer.cache.is_rotating() != sliding {
            return Err(Error::Unsupported(format!(
                "layer {index} is {} attention on a {} cache (sliding layers read rings, full \
                 layers growing caches)",
                layer.attention, layer.cache
            )));
        }
        let role = match layer.kv {
            KvRole::Donor { exported, .. } => Role::Donor { exported },
            KvRole::Sharer { .. } => Role::Sharer,
        };
        if role == Role::Sharer && layer.flags.k_eq_v {
            return Err(Error::Unsupported(format!(
                "layer {index} shares K/V but is marked k_eq_v (only donors project K/V)"
            )));
        }
        if family == llama::FAMILY_ID {
            let f = layer.flags;
            let gemma_only = f.k_eq_v || f.per_layer_input || f.moe || f.layer_scalar;
            if layer.attention != LayerType::Full || role != (Role::Donor { exported: false }) {
                return Err(Error::Unsupported(format!(
                    "layer {index}: Llama-family layers are full attention over their own cache"
                )));
            }
            if gemma_only || f.double_wide_mlp {
                return Err(Error::Unsupported(format!(
                    "layer {index}: a Llama-family layer with Gemma 4 flags"
                )));
            }
        }
        let latent = matches!(layer.cache, CacheSignature::Mla { .. });
        if latent != (family == mla::FAMILY_ID) {
            return Err(Error::Unsupported(format!(
                "layer {index}: {} cache in a {family} plan (latent caches are the MLA \
                 family's, and only theirs)",
                layer.cache
            )));
        }
        if family == mla::FAMILY_ID {
            let f = layer.flags;
            let other = f.k_eq_v
                || f.per_layer_input
                || f.layer_scalar
                || f.double_wide_mlp
                || f.qk_norm
                || f.residual_scale;
            if layer.attention != LayerType::Full || role != (Role::Donor { exported: false }) {
                return Err(Error::Unsupported(format!(
                    "layer {index}: MLA-family layers are full attention over their own cache"
                )));
            }
            if other {
                return Err(Error::Unsupported(format!(
                    "layer {index}: an MLA-family layer with another family's flags"
                )));
            }
        }
        if family == gemma4::FAMILY_ID && layer.flags.qk_norm {
            return Err(Error::Unsupported(format!(
                "layer {index}: qk_norm is a Llama-family flag (Gemma 4 always norms q/k)"
            )));
        }
        if family == gemma4::FAMILY_ID && layer.flags.residual_scale {
            return Err(Error::Unsupported(format!(
                "layer {index}: residual_scale is a Llama-family flag (MiniCPM)"
            )));
        }
        Ok(Variant {
            family,
            role,
            attention: layer.attention,
            cache: layer.cache,
            k_eq_v: layer.flags.k_eq_v,
            per_layer_input: layer.flags.per_layer_input,
            moe: layer.flags.moe,
            layer_scalar: layer.flags.layer_scalar,
            qk_norm: layer.flags.qk_norm,
            residual_scale: layer.flags.residual_scale,
        })
    }

    /// The quantization of the K/V the layer attends over (`None` = float).
    pub fn quant(&self) -> Option<QuantSpec> {
        self.cache.quant()
    }

    /// Whether the layer runs its own DSA indexer (an MLA cache with the indexer's keys).
    pub fn own_indexer(&self) -> bool {
        self.cache == CacheSignature::Mla { indexer: true }
    }

    /// Whether the layer owns a cache.
    pub fn is_donor(&self) -> bool {
        matches!(self.role, Role::Donor { .. })
    }

    /// Whether the layer's function returns its fetched K/V for sharers.
    pub fn is_exported(&self) -> bool {
        self.role == Role::Donor { exported: true }
    }

    /// `{donor|sharer}_{sliding|full}_{plain|q<bits>g<group>|latent|latentidx}` then `_keqv`, `_ple`,
    /// `_moe`, `_scalar`, `_qknorm`, `_scaledres`, `_export` as they apply.
    pub fn name(&self) -> String {
        let role = if self.is_donor() { "donor" } else { "sharer" };
        let mut name = format!("{role}_{}_{}", self.attention, cache_tag(self.cache));
        for (on, suffix) in [
            (self.k_eq_v, "_keqv"),
            (self.per_layer_input, "_ple"),
            (self.moe, "_moe"),
            (self.layer_scalar, "_scalar"),
            (self.qk_norm, "_qknorm"),
            (self.residual_scale, "_scaledres"),
            (self.is_exported(), "_export"),
        ] {
            if on {
                name.push_str(suffix);
            }
        }
        name
    }

    /// One sentence describing what the function does, for its doc comment.
    pub fn describe(&self) -> String {
        if let CacheSignature::Mla { indexer } = self.cache {
            let mut s = String::from("Multi-head latent attention over its own float latent cache");
            s.push_str(if indexer {
                ", sparse past `index_topk` keys by its own DSA indexer"
            } else {
                ", over the keys the last layer with an indexer chose this step"
            });
            s.push_str("; ");
            s.push_str(crate::family::of(self.family).mlp_phrase());
            s.push_str(if self.moe {
                " through routed and shared experts."
            } else {
                " (dense)."
            });
            return s;
        }
        let kv = match self.quant() {
            None => "float".to_owned(),
            Some(q) => format!("{}-bit group-{}", q.bits, q.group_size),
        };
        let ring = if self.cache.is_rotating() {
            "ring"
        } else {
            "growing"
        };
        let mut s = match self.role {
            Role::Donor { .. } => format!(
                "{} attention over its own {kv} {ring} cache",
                capitalized(self.attention)
            ),
            Role::Sharer => format!(
                "{} attention over the {kv} K/V its donor fetched this step",
                capitalized(self.attention)
            ),
        };
        if self.k_eq_v {
            s.push_str("; V is the raw k projection (K=V)");
        }
        if self.qk_norm {
            s.push_str("; q/k RMSNorm over the head dim");
        }
        if self.residual_scale {
            s.push_str("; scaled residual branches");
        }
        s.push_str("; ");
        s.push_str(crate::family::of(self.family).mlp_phrase());
        if self.moe {
            s.push_str(" and MoE experts");
        }
        if self.per_layer_input {
            s.push_str("; per-layer-input gate");
        }
        if self.layer_scalar {
            s.push_str("; layer scalar");
        }
        if self.is_exported() {
            s.push_str("; returns its K/V for the sharers");
        }
        s.push('.');
        s
    }
}

/// `plain` for float K/V, `q<bits>g<group>` for quantized, `latent` / `latentidx` for
/// MLA caches (without / with the indexer's keys).
fn cache_tag(cache: CacheSignature) -> String {
    match (cache, cache.quant()) {
        (CacheSignature::Mla { indexer: false }, _) => "latent".to_owned(),
        (CacheSignature::Mla { indexer: true }, _) => "latentidx".to_owned(),
        (_, None) => "plain".to_owned(),
        (_, Some(q)) => format!("q{}g{}", q.bits, q.group_size),
    }
}

fn capitalized(t: LayerType) -> &'static str {
    match t {
        LayerType::Sliding => "Sliding",
        LayerType::Full => "Full",
    }
}

/// `0-2, 6-8, 12` for `[0, 1, 2, 6, 7, 8, 12]`.
pub fn ranges(indices: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        match end - start {
            0 => write!(out, "{start}"),
            1 => write!(out, "{start}, {end}"),
            _ => write!(out, "{start}-{end}"),
        }
        .expect("writing to a String");
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_compress_runs() {
        assert_eq!(ranges(&[0, 1, 2, 6, 7, 9, 12]), "0-2, 6, 7, 9, 12");
        assert_eq!(ranges(&[5]), "5");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn names_follow_the_design() {
        let v = Variant {
            family: gemma4::FAMILY_ID,
            role: Role::Donor { exported: true },
            attention: LayerType::Sliding,
            cache: CacheSignature::RotatingQuant(QuantSpec {
                bits: 4,
                group_size: 64,
            }),
            k_eq_v: false,
            per_layer_input: true,
            moe: false,
            layer_scalar: true,
            qk_norm: false,
            residual_scale: false,
        };
        assert_eq!(v.name(), "donor_sliding_q4g64_ple_scalar_export");
        let s = Variant {
            family: gemma4::FAMILY_ID,
            role: Role::Sharer,
            attention: LayerType::Full,
            cache: CacheSignature::Plain,
            k_eq_v: false,
            per_layer_input: false,
            moe: true,
            layer_scalar: false,
            qk_norm: false,
            residual_scale: false,
        };
        assert_eq!(s.name(), "sharer_full_plain_moe");
        let l = Variant {
            family: llama::FAMILY_ID,
            role: Role::Donor { exported: false },
            attention: LayerType::Full,
            cache: CacheSignature::Quant(QuantSpec {
                bits: 8,
                group_size: 64,
            }),
            k_eq_v: false,
            per_layer_input: false,
            moe: false,
            layer_scalar: false,
            qk_norm: true,
            residual_scale: false,
        };
        assert_eq!(l.name(), "donor_full_q8g64_qknorm");
    }
}
