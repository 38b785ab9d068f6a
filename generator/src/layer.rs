//! The function of one layer variant: the runtime blocks `monolith::forward` calls for
//! such a layer, in the same data flow, with every branch decided.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use runtime::config::LayerType;
use runtime::quantization::QuantSpec;
use runtime::signature::CacheSignature;

use crate::doc;
use crate::stage::{PostStage, PreStage};
use crate::variant::{Role, Variant, ranges};

/// The module constant naming quantization `q`: `Q4G64`.
pub fn quant_spec(q: QuantSpec) -> TokenStream {
    let name = format_ident!("Q{}G{}", q.bits, q.group_size);
    quote!(#name)
}

/// `const Q4G64: QuantSpec = QuantSpec { bits: 4, group_size: 64 };`
pub fn quant_const(q: QuantSpec) -> TokenStream {
    let name = quant_spec(q);
    let bits = Literal::u32_unsuffixed(q.bits);
    let group = Literal::u32_unsuffixed(q.group_size);
    let doc = format!(
        " {}-bit affine K/V quantization, group size {}.",
        q.bits, q.group_size
    );
    quote! {
        #[doc = #doc]
        const #name: QuantSpec = QuantSpec { bits: #bits, group_size: #group };
    }
}

/// The name of the constant an MLA signature is spelled with (`LATENT`, `LATENT_INDEXED`).
fn mla_const_name(s: CacheSignature) -> proc_macro2::Ident {
    match s {
        CacheSignature::Mla { indexer: true } => format_ident!("LATENT_INDEXED"),
        _ => format_ident!("LATENT"),
    }
}

/// `const LATENT_INDEXED: CacheSignature = ..;` for an MLA signature.
pub fn mla_const(s: CacheSignature) -> TokenStream {
    let name = mla_const_name(s);
    let (doc, indexer) = match s {
        CacheSignature::Mla { indexer: true } => {
            (" An MLA latent cache with the DSA indexer's keys.", true)
        }
        _ => (" An MLA latent cache without indexer keys.", false),
    };
    quote! {
        #[doc = #doc]
        const #name: CacheSignature = CacheSignature::Mla { indexer: #indexer };
    }
}

/// `CacheSignature::…` as a constant expression.
pub fn signature(s: CacheSignature) -> TokenStream {
    match s {
        CacheSignature::Plain => quote!(CacheSignature::Plain),
        CacheSignature::Rotating => quote!(CacheSignature::Rotating),
        CacheSignature::Quant(q) => {
            let q = quant_spec(q);
            quote!(CacheSignature::Quant(#q))
        }
        CacheSignature::RotatingQuant(q) => {
            let q = quant_spec(q);
            quote!(CacheSignature::RotatingQuant(#q))
        }
        CacheSignature::Mla { .. } => {
            let name = mla_const_name(s);
            quote!(#name)
        }
    }
}

/// The `AnyCache` variant holding a cache of signature `s`.
pub fn any_cache_variant(s: CacheSignature) -> proc_macro2::Ident {
    format_ident!(
        "{}",
        match s {
            CacheSignature::Plain => "Plain",
            CacheSignature::Rotating => "Rotating",
            CacheSignature::Quant(_) => "Quant",
            CacheSignature::RotatingQuant(_) => "RotatingQuant",
            CacheSignature::Mla { .. } => "Mla",
        }
    )
}

/// The concrete cache type of signature `s` (in `runtime::cache`).
pub fn cache_type(s: CacheSignature) -> proc_macro2::Ident {
    format_ident!(
        "{}",
        match s {
            CacheSignature::Plain => "KvCache",
            CacheSignature::Rotating => "RotatingKvCache",
            CacheSignature::Quant(_) => "QuantizedKvCache",
            CacheSignature::RotatingQuant(_) => "RotatingQuantizedKvCache",
            CacheSignature::Mla { .. } => "MlaCache",
        }
    )
}

/// The function of variant `v`, used by `layers`: its two stages (the parts compiled for
/// single-token steps, [`crate::stage`]) around the cache update and attention.
pub fn function(v: &Variant, layers: &[usize]) -> TokenStream {
    let name = format_ident!("{}", v.name());
    let pre = PreStage::of(v).ident();
    let post = PostStage::of(v).ident();
    let noun = if layers.len() == 1 { "Layer" } else { "Layers" };
    let which = ranges(layers);
    let docs = doc::lines(&format!("{noun} {which}. {}", v.describe()));

    let code = crate::family::of(v.family);
    let rope = code.rope(v.attention);
    let mask = match v.attention {
        LayerType::Sliding => quote!(LayerType::Sliding),
        LayerType::Full => quote!(LayerType::Full),
    };
    // The layer: stages around the cache update and attention.
    let attend =
        |keys: TokenStream, values: TokenStream| code.attend(v.quant(), keys, values, mask.clone());
    let kv_param = match v.role {
        Role::Donor { .. } => {
            let ty = cache_type(v.cache);
            quote!(cache: &mut #ty)
        }
        Role::Sharer => quote!(shared: &SharedKv),
    };
    let attention = match (v.role, code.donor_attention(v, &pre)) {
        (Role::Donor { .. }, Some(custom)) => custom,
        (Role::Donor { .. }, None) => {
            let o = attend(quote!(&keys), quote!(&values));
            let inputs = code.attention_inputs(&pre, &rope, quote!(&offset), true);
            quote! {
                let offset = cache.rope_offset();
                #inputs
                let (keys, values) = cache.update_and_fetch(&k, &v)?;
                let o = #o;
            }
        }
        (Role::Sharer, _) => {
            let (pattern, what) = match v.quant() {
                None => (quote!(Kv::Float { keys, values }), "float".to_owned()),
                Some(q) => {
                    let spec = quant_spec(q);
                    (
                        quote!(Kv::Quant { keys, values, spec: #spec }),
                        format!("{}-bit group-{}", q.bits, q.group_size),
                    )
                }
            };
            let o = attend(quote!(keys), quote!(values));
            let inputs = code.attention_inputs(&pre, &rope, quote!(&shared.offset), false);
            quote! {
                let #pattern = &shared.kv else {
                    return Err(unexpected_kv(i, #what));
                };
                #inputs
                let o = #o;
            }
        }
    };
    let post_call = if v.per_layer_input {
        let call = code.post_call(&post, quote!(&[h, &o, &pli]));
        quote! {
            let pli = s.per_layer_input(i)?.clone();
            #call
        }
    } else {
        code.post_call(&post, quote!(&[h, &o]))
    };
    let (ret, tail) = if v.is_exported() {
        let kv = match v.quant() {
            None => quote!(Kv::Float { keys, values }),
            Some(q) => {
                let spec = quant_spec(q);
                quote!(Kv::Quant { keys, values, spec: #spec })
            }
        };
        (
            quote!(Result<(Array, SharedKv)>),
            quote! {
                let shared = SharedKv { kv: #kv, offset };
                Ok((h, shared))
            },
        )
    } else {
        (quote!(Result<Array>), quote!(Ok(h)))
    };

    quote! {
        #docs
        fn #name(s: &mut Step<'_>, i: usize, h: &Array, #kv_param) -> #ret {
            let m = s.m;
            #attention
            #post_call
            #tail
        }
    }
}
