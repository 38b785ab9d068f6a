//! The generator's output for small synthetic models, pinned by insta: any change to the
//! emitted code shows up as a snapshot diff to review (`cargo insta review`).

mod common;

use common::{kv_config, layer_types, synthetic, texts, with};
use generator::project::module_text;
use serde_json::json;

/// E4B-like: 4 layers, KV sharing (layer 3 reads donor 1), per-layer inputs, 4/8-bit
/// caches.
#[test]
fn e4b_like_sharing_ple_mixed_bits() {
    let config = with(
        common::preset_config_json("gemma4-e4b"),
        json!({
            "num_hidden_layers": 4,
            "layer_types": layer_types("ssfs"),
            "num_kv_shared_layers": 1,
        }),
    );
    let kv = kv_config(&[(0, 4), (1, 8), (2, 4)]);
    let source = synthetic("e4b-like", &texts(&config, Some(kv), None)).unwrap();
    insta::assert_snapshot!(module_text(&source).unwrap());
}

/// 26B-A4B-like: 3 layers with MoE, K=V on the full layer, one cache left float.
#[test]
fn moe_keqv_partly_float() {
    let config = with(
        common::preset_config_json("gemma4-26b-a4b"),
        json!({
            "num_hidden_layers": 3,
            "layer_types": layer_types("ssf"),
        }),
    );
    let kv = kv_config(&[(0, 4), (2, 8)]);
    let source = synthetic("moe-like", &texts(&config, Some(kv), None)).unwrap();
    insta::assert_snapshot!(module_text(&source).unwrap());
}

/// E2B-like on float caches: sharing, double-wide MLP on the sharer, and a layer without
/// a layer scalar.
#[test]
fn float_caches_sharing_missing_scalar() {
    let config = with(
        common::preset_config_json("gemma4-e2b"),
        json!({
            "num_hidden_layers": 3,
            "layer_types": layer_types("sfs"),
            "num_kv_shared_layers": 1,
        }),
    );
    let facts = [true, false, true];
    let source = synthetic("float-like", &texts(&config, None, Some(&facts))).unwrap();
    insta::assert_snapshot!(module_text(&source).unwrap());
}
