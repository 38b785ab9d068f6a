//! The checked-in modules of the presets, read back with syn: the layer calls of
//! `forward_layers`, the cache signatures, and the shape of the code.

mod common;

use generator::ModelName;
use generator::project::{self, PRESETS};
use quote::ToTokens;
use runtime::config::LayerType;

/// One `let … = variant(m, i, h, kv, mask, …)?;` of `forward_layers`.
#[derive(Debug)]
struct Call {
    /// What the call binds (`h`, or `(h, shared22)`).
    binding: String,
    /// The variant function.
    function: String,
    /// The arguments, as token text (`& shared22`).
    args: Vec<String>,
}

struct Module {
    file: syn::File,
    text: String,
}

fn module(name: &str) -> Module {
    let path = common::repo_root().join(project::module_path(&ModelName::new(name).unwrap()));
    let text = std::fs::read_to_string(&path).expect("checked-in module");
    let file = syn::parse_file(&text).expect("the module parses");
    Module { file, text }
}

fn function<'a>(m: &'a Module, name: &str) -> Option<&'a syn::ItemFn> {
    m.file.items.iter().find_map(|item| match item {
        syn::Item::Fn(f) if f.sig.ident == name => Some(f),
        _ => None,
    })
}

fn constant<'a>(m: &'a Module, name: &str) -> &'a syn::ItemConst {
    m.file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Const(c) if c.ident == name => Some(c),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no const {name}"))
}

fn text(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

fn layer_calls(m: &Module) -> Vec<Call> {
    let f = function(m, "forward_layers").expect("forward_layers");
    f.block
        .stmts
        .iter()
        .filter_map(|stmt| {
            let syn::Stmt::Local(local) = stmt else {
                return None;
            };
            let init = local.init.as_ref()?;
            let syn::Expr::Try(t) = &*init.expr else {
                return None;
            };
            let syn::Expr::Call(call) = &*t.expr else {
                return None;
            };
            let function = text(&call.func);
            (function.starts_with("donor_") || function.starts_with("sharer_")).then(|| Call {
                binding: text(&local.pat),
                function,
                args: call.args.iter().map(text).collect(),
            })
        })
        .collect()
}

fn cache_signatures(m: &Module) -> Vec<String> {
    let c = constant(m, "CACHE_SIGNATURES");
    let syn::Expr::Array(items) = &*c.expr else {
        panic!("CACHE_SIGNATURES is not an array literal");
    };
    items.elems.iter().map(text).collect()
}

#[test]
fn gemma4_e4b_unrolls_42_layers_over_24_caches() {
    let source = common::preset("gemma4-e4b");
    let m = module("gemma4-e4b");

    let signatures = cache_signatures(&m);
    assert_eq!(signatures.len(), 24);
    assert!(text(&constant(&m, "CACHE_SIGNATURES").ty).contains("24"));
    let eight_bit: Vec<usize> = (0..24)
        .filter(|&i| signatures[i].contains("Q8G64"))
        .collect();
    assert_eq!(eight_bit, [3, 4, 9, 10, 11, 14]);
    assert!(
        signatures
            .iter()
            .all(|s| s.contains("Q8G64") || s.contains("Q4G64"))
    );
    let spec = |name: &str| text(&constant(&m, name).expr).replace(" , }", " }");
    assert_eq!(spec("Q8G64"), "QuantSpec { bits : 8 , group_size : 64 }");
    assert_eq!(spec("Q4G64"), "QuantSpec { bits : 4 , group_size : 64 }");
    for (i, s) in signatures.iter().enumerate() {
        let sliding = source
            .config
            .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
            .expect("gemma4")
            .layer_types[i]
            == LayerType::Sliding;
        let kind = if sliding {
            "RotatingQuant ("
        } else {
            "Quant ("
        };
        assert!(
            s.starts_with(&format!("CacheSignature :: {kind}")),
            "cache {i}: {s}"
        );
    }

    let calls = layer_calls(&m);
    assert_eq!(calls.len(), 42, "one call per layer");
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(call.args[0], "& mut s");
        assert_eq!(call.args[1], i.to_string(), "layer calls in order");
        assert_eq!(call.args[2], "& h");
        assert_eq!(call.args.len(), 4, "{call:?}");
        let sliding = source
            .config
            .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
            .expect("gemma4")
            .layer_types[i]
            == LayerType::Sliding;
        let kind = if sliding { "sliding" } else { "full" };
        assert!(call.function.contains(&format!("_{kind}_")), "{call:?}");
        assert!(call.function.ends_with("_ple_scalar") || call.function.ends_with("_export"));
        let body = text(
            &function(&m, &call.function)
                .expect("variant function")
                .block,
        );
        let mask = if sliding {
            "LayerType :: Sliding"
        } else {
            "LayerType :: Full"
        };
        assert!(
            body.contains(mask),
            "layer {i} attends with its type's mask"
        );
        assert!(
            body.contains("s . per_layer_input (i)"),
            "layer {i} reads its per-layer input"
        );
        if i < 24 {
            assert!(call.function.starts_with("donor_"), "{call:?}");
            assert_eq!(call.args[3], format!("c{i}"));
            let bits = if eight_bit.contains(&i) {
                "q8g64"
            } else {
                "q4g64"
            };
            assert!(call.function.contains(bits), "{call:?}");
        } else {
            assert!(call.function.starts_with("sharer_"), "{call:?}");
            let donor = if sliding { 22 } else { 23 };
            assert_eq!(call.args[3], format!("& shared{donor}"), "layer {i}");
            assert!(call.function.contains("q4g64"), "{call:?}");
        }
    }
    assert_eq!(calls[22].binding, "(h , shared22)");
    assert_eq!(calls[22].function, "donor_sliding_q4g64_ple_scalar_export");
    assert_eq!(calls[23].binding, "(h , shared23)");
    assert_eq!(calls[23].function, "donor_full_q4g64_ple_scalar_export");
    assert!(
        m.text
            .contains(&format!("// fingerprint: {}\n", source.fingerprint()))
    );
}

