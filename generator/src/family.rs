//! What a family contributes to the emitted code: where its runtime lives (model type,
//! blocks, step, monolith), the block calls of each stage of a layer variant, and its
//! attention call. The emitter ([`crate::layer`], [`crate::forward`], [`crate::emit`])
//! is one piece of code that asks the family for these and nothing else.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use runtime::config::LayerType;
use runtime::plan::FamilyId;
use runtime::quantization::QuantSpec;

use crate::layer::quant_spec;
use crate::stage::{PostStage, PreStage};
use crate::variant::Variant;

/// A family's part of the emitted code.
pub trait FamilyCode: Sync {
    /// The runtime module of the family (`runtime::model::gemma4`).
    fn module(&self) -> TokenStream;

    /// The loaded model type (`Gemma4`).
    fn model_type(&self) -> Ident;

    /// Items of the family's `blocks` module the stages name besides the module itself.
    fn block_imports(&self) -> Vec<TokenStream> {
        Vec::new()
    }

    /// Items of the family's `step` module the layer functions name besides `step`,
    /// `DecodeSegments` and `Step`.
    fn step_imports(&self) -> Vec<TokenStream> {
        vec![quote!(Stage)]
    }

    /// The `use` item of the attention functions `variants` call.
    fn attention_imports(&self, variants: &[Variant]) -> TokenStream;

    /// The RoPE of a layer type (`&m.rope_sliding`).
    fn rope(&self, attention: LayerType) -> TokenStream;

    /// The stage before RoPE and the cache update, after `let [h] = ..; let w = ..;`:
    /// statements ending in `Ok(vec![q, k, v])` (donors) or `Ok(vec![q])` (sharers).
    fn pre_stage(&self, key: &PreStage) -> TokenStream;

    /// The stage after attention, after `let [h, o, ..] = ..; let w = ..;`: statements
    /// ending in its outputs, `Ok(vec![h, ..])` (the inputs are `h`, `o`, and `pli` with
    /// per-layer inputs).
    fn post_stage(&self, key: &PostStage) -> TokenStream;

