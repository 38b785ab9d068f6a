//! The straight-line forward pass: embedding and masks, the caches destructured once
//! into their concrete kinds, one call per layer, the head.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use runtime::plan::{KvRole, ModelPlan};

use crate::doc;
use crate::error::{Error, Result};
use crate::layer::any_cache_variant;
use crate::variant::Variant;

/// Checks what the straight-line pass relies on: caches numbered in donor order, and
/// every sharer reading an earlier exported donor of its type and cache.
pub fn check(plan: &ModelPlan) -> Result<()> {
    let mut next_cache = 0;
    for (i, layer) in plan.layers.iter().enumerate() {
        match layer.kv {
            KvRole::Donor { cache, exported } => {
                if cache != next_cache {
                    return Err(Error::Unsupported(format!(
                        "layer {i} owns cache {cache}, expected {next_cache} (caches are \
                         numbered in donor order)"
                    )));
                }
                next_cache += 1;
                let read = plan
                    .layers
                    .iter()
                    .any(|l| l.kv == KvRole::Sharer { donor: i });
                if exported != read {
                    return Err(Error::Unsupported(format!(
                        "layer {i} is marked exported = {exported}, but {} sharer reads it",
                        if read { "a" } else { "no" }
                    )));
                }
            }
            KvRole::Sharer { donor } => {
                let ok = donor < i
                    && plan.layers[donor].kv.is_donor()
                    && plan.layers[donor].attention == layer.attention
                    && plan.layers[donor].cache == layer.cache;
                if !ok {
                    return Err(Error::Unsupported(format!(
                        "layer {i} shares the K/V of layer {donor}, which is not an earlier \
                         donor of the same attention type and cache"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// `pub fn forward_layers(m, tokens, caches, segments)`.
pub fn function(model_name: &str, plan: &ModelPlan, variants: &[Variant]) -> TokenStream {
    let ty = crate::family::of(plan.family).model_type();
    let patterns = plan.layers.iter().filter(|l| l.kv.is_donor()).map(|l| {
        let kind = any_cache_variant(l.cache);
        let binding = format_ident!("c{}", l.kv.cache_index());
        quote!(AnyCache::#kind(#binding))
    });

    let calls = plan
        .layers
        .iter()
        .zip(variants)
        .enumerate()
        .map(|(i, (layer, v))| {
            let f = format_ident!("{}", v.name());
            let index = Literal::usize_unsuffixed(i);
            let kv = match layer.kv {
                KvRole::Donor { cache, .. } => {
                    let c = format_ident!("c{cache}");
                    quote!(#c)
                }
                KvRole::Sharer { donor } => {
                    let s = format_ident!("shared{donor}");
                    quote!(&#s)
                }
            };
            let binding = if v.is_exported() {
                let s = format_ident!("shared{i}");
                quote!((h, #s))
            } else {
                quote!(h)
            };
            quote!(let #binding = #f(&mut s, #index, &h, #kv)?;)
        });
    let docs = doc::lines(&format!(
        "The {} layers of {model_name}, unrolled: one call per layer, every cache kind and \
         quantization resolved. With `segments` (single-token steps) every stage runs \
         compiled. The caches must be exactly [`CACHE_SIGNATURES`] (the model's guard checks \
         before calling; here a mismatch is an error).",
        plan.layers.len()
    ));
    quote! {
        #docs
        pub fn forward_layers(
            m: &#ty,
            tokens: &Array,
            caches: &mut [AnyCache],
            segments: Option<&mut DecodeSegments>,
        ) -> Result<Array> {
            let mut s = Step::new(m, tokens, caches, segments)?;
            let [#(#patterns),*] = caches else {
                return Err(SPECIALIZATION.cache_mismatch(caches));
            };
            let h = s.h.clone();
            #(#calls)*
            s.finish(&h)
        }
    }
}
