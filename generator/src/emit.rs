//! One model module: header, `FINGERPRINT`, `CACHE_SIGNATURES`, the layer-variant
//! functions, `forward_layers`, and what the module declares to the runtime
//! (`SPECIALIZATION`, `IMPLEMENTATION`; the guard and wrapper are the runtime's
//! `Specialized`). Built with `quote`, checked by `syn`, printed by `prettyplease`.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use runtime::fingerprint::Fingerprint;
use runtime::plan::ModelPlan;
use runtime::signature::CacheSignature;

use crate::error::Result;
use crate::ident::ModelName;
use crate::stage::{self, PostStage, PreStage};
use crate::variant::Variant;
use crate::{doc, forward, header, layer, print};

/// What a model module is generated from.
#[derive(Debug, Clone, Copy)]
pub struct ModuleSpec<'a> {
    /// The model name.
    pub name: &'a ModelName,
    /// The folder of its inputs, relative to the repository root.
    pub source_folder: &'a str,
    /// The input files read from that folder.
    pub source_files: &'a [&'a str],
    /// The resolved plan.
    pub plan: &'a ModelPlan,
}

/// The variants of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variants {
    /// The variant of each layer.
    pub per_layer: Vec<Variant>,
    /// The distinct variants in order of first use, each with the layers using it.
    pub distinct: Vec<(Variant, Vec<usize>)>,
}

/// The variants of `plan`.
pub fn variants(plan: &ModelPlan) -> Result<Variants> {
    let per_layer = plan
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| Variant::of(plan.family, i, l))
        .collect::<Result<Vec<_>>>()?;
    let distinct = stage::distinct(&per_layer, |v| *v);
    Ok(Variants {
        per_layer,
        distinct,
    })
}

/// The text of the model module of `spec`.
pub fn model_module(spec: ModuleSpec<'_>) -> Result<String> {
    let tokens = model_tokens(spec)?;
    let body = print::file(spec.name.as_str(), tokens)?;
    let fingerprint = Fingerprint::of(spec.plan).short();
    Ok(header::model(
        spec.name.as_str(),
        spec.source_folder,
        spec.source_files,
        &fingerprint,
    ) + &body)
}

