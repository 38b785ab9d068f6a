//! Config, kv layout and plan resolution: the presets parse, and every bad input is one
//! error naming the file and key.

use runtime::Error;
use runtime::config::LayerType;
use runtime::kv_layout::KvLayout;
use runtime::model::gemma4::Gemma4Config;
use runtime::model::gemma4::plan::WeightFacts;
use runtime::plan::KvRole;
use runtime::signature::CacheSignature;
use serde_json::Value;

const PRESETS: [&str; 5] = [
    "gemma4-e2b",
    "gemma4-e4b",
    "gemma4-12b",
    "gemma4-26b-a4b",
    "gemma4-31b",
];

fn preset_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../generated/models")
        .join(name)
}

fn preset_json(name: &str) -> Value {
    let text =
        std::fs::read_to_string(preset_dir(name).join("config.json")).expect("preset config");
    serde_json::from_str(&text).unwrap()
}

fn parse(v: &Value) -> Result<Gemma4Config, Error> {
    Gemma4Config::from_value("test.json", v)
}

fn config_err_key(v: &Value) -> String {
    match parse(v) {
        Err(Error::Config { key, file, .. }) => {
            assert_eq!(file, "test.json");
            key
        }
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn every_preset_parses_and_resolves() {
    for name in PRESETS {
        let dir = preset_dir(name);
        let config = Gemma4Config::from_file(&dir.join("config.json")).unwrap();
        let kv_path = dir.join("kv_config.json");
        let kv = if kv_path.exists() {
            KvLayout::from_file(&kv_path).unwrap()
        } else {
            KvLayout::float()
        };
        let plan = runtime::model::gemma4::plan::resolve(
            &config,
            &kv,
            &WeightFacts::all_scalars(config.num_hidden_layers),
        )
        .unwrap();
        assert_eq!(plan.layers.len(), config.num_hidden_layers, "{name}");
        assert_eq!(plan.num_caches(), config.first_shared_layer(), "{name}");
    }
}

#[test]
fn e4b_sharers_read_the_last_donor_of_their_type() {
    let config = Gemma4Config::from_file(&preset_dir("gemma4-e4b").join("config.json")).unwrap();
    let kv = KvLayout::from_file(&preset_dir("gemma4-e4b").join("kv_config.json")).unwrap();
    let plan =
        runtime::model::gemma4::plan::resolve(&config, &kv, &WeightFacts::all_scalars(42)).unwrap();
    for (i, layer) in plan.layers.iter().enumerate() {
        match layer.kv {
            KvRole::Donor { cache, exported } => {
                assert!(i < 24);
                assert_eq!(cache, i);
                assert_eq!(exported, i == 22 || i == 23, "layer {i}");
            }
            KvRole::Sharer { donor } => {
                assert!(i >= 24);
                let expected = if layer.attention == LayerType::Full {
                    23
                } else {
                    22
                };
                assert_eq!(donor, expected, "layer {i}");
            }
        }
    }
    let eight: Vec<usize> = plan
        .cache_signatures()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.quant().is_some_and(|q| q.bits == 8))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(eight, [3, 4, 9, 10, 11, 14]);
    assert_eq!(plan.cache_signatures()[5].to_string(), "kv:quant:4:64");
    assert_eq!(
        plan.cache_signatures()[0].to_string(),
        "kv:rotating-quant:4:64"
    );
    assert_eq!(plan.cache_signatures()[11].to_string(), "kv:quant:8:64");
}

#[test]
fn nested_text_config_reads_like_flat() {
    let flat = preset_json("gemma4-e4b");
    let nested = serde_json::json!({"model_type": "gemma4", "text_config": flat.clone(), "vocab_size": 262144});
    let a = parse(&flat).unwrap();
    let b = parse(&nested).unwrap();
    assert_eq!(a.layer_types, b.layer_types);
    assert_eq!(a.hidden_size, b.hidden_size);
    assert_eq!(a.vocab_size, b.vocab_size);
}

#[test]
fn layer_types_of_the_wrong_length_is_named() {
    let mut v = preset_json("gemma4-e4b");
    v["layer_types"].as_array_mut().unwrap().pop();
    assert_eq!(config_err_key(&v), "layer_types");
    let msg = parse(&v).unwrap_err().to_string();
    assert!(msg.contains("41 entries") && msg.contains("42"), "{msg}");
}

#[test]
fn unknown_layer_type_is_named_with_its_index() {
    let mut v = preset_json("gemma4-e4b");
    v["layer_types"][3] = Value::from("chunked_attention");
    assert_eq!(config_err_key(&v), "layer_types[3]");
}

#[test]
fn moe_without_top_k_is_named() {
    let mut v = preset_json("gemma4-26b-a4b");
    v.as_object_mut().unwrap().remove("top_k_experts");
    assert_eq!(config_err_key(&v), "top_k_experts");
}

#[test]
fn every_structural_key_is_required() {
    for key in [
        "hidden_size",
        "num_hidden_layers",
        "layer_types",
        "num_kv_shared_layers",
        "use_double_wide_mlp",
        "hidden_size_per_layer_input",
        "final_logit_softcapping",
        "rope_parameters",
        "attention_k_eq_v",
        "sliding_window",
        "head_dim",
        "global_head_dim",
    ] {
        let mut v = preset_json("gemma4-e2b");
        v.as_object_mut().unwrap().remove(key);
        assert_eq!(config_err_key(&v), key, "removing {key}");
    }
}

#[test]
fn bad_values_name_their_key() {
    let cases: [(&str, Value, &str); 4] = [
        ("hidden_size", Value::from("big"), "hidden_size"),
        (
            "num_kv_shared_layers",
            Value::from(42),
            "num_kv_shared_layers",
        ),
        (
            "hidden_activation",
            Value::from("relu"),
            "hidden_activation",
        ),
        ("rms_norm_eps", Value::from(-1.0), "rms_norm_eps"),
    ];
    for (key, value, expect) in cases {
        let mut v = preset_json("gemma4-e4b");
        v[key] = value;
        assert_eq!(config_err_key(&v), expect);
    }
    let mut v = preset_json("gemma4-e4b");
    v["rope_parameters"]["full_attention"]["rope_type"] = Value::from("yarn");
    assert_eq!(
        config_err_key(&v),
        "rope_parameters.full_attention.rope_type"
    );
}

#[test]
fn malformed_json_names_the_file() {
    let err = Gemma4Config::from_json_str("broken.json", "{ not json").unwrap_err();
    assert!(err.to_string().starts_with("broken.json:"), "{err}");
}

#[test]
fn kv_config_naming_a_sharer_is_refused() {
    let config = parse(&preset_json("gemma4-e4b")).unwrap();
    let kv = KvLayout::from_json_str(
        "kv.json",
        r#"[{"layer_idx": 30, "bits": 4, "group_size": 64}]"#,
    )
    .unwrap();
    let err = runtime::model::gemma4::plan::resolve(&config, &kv, &WeightFacts::all_scalars(42))
        .unwrap_err();
    match &err {
        Error::Config { file, key, message } => {
            assert_eq!(file, "kv.json");
            assert_eq!(key, "[0].layer_idx");
            assert!(message.contains("0..24"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn kv_config_errors_name_the_entry() {
    let dup = r#"[{"layer_idx": 1, "bits": 4}, {"layer_idx": 1, "bits": 8}]"#;
    let err = KvLayout::from_json_str("kv.json", dup)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[1].layer_idx") && err.contains("twice"),
        "{err}"
    );
    let bad_bits = r#"[{"layer_idx": 1, "bits": 7, "group_size": 64}]"#;
    let err = KvLayout::from_json_str("kv.json", bad_bits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("[0].bits"), "{err}");
    let not_list = r#"{"layer_idx": 1}"#;
    assert!(KvLayout::from_json_str("kv.json", not_list).is_err());
    // group_size is optional with a default of 64 (mlx-optiq).
    let kv = KvLayout::from_json_str("kv.json", r#"[{"layer_idx": 2, "bits": 8}]"#).unwrap();
    assert_eq!(kv.get(2).unwrap().group_size, 64);
}

#[test]
fn signatures_display_and_parse() {
    for s in [
        "kv:plain",
        "kv:rotating",
        "kv:quant:8:64",
        "kv:rotating-quant:4:64",
    ] {
        let sig: CacheSignature = s.parse().unwrap();
        assert_eq!(sig.to_string(), s);
    }
    assert!("kv:quant:7:64".parse::<CacheSignature>().is_err());
    assert!("kv:ring".parse::<CacheSignature>().is_err());
}
