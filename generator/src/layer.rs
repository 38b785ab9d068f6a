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

/// The function of variant `v`, used by `layers`.
pub fn function(v: &Variant, layers: &[usize]) -> TokenStream {
    let name = format_ident!("{}", v.name());
    let noun = if layers.len() == 1 { "Layer" } else { "Layers" };
    let docs = doc::lines(&format!("{noun} {}. {}", ranges(layers), v.describe()));

    let (head_dim, rope) = match v.attention {
        LayerType::Sliding => (quote!(m.config.head_dim), quote!(&m.rope_sliding)),
        LayerType::Full => (quote!(m.config.global_head_dim), quote!(&m.rope_full)),
    };
    let mut params = vec![quote!(m: &Gemma4), quote!(i: usize), quote!(h: &Array)];
    let kv_param = match v.role {
        Role::Donor { .. } => {
            let ty = cache_type(v.cache);
            quote!(cache: &mut #ty)
        }
        Role::Sharer => quote!(shared: &SharedKv),
    };
    params.push(kv_param);
    params.push(quote!(mask: &AttnMask));
    if v.per_layer_input {
        params.push(quote!(inputs: &StepInputs));
    }

    // The steps that produce the attention output `o`.
    let attend = |keys: TokenStream, values: TokenStream| match v.quant() {
        None => quote!(sdpa(&q, #keys, #values, mask)?),
        Some(spec) => {
            let spec = quant_spec(spec);
            quote!(sdpa_quantized(&q, #keys, #values, #spec, mask)?)
        }
    };
    let attention = match v.role {
        Role::Donor { .. } => {
            let k_eq_v = v.k_eq_v;
            let o = attend(quote!(&keys), quote!(&values));
            quote! {
                let offset = cache.offset() as i32;
                let (k, v) = blocks::keys_values(m, &w.attn, &x, head_dim, #k_eq_v)?;
                let k = blocks::rope(#rope, &k, offset)?;
                let (keys, values) = cache.update_and_fetch(&k, &v)?;
                let q = blocks::rope(#rope, &q, offset)?;
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
            quote! {
                let #pattern = &shared.kv else {
                    return Err(unexpected_kv(i, #what));
                };
                let q = blocks::rope(#rope, &q, shared.offset)?;
                let o = #o;
            }
        }
    };

    // The steps after attention, each producing the next `h`; the last one is the
    // function's value unless the K/V is exported too.
    let mut after = vec![quote!(blocks::attention_out(m, w, h, &o))];
    after.push(if v.moe {
        quote!(blocks::moe_ffn(m, w, blocks::moe_weights(w, i)?, &h))
    } else {
        quote!(blocks::dense_ffn(m, w, &h))
    });
    let mut pli = None;
    if v.per_layer_input {
        pli = Some(quote!(let pli = blocks::per_layer_input(inputs, i as i32)?;));
        after.push(quote!(blocks::per_layer_gate(
            m,
            blocks::ple_weights(w, i)?,
            &h,
            &pli
        )));
    }
    if v.layer_scalar {
        after.push(quote!(blocks::layer_scalar(
            &h,
            blocks::scalar_weight(w, i)?
        )));
    }

    let mut steps = TokenStream::new();
    let last = after.len() - 1;
    let mut tail = None;
    for (n, step) in after.into_iter().enumerate() {
        if v.per_layer_input && n == 2 {
            steps.extend(pli.take());
        }
        if n == last && !v.is_exported() {
            tail = Some(step);
        } else {
            steps.extend(quote!(let h = #step?;));
        }
    }
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
        (
            quote!(Result<Array>),
            tail.expect("a layer ends with a block"),
        )
    };

    quote! {
        #docs
        fn #name(#(#params),*) -> #ret {
            let w = &m.weights.layers[i];
            let head_dim = #head_dim as i32;
            let x = blocks::input_norm(m, w, h)?;
            let q = blocks::queries(m, &w.attn, &x, head_dim)?;
            #attention
            #steps
            #tail
        }
    }
}
