//! What a family contributes to the emitted code: where its runtime lives (model type,
//! blocks, step, monolith), the block calls of each stage of a layer variant, and its
//! attention call. The emitter ([`crate::layer`], [`crate::forward`], [`crate::emit`])
//! is one piece of code that asks the family for these and nothing else.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use runtime::config::LayerType;
use runtime::plan::Family;
use runtime::quantization::QuantSpec;

use crate::layer::quant_spec;
use crate::variant::{Role, Variant};

/// A family's part of the emitted code.
pub trait FamilyCode {
    /// The runtime module of the family (`runtime::model::gemma4`).
    fn module(&self) -> TokenStream;

    /// The loaded model type, and the variant naming the family in `Family`,
    /// `Constructor` and `ModelRef` (`Gemma4`).
    fn model_type(&self) -> Ident;

    /// Items of the family's `blocks` module the stages name besides the module itself.
    fn block_imports(&self) -> Vec<TokenStream> {
        Vec::new()
    }

    /// The `use` item of the attention functions `variants` call.
    fn attention_imports(&self, variants: &[Variant]) -> TokenStream;

    /// The RoPE of a layer type (`&m.rope_sliding`).
    fn rope(&self, attention: LayerType) -> TokenStream;

    /// The stage before RoPE and the cache update, after `let [h] = ..; let w = ..;`:
    /// statements ending in `Ok(vec![q, k, v])` (donors) or `Ok(vec![q])` (sharers).
    fn pre_stage(&self, v: &Variant) -> TokenStream;

    /// The stage after attention: one expression per block, each the new `h` (the
    /// inputs are `h`, `o`, and `pli` with per-layer inputs).
    fn post_stage(&self, v: &Variant) -> Vec<TokenStream>;

    /// Attention of `q` over `keys`/`values` (float, or quantized by `quant`) with
    /// `mask`.
    fn attend(
        &self,
        quant: Option<QuantSpec>,
        keys: TokenStream,
        values: TokenStream,
        mask: TokenStream,
    ) -> TokenStream;

    /// How the doc comments name the feed-forward block.
    fn mlp_phrase(&self) -> &'static str;
}

/// The code of `family`.
pub fn of(family: Family) -> &'static dyn FamilyCode {
    match family {
        Family::Gemma4 => &Gemma4Code,
        Family::Llama => &LlamaCode,
    }
}

/// Gemma 4: sliding and full layers, KV sharing, K=V, per-layer inputs, MoE, scalars.
pub struct Gemma4Code;

impl FamilyCode for Gemma4Code {
    fn module(&self) -> TokenStream {
        quote!(runtime::model::gemma4)
    }

    fn model_type(&self) -> Ident {
        format_ident!("Gemma4")
    }

    fn block_imports(&self) -> Vec<TokenStream> {
        vec![quote!(Composition)]
    }