#[test]
fn gemma4_26b_a4b_has_30_moe_donors_with_keqv_on_full_layers() {
    let source = common::preset("gemma4-26b-a4b");
    let m = module("gemma4-26b-a4b");
    assert_eq!(cache_signatures(&m).len(), 30);
    let calls = layer_calls(&m);
    assert_eq!(calls.len(), 30);
    let mut full = 0;
    for (i, call) in calls.iter().enumerate() {
        assert!(call.function.starts_with("donor_"), "{call:?}");
        assert!(call.function.contains("_moe"), "{call:?}");
        assert_eq!(call.args[3], format!("c{i}"));
        let is_full = source
            .config
            .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
            .expect("gemma4")
            .layer_types[i]
            == LayerType::Full;
        full += usize::from(is_full);
        assert_eq!(call.function.contains("_keqv"), is_full, "{call:?}");
    }
    assert!(full > 0);
    let pre = function(&m, "pre_donor_full_keqv").expect("the K=V MoE variant");
    let body = text(&pre.block);
    assert!(
        body.contains(
            "queries_keys_values (m , & w . attn , & x , head_dim , true , Composition :: SingleToken ,)"
        ),
        "{body}"
    );
    assert!(body.contains("m . config . global_head_dim"));
    let post = function(&m, "post_moe_scalar").expect("its post stage");
    assert!(text(&post.block).contains("blocks :: moe_ffn"));
}

#[test]
fn every_preset_module_is_one_call_per_layer_and_readable() {
    for name in PRESETS {
        let source = common::preset(name);
        let m = module(name);
        let calls = layer_calls(&m);
        assert_eq!(calls.len(), source.plan.layers.len(), "{name}");
        assert_eq!(
            cache_signatures(&m).len(),
            source.plan.num_caches(),
            "{name}"
        );
        for call in &calls {
            assert!(function(&m, &call.function).is_some(), "{name}: {call:?}");
        }
        assert!(m.text.starts_with(&format!(
            "// @generated by `cargo xtask generate {name}`. Do not edit; regenerate.\n"
        )));
        let widest = m.text.lines().map(str::len).max().unwrap_or(0);
        assert!(widest <= 100, "{name}: a {widest}-character line");
        let fingerprint = text(&constant(&m, "FINGERPRINT").expr);
        assert_eq!(
            fingerprint,
            format!("\"{}\"", source.fingerprint()),
            "{name}"
        );
    }
}

#[test]
fn llama_family_presets_are_specialized_by_their_kv_layout_and_qk_norm() {
    // llama-3.2-1b: its per-layer kv layout (8-bit on layers 0, 1, 15, 4-bit elsewhere)
    // gives two variants; every layer a donor over its own growing cache.
    let m = module("llama-3.2-1b");
    let calls = layer_calls(&m);
    assert_eq!(calls.len(), 16);
    for (i, call) in calls.iter().enumerate() {
        let want = if [0, 1, 15].contains(&i) {
            "donor_full_q8g64"
        } else {
            "donor_full_q4g64"
        };
        assert_eq!(call.function, want, "llama-3.2-1b layer {i}");
        assert_eq!(call.binding, "h");
    }
    let post = function(&m, "post_dense").expect("post stage");
    assert!(text(&post.block).contains("blocks :: mlp"));
    assert!(m.text.contains("sdpa_quantized_scaled"));
    assert!(m.text.contains("Specialization<Llama>") && m.text.contains("Specialized<Llama>"));
    assert!(!m.text.contains("gemma4"));
    // qwen3-0.6b: float caches, q/k norm: one variant.
    let q = module("qwen3-0.6b");
    let calls = layer_calls(&q);
    assert_eq!(calls.len(), 28);
    assert!(
        calls
            .iter()
            .all(|c| c.function == "donor_full_plain_qknorm")
    );
    let pre = function(&q, "pre_donor_full_qknorm").expect("pre stage");
    assert!(text(&pre.block).contains(
        "blocks :: queries_keys_values (m , & w . attn , & x , true , Composition :: SingleToken ,)"
    ));
    assert!(q.text.contains("sdpa_scaled (") || q.text.contains("sdpa_scaled("));
}
