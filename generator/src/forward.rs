//! The straight-line forward pass: embedding and masks, the caches destructured once
//! into their concrete kinds, one call per layer, the head.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use runtime::config::LayerType;
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

/// `pub fn forward_layers(m, tokens, caches)`.
pub fn function(model_name: &str, plan: &ModelPlan, variants: &[Variant]) -> TokenStream {
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
            let h = if i == 0 {
                quote!(&inputs.h)
            } else {
                quote!(&h)
            };
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
            let mask = match layer.attention {
                LayerType::Sliding => quote!(sliding),
                LayerType::Full => quote!(full),
            };
            let inputs = v.per_layer_input.then(|| quote!(, &inputs));
            let binding = if v.is_exported() {
                let s = format_ident!("shared{i}");
                quote!((h, #s))
            } else {
                quote!(h)
            };
            quote!(let #binding = #f(m, #index, #h, #kv, #mask #inputs)?;)
        });
    let h = if plan.layers.is_empty() {
        quote!(&inputs.h)
    } else {
        quote!(&h)
    };
    let uses = |t: LayerType| plan.layers.iter().any(|l| l.attention == t);
    let sliding = uses(LayerType::Sliding).then(|| quote!(let sliding = &masks.sliding;));
    let full = uses(LayerType::Full).then(|| quote!(let full = &masks.full;));
    let docs = doc::lines(&format!(
        "The {} layers of {model_name}, unrolled: one call per layer, every cache kind and \
         quantization resolved. The caches must be exactly [`CACHE_SIGNATURES`] (the model's \
         guard checks before calling; here a mismatch is an error).",
        plan.layers.len()
    ));
    quote! {
        #docs
        pub fn forward_layers(m: &Gemma4, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
            let inputs = blocks::embed(m, tokens)?;
            let masks = blocks::masks(m, caches, inputs.len)?;
            #sliding
            #full
            let [#(#patterns),*] = caches else {
                return Err(cache_mismatch(caches));
            };
            #(#calls)*
            blocks::head(m, #h)
        }
    }
}

/// The errors the straight-line code returns when handed what it was not generated for
/// (the guard keeps both from happening through the model type).
pub fn error_helpers(has_sharers: bool) -> TokenStream {
    let unexpected_kv = has_sharers.then(|| {
        quote! {
            /// A sharer handed K/V of another kind than it was generated for.
            fn unexpected_kv(layer: usize, expected: &str) -> Error {
                Error::Unsupported(format!("layer {layer} was generated for {expected} K/V from its donor"))
            }
        }
    });
    quote! {
        /// `forward_layers` handed caches other than [`CACHE_SIGNATURES`].
        fn cache_mismatch(caches: &[AnyCache]) -> Error {
            let id = IMPLEMENTATION.id;
            let why = guard::mismatch(caches, &CACHE_SIGNATURES).unwrap_or_default();
            Error::Request(format!("{id} was generated for other caches: {why}"))
        }

        #unexpected_kv
    }
}