    /// Statements of a layer function binding its attention inputs, `q, k, v` (a donor)
    /// or `q`, from the residual stream `h` by the `pre` stage and RoPE at `offset`.
    fn attention_inputs(
        &self,
        pre: &Ident,
        rope: &TokenStream,
        offset: TokenStream,
        donor: bool,
    ) -> TokenStream {
        if donor {
            quote! {
                // RoPE stays outside the compiled stages: on the CPU it is a composition
                // of ops whose fused form rounds differently.
                let [q, k, v] = s.run(i, Stage::Pre, #pre, &[h])?;
                let k = blocks::rope(#rope, &k, #offset)?;
                let q = blocks::rope(#rope, &q, #offset)?;
            }
        } else {
            quote! {
                let [q] = s.run(i, Stage::Pre, #pre, &[h])?;
                let q = blocks::rope(#rope, &q, #offset)?;
            }
        }
    }

    /// The statement of a layer function binding the new `h` from the `post` stage run on
    /// `args`.
    fn post_call(&self, post: &Ident, args: TokenStream) -> TokenStream {
        quote!(let [h] = s.run(i, Stage::Post, #post, #args)?;)
    }

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

    /// The outputs of the pre stage `key`, for its doc comment.
    fn pre_outputs(&self, key: &PreStage) -> &'static str {
        if key.donor { "[q, k, v]" } else { "[q]" }
    }

    /// For a family whose attention is not over K/V (MLA's latent): the statements of a
    /// donor layer's function from its pre stage `pre` to `let o = ..;`, replacing RoPE,
    /// the K/V cache update and [`FamilyCode::attend`].
    fn donor_attention(&self, _v: &Variant, _pre: &Ident) -> Option<TokenStream> {
        None
    }
}

/// Every family's code, by the family's name: the generator's side of
/// `runtime::families::ALL`.
static ALL: &[(&str, &dyn FamilyCode)] = &[
    ("gemma4", &Gemma4Code),
    ("llama", &LlamaCode),
    ("mla", &MlaCode),
];

/// The code of `family`; an error naming it when the generator has none.
pub fn find(family: FamilyId) -> crate::error::Result<&'static dyn FamilyCode> {
    ALL.iter()
        .find(|(name, _)| *name == family.name())
        .map(|(_, code)| *code)
        .ok_or_else(|| {
            crate::error::Error::Unsupported(format!(
                "the generator has no code for the {family} family"
            ))
        })
}

/// The code of `family`, which [`crate::variant::Variant::of`] (where every plan's layers
/// go first) checked the generator has.
pub fn of(family: FamilyId) -> &'static dyn FamilyCode {
    find(family).expect("Variant::of checks that the generator knows the family")
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

    fn pre_stage(&self, v: &PreStage) -> TokenStream {
        let head_dim = match v.attention {
            LayerType::Sliding => quote!(m.config.head_dim),
            LayerType::Full => quote!(m.config.global_head_dim),
        };
        if v.donor {
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
        } else {
            quote! {
                let x = blocks::input_norm(m, w, &h)?;
                let q = blocks::queries(
                    m,
                    &w.attn,
                    &x,
                    #head_dim as i32,
                    Composition::SingleToken,
                )?;
                Ok(vec![q])
            }
        }
    }

    fn step_imports(&self) -> Vec<TokenStream> {
        Vec::new()
    }

    fn attention_inputs(
        &self,
        pre: &Ident,
        rope: &TokenStream,
        offset: TokenStream,
        donor: bool,
    ) -> TokenStream {
        // RoPE follows the pre stage outside it (on the CPU its fused form rounds
        // differently); with the fused CUDA kernels norms and RoPE are one kernel.
        if donor {
            quote!(let [q, k, v] = s.attention_inputs(i, #pre, h, #rope, #offset)?;)
        } else {
            quote!(let [q] = s.attention_inputs(i, #pre, h, #rope, #offset)?;)
        }
    }

    fn post_call(&self, post: &Ident, args: TokenStream) -> TokenStream {
        quote!(let h = s.run_post(i, #post, #args)?;)
    }

    fn post_stage(&self, v: &PostStage) -> TokenStream {
        if v.moe {
            return moe_post_stage(v);
        }
        // Dense: the attention residual with the feed-forward's input norm, then the
        // layer's last residual add (the per-layer input's, else the feed-forward's),
        // which in a fused single-token step also norms the next layer's input.
        let scalar = if v.layer_scalar {
            quote!(Some(blocks::scalar_weight(w, i)?))
        } else {
            quote!(None)
        };
        let end = if v.per_layer_input {
            quote! {
                let h = blocks::ffn_residual(m, w, &h, &f, Composition::SingleToken)?;
                let ple = blocks::ple_weights(w, i)?;
                let d = blocks::per_layer_raw(m, ple, &h, &pli, Composition::SingleToken)?;
                blocks::layer_end(m, i, &h, &d, &ple.post_norm, #scalar, Composition::SingleToken)
            }
        } else {
            quote! {
                let d = blocks::ffn_raw(m, w, &f, Composition::SingleToken)?;
                blocks::layer_end(m, i, &h, &d, &w.post_ffn_norm, #scalar, Composition::SingleToken)
            }
        };
        quote! {
            let (h, f) = blocks::attention_residual(m, w, &h, &o, Composition::SingleToken)?;
            #end
        }
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
                Composition::SingleToken,
                &m.options
            )?),
            Some(spec) => {
                let spec = quant_spec(spec);
                quote!(sdpa_quantized(
                    &q,
                    #keys,
                    #values,
                    #spec,
                    s.mask(#mask),
                    &m.options
                )?)
            }
        }
    }

    fn mlp_phrase(&self) -> &'static str {
        "dense MLP"
    }
}

/// The post stage of a Gemma 4 layer with MoE: the attention residual, the dense MLP and
/// the experts, then the per-layer input and scalar where the layer has them.
fn moe_post_stage(v: &PostStage) -> TokenStream {
    let moe = quote!(blocks::moe_ffn(
        m,
        w,
        blocks::moe_weights(w, i)?,
        &h,
        Composition::SingleToken
    ));
    let mut after = vec![quote!(blocks::attention_out(
        m,
        w,
        &h,
        &o,
        Composition::SingleToken
    ))];
    // The last block's residual add; with a layer scalar, the add and the scalar become
    // one compiled kernel around the block's delta.
    let (added, delta) = if v.per_layer_input {
        after.push(moe);
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
    } else {
        (
            moe,
            quote!(blocks::moe_ffn_delta(
                m,
                w,
                blocks::moe_weights(w, i)?,
                &h,
                Composition::SingleToken
            )?),
        )
    };
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
    let steps = after.iter().map(|step| quote!(let h = #step?;));
    quote! {
        #(#steps)*
        Ok(vec![h])
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
        vec![quote!(Composition), quote!(Residual)]
    }

    fn pre_stage(&self, v: &PreStage) -> TokenStream {
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

    fn post_stage(&self, v: &PostStage) -> TokenStream {
        let residual = if v.residual_scale {
            quote!(Residual::Scaled)
        } else {
            quote!(Residual::Plain)
        };
        quote! {
            let h = blocks::attention_out(m, w, &h, &o, #residual, Composition::SingleToken)?;
            let h = blocks::mlp(m, w, &h, #residual, Composition::SingleToken)?;
            Ok(vec![h])
        }
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
                quote!(sdpa_quantized_scaled(
                    &q,
                    #keys,
                    #values,
                    #spec,
                    m.scale,
                    s.mask(#mask),
                    &m.options
                )?)
            }
        }
    }

    fn mlp_phrase(&self) -> &'static str {
        "SwiGLU MLP"
    }
}

/// The MLA family: multi-head latent attention over each layer's own latent cache with
/// the DSA indexer, dense or routed SwiGLU. Its attention is one runtime block
/// (`blocks::latent_attention`) between the two stages, as the monolith calls it.
pub struct MlaCode;

impl FamilyCode for MlaCode {
    fn module(&self) -> TokenStream {
        quote!(runtime::model::mla)
    }

    fn model_type(&self) -> Ident {
        format_ident!("Mla")
    }

    fn block_imports(&self) -> Vec<TokenStream> {
        vec![quote!(PreAttention)]
    }

    fn step_imports(&self) -> Vec<TokenStream> {
        vec![quote!(Stage)]
    }

    fn attention_imports(&self, _variants: &[Variant]) -> TokenStream {
        TokenStream::new()
    }

    fn rope(&self, _attention: LayerType) -> TokenStream {
        quote!(&m.rope)
    }

    fn pre_stage(&self, v: &PreStage) -> TokenStream {
        if v.own_indexer {
            quote!(blocks::pre_attention_indexed(m, w, &h))
        } else {
            quote!(blocks::pre_attention(m, w, &h))
        }
    }

    fn post_stage(&self, v: &PostStage) -> TokenStream {
        let ffn = if v.moe {
            quote!(blocks::moe_ffn(m, w, &h)?)
        } else {
            quote!(blocks::dense_ffn(m, w, &h)?)
        };
        // The expression stays out of `vec![..]`: macro bodies are printed as tokens,
        // not formatted.
        quote! {
            let h = blocks::attention_out(w, &h, &o)?;
            let h = #ffn;
            Ok(vec![h])
        }
    }

    fn pre_outputs(&self, key: &PreStage) -> &'static str {
        if key.own_indexer {
            "[q_nope, q_pe, latent, k_pe, index_q, index_k, index_weights]"
        } else {
            "[q_nope, q_pe, latent, k_pe]"
        }
    }

    fn donor_attention(&self, v: &Variant, pre: &Ident) -> Option<TokenStream> {
        // The pre stage's outputs become the block's input through the constructor the
        // monolith uses too.
        let own_indexer = v.own_indexer();
        let n = proc_macro2::Literal::usize_unsuffixed(if own_indexer { 7 } else { 4 });
        Some(quote! {
            let outputs: [Array; #n] = s.run(i, Stage::Pre, #pre, &[h])?;
            let pre = PreAttention::from_outputs(outputs.into(), #own_indexer)?;
            let attn = &m.weights.layers[i].attn;
            let (mask, chosen) = s.mask_and_carry(LayerType::Full);
            let o = blocks::latent_attention(m, attn, i, cache, pre, mask, chosen)?;
        })
    }

    fn attend(
        &self,
        _quant: Option<QuantSpec>,
        _keys: TokenStream,
        _values: TokenStream,
        _mask: TokenStream,
    ) -> TokenStream {
        // Never reached: every MLA layer is a donor, whose attention is
        // `donor_attention`'s.
        quote!(compile_error!(
            "MLA layers attend through blocks::latent_attention"
        ))
    }

    fn mlp_phrase(&self) -> &'static str {
        "SwiGLU feed-forward"
    }
}