    fn attention_imports(&self, variants: &[Variant]) -> TokenStream {
        let mut nn = vec![];
        if variants.iter().any(|v| v.quant().is_none()) {
            nn.push(quote!(sdpa_with));
        }
        if variants.iter().any(|v| v.quant().is_some()) {
            nn.push(quote!(sdpa_quantized));
        }
        quote!(use runtime::nn::{#(#nn),*};)
    }

    fn rope(&self, attention: LayerType) -> TokenStream {
        match attention {
            LayerType::Sliding => quote!(&m.rope_sliding),
            LayerType::Full => quote!(&m.rope_full),
        }
    }

    fn pre_stage(&self, v: &Variant) -> TokenStream {
        let head_dim = match v.attention {
            LayerType::Sliding => quote!(m.config.head_dim),
            LayerType::Full => quote!(m.config.global_head_dim),
        };
        match v.role {
            Role::Donor { .. } => {
                let k_eq_v = v.k_eq_v;
                quote! {
                    let head_dim = #head_dim as i32;
                    let x = blocks::input_norm(m, w, &h)?;
                    let (q, k, v) = blocks::queries_keys_values(
                        m,
                        &w.attn,
                        &x,
                        head_dim,
                        #k_eq_v,
                        Composition::SingleToken,
                    )?;
                    Ok(vec![q, k, v])
                }
            }
            Role::Sharer => quote! {
                let x = blocks::input_norm(m, w, &h)?;
                let q = blocks::queries(
                    m,
                    &w.attn,
                    &x,
                    #head_dim as i32,
                    Composition::SingleToken,
                )?;
                Ok(vec![q])
            },
        }
    }

    fn post_stage(&self, v: &Variant) -> Vec<TokenStream> {
        let mut after = vec![quote!(blocks::attention_out(
            m,
            w,
            &h,
            &o,
            Composition::SingleToken
        ))];
        // The last block's residual add; with a layer scalar, the add and the scalar
        // become one compiled kernel around the block's delta.
        let last = if v.per_layer_input {
            after.push(if v.moe {
                quote!(blocks::moe_ffn(
                    m,
                    w,
                    blocks::moe_weights(w, i)?,
                    &h,
                    Composition::SingleToken
                ))
            } else {
                quote!(blocks::dense_ffn(m, w, &h, Composition::SingleToken))
            });
            (
                quote!(blocks::per_layer_gate(
                    m,
                    blocks::ple_weights(w, i)?,
                    &h,
                    &pli
                )),
                quote!(blocks::per_layer_delta(
                    m,
                    blocks::ple_weights(w, i)?,
                    &h,
                    &pli
                )?),
            )
        } else if v.moe {
            (
                quote!(blocks::moe_ffn(
                    m,
                    w,
                    blocks::moe_weights(w, i)?,
                    &h,
                    Composition::SingleToken
                )),
                quote!(blocks::moe_ffn_delta(
                    m,
                    w,
                    blocks::moe_weights(w, i)?,
                    &h,
                    Composition::SingleToken
                )?),
            )
        } else {
            (
                quote!(blocks::dense_ffn(m, w, &h, Composition::SingleToken)),
                quote!(blocks::dense_ffn_delta(m, w, &h, Composition::SingleToken)?),
            )
        };
        let (added, delta) = last;
        after.push(if v.layer_scalar {
            quote!(blocks::scaled_residual(
                &h,
                &#delta,
                blocks::scalar_weight(w, i)?,
                Composition::SingleToken
            ))
        } else {
            added
        });
        after
    }

    fn attend(
        &self,
        quant: Option<QuantSpec>,
        keys: TokenStream,
        values: TokenStream,
        mask: TokenStream,
    ) -> TokenStream {
        match quant {
            None => quote!(sdpa_with(
                &q,
                #keys,
                #values,
                s.mask(#mask),
                Composition::SingleToken
            )?),
            Some(spec) => {
                let spec = quant_spec(spec);
                quote!(sdpa_quantized(&q, #keys, #values, #spec, s.mask(#mask))?)
            }
        }
    }

    fn mlp_phrase(&self) -> &'static str {
        "dense MLP"
    }
}

/// The Llama family: full attention over each layer's own cache, SwiGLU, optional
/// q/k norm, attention scaled by `1/sqrt(D)`.
pub struct LlamaCode;

impl FamilyCode for LlamaCode {
    fn module(&self) -> TokenStream {
        quote!(runtime::model::llama)
    }

    fn model_type(&self) -> Ident {
        format_ident!("Llama")
    }

    fn attention_imports(&self, variants: &[Variant]) -> TokenStream {
        let mut nn = vec![];
        if variants.iter().any(|v| v.quant().is_none()) {
            nn.push(quote!(sdpa_scaled));
        }
        if variants.iter().any(|v| v.quant().is_some()) {
            nn.push(quote!(sdpa_quantized_scaled));
        }
        quote!(use runtime::nn::scaled::{#(#nn),*};)
    }

    fn rope(&self, _attention: LayerType) -> TokenStream {
        quote!(&m.rope)
    }

    fn block_imports(&self) -> Vec<TokenStream> {
        vec![quote!(Composition)]
    }

    fn pre_stage(&self, v: &Variant) -> TokenStream {
        let qk_norm = v.qk_norm;
        quote! {
            let x = blocks::input_norm(m, w, &h)?;
            let (q, k, v) = blocks::queries_keys_values(
                m,
                &w.attn,
                &x,
                #qk_norm,
                Composition::SingleToken,
            )?;
            Ok(vec![q, k, v])
        }
    }

    fn post_stage(&self, _v: &Variant) -> Vec<TokenStream> {
        vec![
            quote!(blocks::attention_out(w, &h, &o, Composition::SingleToken)),
            quote!(blocks::mlp(m, w, &h, Composition::SingleToken)),
        ]
    }

    fn attend(
        &self,
        quant: Option<QuantSpec>,
        keys: TokenStream,
        values: TokenStream,
        mask: TokenStream,
    ) -> TokenStream {
        match quant {
            None => quote!(sdpa_scaled(&q, #keys, #values, m.scale, s.mask(#mask))?),
            Some(spec) => {
                let spec = quant_spec(spec);
                quote!(sdpa_quantized_scaled(&q, #keys, #values, #spec, m.scale, s.mask(#mask))?)
            }
        }
    }

    fn mlp_phrase(&self) -> &'static str {
        "SwiGLU MLP"
    }
}