fn model_tokens(spec: ModuleSpec<'_>) -> Result<TokenStream> {
    let plan = spec.plan;
    let name = spec.name.as_str();
    forward::check(plan)?;
    let Variants {
        per_layer,
        distinct,
    } = variants(plan)?;
    let signatures = plan.cache_signatures();
    let fingerprint = Fingerprint::of(plan).short();

    let module_doc = doc::inner(&format!(
        "{name}, specialized by mlx-aot: {} ({}, {}) over {}, in {}.\n\n\
         [`{}`] runs [`forward_layers`] when the loaded model's plan has [`FINGERPRINT`] and \
         the caches match [`CACHE_SIGNATURES`] (the runtime's `Specialized` guard); on any \
         other call it runs the monolith, which computes the same bits more slowly.",
        count(plan.layers.len(), "layer"),
        count(plan.num_caches(), "donor"),
        count(plan.layers.len() - plan.num_caches(), "sharer"),
        count(signatures.len(), "cache"),
        count(distinct.len(), "layer variant"),
        spec.name.type_name(),
    ));
    let uses = imports(plan, &per_layer);

    let n = Literal::usize_unsuffixed(signatures.len());
    let signature_items = signatures.iter().map(|&s| layer::signature(s));
    let pre_stages = stage::distinct(&per_layer, PreStage::of);
    let post_stages = stage::distinct(&per_layer, PostStage::of);
    let stage_functions = pre_stages
        .iter()
        .map(|(k, layers)| stage::pre_function(k, layers))
        .chain(
            post_stages
                .iter()
                .map(|(k, layers)| stage::post_function(k, layers)),
        );
    let functions = distinct
        .iter()
        .map(|(v, layers)| layer::function(v, layers));
    let forward = forward::function(name, plan, &per_layer);
    let mut specs: Vec<_> = signatures.iter().filter_map(|s| s.quant()).collect();
    specs.sort();
    specs.dedup();
    let quant_consts = specs.into_iter().map(layer::quant_const);
    let mut latent: Vec<_> = signatures
        .iter()
        .copied()
        .filter(|s| matches!(s, CacheSignature::Mla { .. }))
        .collect();
    latent.sort();
    latent.dedup();
    let latent_consts = latent.into_iter().map(layer::mla_const);
    let model = model_type(spec, plan);

    Ok(quote! {
        #module_doc
        #uses

        /// The fingerprint of the plan this module was generated for.
        pub const FINGERPRINT: &str = #fingerprint;

        /// The cache signatures the fast path runs on, in cache order.
        pub const CACHE_SIGNATURES: [CacheSignature; #n] = [#(#signature_items),*];

        #(#quant_consts)*

        #(#latent_consts)*

        #(#stage_functions)*

        #(#functions)*

        #forward

        #model
    })
}

/// `1 layer`, `2 layers`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The `use` items the module needs, and no others.
fn imports(plan: &ModelPlan, variants: &[Variant]) -> TokenStream {
    let signatures = plan.cache_signatures();
    let has = |f: &dyn Fn(&CacheSignature) -> bool| signatures.iter().any(f);
    let any_quant = has(&|s| s.quant().is_some());

    let mut cache = vec![quote!(AnyCache)];
    if has(&|s| *s == CacheSignature::Plain) {
        cache.push(quote!(KvCache));
    }
    if has(&|s| *s == CacheSignature::Rotating) {
        cache.push(quote!(RotatingKvCache));
    }
    if has(&|s| matches!(s, CacheSignature::Quant(_))) {
        cache.push(quote!(QuantizedKvCache));
    }
    if has(&|s| matches!(s, CacheSignature::RotatingQuant(_))) {
        cache.push(quote!(RotatingQuantizedKvCache));
    }
    if has(&|s| matches!(s, CacheSignature::Mla { .. })) {
        cache.push(quote!(MlaCache));
    }
    let shares = variants.iter().any(|v| !v.is_donor() || v.is_exported());
    if shares {
        cache.push(quote!(Kv));
    }
    cache.sort_by_key(|t| t.to_string());

    let mut block_items = vec![quote!(self)];
    if shares {
        block_items.push(quote!(SharedKv));
    }
    let code = crate::family::of(plan.family);
    block_items.extend(code.block_imports());
    let module = code.module();
    let ty = code.model_type();
    let blocks = if block_items.len() == 1 {
        quote!(
            use #module::blocks;
        )
    } else {
        quote!(use #module::blocks::{#(#block_items),*};)
    };
    let attention = code.attention_imports(variants);
    let step_items = code.step_imports();
    let quant = any_quant.then(|| {
        quote!(
            use runtime::quantization::QuantSpec;
        )
    });

    let sharers = variants.iter().any(|v| !v.is_donor());
    let specialized = if sharers {
        quote!(
            use runtime::specialized::{Specialization, Specialized, unexpected_kv};
        )
    } else {
        quote!(
            use runtime::specialized::{Specialization, Specialized};
        )
    };

    quote! {
        use runtime::cache::{#(#cache),*};
        use runtime::error::Result;
        use runtime::mlx_rs::Array;
        #blocks
        use runtime::config::LayerType;
        use #module::step::{self, DecodeSegments, #(#step_items,)* Step};
        use #module::#ty;
        #attention
        #quant
        use runtime::registry::Implementation;
        use runtime::signature::CacheSignature;
        #specialized
    }
}

/// The model type (the runtime's wrapper over the family's model), `SPECIALIZATION` and
/// `IMPLEMENTATION`.
fn model_type(spec: ModuleSpec<'_>, plan: &ModelPlan) -> TokenStream {
    let ty = format_ident!("{}", spec.name.type_name());
    let name = spec.name.as_str();
    let id = spec.name.implementation_id();
    let source = spec.source_folder;
    let tag = crate::family::of(plan.family).model_type();
    let type_doc = doc::lines(&format!(
        "{name} with its generated fast path: the runtime's guard (the plan's fingerprint, \
         checked once, and the live cache signatures, checked every call) in front of \
         [`forward_layers`], the monolith behind it, and a count of the calls the fast path \
         took."
    ));
    let specialization_doc = doc::lines(&format!(
        "What the runtime needs of {name}: id, fingerprint, source folder, cache \
         signatures and the unrolled layers."
    ));
    quote! {
        #type_doc
        pub type #ty = Specialized<#tag>;

        #specialization_doc
        pub static SPECIALIZATION: Specialization<#tag> = Specialization {
            id: #id,
            fingerprint: FINGERPRINT,
            source: #source,
            cache_signatures: &CACHE_SIGNATURES,
            forward_layers,
        };

        /// The registry entry.
        pub const IMPLEMENTATION: Implementation = SPECIALIZATION.implementation();
    }
}
