//! The compiled stages of a layer, keyed by exactly what their bodies read.
//!
//! A layer's function depends on its whole [`Variant`] (its cache kind and quantization,
//! whether it exports its K/V), but its two stages do not: the stage before attention
//! reads the role, attention type, K=V and q/k norm; the stage after attention reads the
//! feed-forward kind, the per-layer input, the layer scalar and the residual scale. The family's code sees
//! only these keys ([`PreStage`], [`PostStage`]), so a stage body cannot depend on more
//! than its key, and the emitter writes one function per distinct key: two layers whose
//! stages would have the same body share the function.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use runtime::config::LayerType;
use runtime::plan::FamilyId;

use crate::doc;
use crate::variant::{Variant, ranges};

/// What the stage before RoPE and the cache update reads of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PreStage {
    /// The family whose blocks it calls.
    pub family: FamilyId,
    /// Projects K/V (a donor) or only queries (a sharer).
    pub donor: bool,
    /// The attention type (it picks the head dim).
    pub attention: LayerType,
    /// V is the raw k projection.
    pub k_eq_v: bool,
    /// Queries and keys are RMS-normed over the head dim (Llama family: Qwen3).
    pub qk_norm: bool,
    /// The layer runs its own DSA indexer (MLA family).
    pub own_indexer: bool,
}

impl PreStage {
    /// The key of `v`'s stage before attention.
    pub fn of(v: &Variant) -> Self {
        PreStage {
            family: v.family,
            donor: v.is_donor(),
            attention: v.attention,
            k_eq_v: v.k_eq_v,
            qk_norm: v.qk_norm,
            own_indexer: v.own_indexer(),
        }
    }

    /// `pre_{donor|sharer}_{sliding|full}` then `_keqv`, `_qknorm`, `_indexer` as they
    /// apply.
    pub fn ident(&self) -> Ident {
        let role = if self.donor { "donor" } else { "sharer" };
        let mut name = format!("pre_{role}_{}", self.attention);
        for (on, suffix) in [
            (self.k_eq_v, "_keqv"),
            (self.qk_norm, "_qknorm"),
            (self.own_indexer, "_indexer"),
        ] {
            if on {
                name.push_str(suffix);
            }
        }
        format_ident!("{name}")
    }
}

/// What the stage after attention reads of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostStage {
    /// The family whose blocks it calls.
    pub family: FamilyId,
    /// The MoE feed-forward block replaces (Gemma 4: joins) the dense one.
    pub moe: bool,
    /// The per-layer-input gate runs after the feed-forward block.
    pub per_layer_input: bool,
    /// The residual stream is multiplied by the layer scalar.
    pub layer_scalar: bool,
    /// Both residual branches are scaled (Llama family: MiniCPM).
    pub residual_scale: bool,
}

impl PostStage {
    /// The key of `v`'s stage after attention.
    pub fn of(v: &Variant) -> Self {
        PostStage {
            family: v.family,
            moe: v.moe,
            per_layer_input: v.per_layer_input,
            layer_scalar: v.layer_scalar,
            residual_scale: v.residual_scale,
        }
    }

    /// `post_{dense|moe}` then `_ple`, `_scalar`, `_scaledres` as they apply.
    pub fn ident(&self) -> Ident {
        let ffn = if self.moe { "moe" } else { "dense" };
        let mut name = format!("post_{ffn}");
        for (on, suffix) in [
            (self.per_layer_input, "_ple"),
            (self.layer_scalar, "_scalar"),
            (self.residual_scale, "_scaledres"),
        ] {
            if on {
                name.push_str(suffix);
            }
        }
        format_ident!("{name}")
    }
}

/// The distinct keys of `variants` (one per layer) in order of first use, each with the
/// layers using it (with the identity key: the distinct variants themselves).
pub fn distinct<K: PartialEq + Copy>(
    variants: &[Variant],
    key: impl Fn(&Variant) -> K,
) -> Vec<(K, Vec<usize>)> {
    let mut out: Vec<(K, Vec<usize>)> = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let k = key(v);
        match out.iter_mut().find(|(d, _)| *d == k) {
            Some((_, layers)) => layers.push(i),
            None => out.push((k, vec![i])),
        }
    }
    out
}

/// `Layer 3` or `Layers 0-2, 5`.
fn layers_phrase(layers: &[usize]) -> String {
    let noun = if layers.len() == 1 { "layer" } else { "layers" };
    format!("{noun} {}", ranges(layers))
}

/// The stage function of `key`, used by `layers`.
pub fn pre_function(key: &PreStage, layers: &[usize]) -> TokenStream {
    let code = crate::family::of(key.family);
    let out = code.pre_outputs(key);
    let doc = format!(
        "Before RoPE and the cache update of {}: `[h] -> {out}`.",
        layers_phrase(layers)
    );
    stage_function(
        key.family,
        key.ident(),
        &doc,
        quote!([h]),
        code.pre_stage(key),
    )
}

/// The stage function of `key`, used by `layers`.
pub fn post_function(key: &PostStage, layers: &[usize]) -> TokenStream {
    let code = crate::family::of(key.family);
    let (params, sig) = if key.per_layer_input {
        (quote!([h, o, pli]), "[h, o, pli] -> [h]")
    } else {
        (quote!([h, o]), "[h, o] -> [h]")
    };
    let doc = format!("After attention of {}: `{sig}`.", layers_phrase(layers));
    stage_function(key.family, key.ident(), &doc, params, code.post_stage(key))
}

/// `fn name(m, i, a) -> Result<Vec<Array>>`: its inputs bound from `a` as `params`, the
/// layer's weights as `w`, then `body`.
fn stage_function(
    family: FamilyId,
    name: Ident,
    doc: &str,
    params: TokenStream,
    body: TokenStream,
) -> TokenStream {
    let ty = crate::family::of(family).model_type();
    let name_str = name.to_string();
    let docs = doc::lines(doc);
    quote! {
        #docs
        fn #name(m: &#ty, i: usize, a: &[Array]) -> Result<Vec<Array>> {
            let #params = step::args(#name_str, i, a)?;
            let w = &m.weights.layers[i];
            #body
        }
    }
}
