//! The function of one layer variant: the runtime blocks `monolith::forward` calls for
//! such a layer, in the same data flow, with every branch decided.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use runtime::config::LayerType;
use runtime::quantization::QuantSpec;
use runtime::signature::CacheSignature;

use crate::doc;
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
        }
    )
}

/// The names of variant `v`'s stage functions: before the cache update, after attention.
pub fn stage_names(v: &Variant) -> (proc_macro2::Ident, proc_macro2::Ident) {
    (
        format_ident!("{}_pre", v.name()),
        format_ident!("{}_post", v.name()),
    )
}

/// The functions of variant `v`, used by `layers`: its two stages (the parts compiled for
/// single-token steps) and the layer function that runs them around the cache update
/// and attention.
pub fn function(v: &Variant, layers: &[usize]) -> TokenStream {
    let name = format_ident!("{}", v.name());
    let (pre, post) = stage_names(v);
    let noun = if layers.len() == 1 { "Layer" } else { "Layers" };
    let which = ranges(layers);
    let docs = doc::lines(&format!("{noun} {which}. {}", v.describe()));

    let code = crate::family::of(v.family);
    let ty = code.model_type();
    let rope = code.rope(v.attention);
    let mask = match v.attention {
        LayerType::Sliding => quote!(LayerType::Sliding),
        LayerType::Full => quote!(LayerType::Full),
    };
    let pre_name = pre.to_string();
    let post_name = post.to_string();

    // Before RoPE and the cache update: norms and projections.
    let pre_body = code.pre_stage(v);
    let pre_doc = doc::lines(&match v.role {
        Role::Donor { .. } => format!(
            "Before RoPE and the cache update of {} {which}: `[h] -> [q, k, v]`.",
            noun.to_lowercase()
        ),
        Role::Sharer => format!(
            "Before RoPE and attention of {} {which}: `[h] -> [q]`.",
            noun.to_lowercase()
        ),
    });
    let pre_fn = quote! {
        #pre_doc
        fn #pre(m: &#ty, i: usize, a: &[Array]) -> Result<Vec<Array>> {
            let [h] = step::args(#pre_name, i, a)?;
            let w = &m.weights.layers[i];
            #pre_body
        }
    };

    // After attention: the family's blocks (output projection, feed-forward, ...).
    let post_body = code.post_stage(v);
    let (post_params, post_sig) = if v.per_layer_input {
        (quote!([h, o, pli]), "[h, o, pli] -> [h]")
    } else {
        (quote!([h, o]), "[h, o] -> [h]")
    };
    let post_doc = doc::lines(&format!(
        "After attention of {} {which}: `{post_sig}`.",
        noun.to_lowercase()
    ));
    let post_fn = quote! {
        #post_doc
        fn #post(m: &#ty, i: usize, a: &[Array]) -> Result<Vec<Array>> {
            let #post_params = step::args(#post_name, i, a)?;
            let w = &m.weights.layers[i];
            #post_body
        }
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
    let attention = match v.role {
        Role::Donor { .. } => {
            let o = attend(quote!(&keys), quote!(&values));
            let inputs = code.attention_inputs(&pre, &rope, quote!(offset), true);
            quote! {
                let offset = cache.offset() as i32;
                #inputs
                let (keys, values) = cache.update_and_fetch(&k, &v)?;
                let o = #o;
            }
        }
        Role::Sharer => {
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
            let inputs = code.attention_inputs(&pre, &rope, quote!(shared.offset), false);
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
        #pre_fn

        #post_fn

        #docs
        fn #name(s: &mut Step<'_>, i: usize, h: &Array, #kv_param) -> #ret {
            let m = s.m;
            #attention
            #post_call
            #tail
        }
    }
}
