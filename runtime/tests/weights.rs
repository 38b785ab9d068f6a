//! Loading weights: single and sharded safetensors, float and quantized, and one clear
//! error for a missing tensor, a wrong shape, a truncated file, a broken index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mlx_rs::Array;
use runtime::Error;
use runtime::kv_layout::KvLayout;
use runtime::model::Loaded;
use runtime::model::gemma4::Gemma4;
use runtime::model::gemma4::Gemma4Config;
use runtime::model::gemma4::synth;
use runtime::options::ExecOptions;
use runtime::quantization::QuantSpec;
use runtime::synth::SynthOptions;

/// A 6-layer E4B-like model: sliding/full pattern, 2 KV-sharing layers, PLE.
fn tiny_config() -> Gemma4Config {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/models/gemma4-e4b/config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["num_hidden_layers"] = 6.into();
    v["num_kv_shared_layers"] = 2.into();
    v["layer_types"] = serde_json::json!([
        "sliding_attention",
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention"
    ]);
    synth::twin(&Gemma4Config::from_value("tiny.json", &v).unwrap())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mlx-aot-weights-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn write(dir: &Path, quant: Option<QuantSpec>) -> (Gemma4Config, BTreeMap<String, Array>) {
    let config = tiny_config();
    let (tensors, qmap) = synth::random_tensors(&config, SynthOptions { seed: 3, quant }).unwrap();
    synth::write_folder(dir, &config, &tensors, qmap.as_ref()).unwrap();
    (config, tensors)
}

fn load(dir: &Path) -> runtime::Result<Loaded> {
    Loaded::load(dir, KvLayout::float(), ExecOptions::default(), |_, _| {})
}

fn load_err(dir: &Path) -> Error {
    load(dir).expect_err("load must fail")
}

/// Rewrites `model.safetensors` of `dir` with `edit` applied to its tensors.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut BTreeMap<String, Array>)) {
    let path = dir.join("model.safetensors");
    let mut tensors: BTreeMap<String, Array> = Array::load_safetensors(&path)
        .unwrap()
        .into_iter()
        .collect();
    edit(&mut tensors);
    std::fs::remove_file(&path).unwrap();
    let meta = std::collections::HashMap::new();
    Array::save_safetensors(tensors.iter().map(|(k, v)| (k.clone(), v)), &meta, &path).unwrap();
}

#[test]
fn float_and_quantized_folders_load() {
    for quant in [
        None,
        Some(QuantSpec {
            bits: 4,
            group_size: 64,
        }),
    ] {
        let dir = scratch(&format!("ok-{}", quant.is_some()));
        let (config, _) = write(&dir, quant);
        let loaded = load(&dir).unwrap();
        let model = loaded.downcast::<Gemma4>().expect("a Gemma 4 model");
        assert_eq!(model.weights.layers.len(), config.num_hidden_layers);
        assert_eq!(model.plan.num_caches(), 4);
        assert!(
            model
                .weights
                .layers
                .iter()
                .all(|l| l.layer_scalar.is_some())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn missing_tensor_is_named() {
    let dir = scratch("missing");
    write(&dir, None);
    rewrite(&dir, |t| {
        t.remove("language_model.model.layers.3.mlp.up_proj.weight")
            .unwrap();
    });
    match load_err(&dir) {
        Error::Weights {
            tensor, message, ..
        } => {
            assert_eq!(tensor, "layers.3.mlp.up_proj.weight");
            assert!(message.contains("missing"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_shape_is_named_with_both_shapes() {
    let dir = scratch("shape");
    write(&dir, None);
    rewrite(&dir, |t| {
        let name = "language_model.model.layers.1.self_attn.q_norm.weight";
        t.insert(name.into(), Array::zeros::<f32>(&[63]).unwrap());
    });
    match load_err(&dir) {
        Error::Weights {
            tensor, message, ..
        } => {
            assert_eq!(tensor, "layers.1.self_attn.q_norm.weight");
            assert!(
                message.contains("[63]") && message.contains("[64]"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_quantized_shape_is_named() {
    let dir = scratch("qshape");
    write(
        &dir,
        Some(QuantSpec {
            bits: 4,
            group_size: 64,
        }),
    );
    rewrite(&dir, |t| {
        let name = "language_model.model.layers.0.mlp.gate_proj.weight";
        t.insert(name.into(), Array::zeros::<u32>(&[128, 4]).unwrap());
    });
    match load_err(&dir) {
        Error::Weights { tensor, .. } => {
            assert!(tensor.starts_with("layers.0.mlp.gate_proj"), "{tensor}")
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn truncated_file_is_reported_before_reading() {
    let dir = scratch("truncated");
    write(&dir, None);
    let path = dir.join("model.safetensors");
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 1000).unwrap();
    let msg = load_err(&dir).to_string();
    assert!(
        msg.contains("model.safetensors") && msg.contains("truncated"),
        "{msg}"
    );
    // A file shorter than its own header length.
    file.set_len(20).unwrap();
    let msg = load_err(&dir).to_string();
    assert!(
        msg.contains("truncated") || msg.contains("past the end"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sharded_folder_with_index_loads_and_a_broken_index_is_named() {
    let dir = scratch("sharded");
    let (_, tensors) = write(&dir, None);
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let names: Vec<&String> = tensors.keys().collect();
    let (a, b) = names.split_at(names.len() / 2);
    let mut weight_map = serde_json::Map::new();
    let meta = std::collections::HashMap::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", a),
        ("model-00002-of-00002.safetensors", b),
    ] {
        let arrays = part
            .iter()
            .map(|n| (format!("language_model.model.{n}"), &tensors[*n]));
        Array::save_safetensors(arrays, &meta, dir.join(file)).unwrap();
        for n in part.iter() {
            weight_map.insert(format!("language_model.model.{n}"), file.into());
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    load(&dir).unwrap();

    weight_map.insert(
        "language_model.model.layers.0.mlp.gate_proj.weight".into(),
        "model-00002-of-00002.safetensors".into(),
    );
    let index = serde_json::json!({"weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let msg = load_err(&dir).to_string();
    assert!(
        msg.contains("layers.0.mlp.gate_proj.weight") && msg.contains("listed in"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_folder_and_empty_folder_are_clear() {
    let dir = scratch("nothing");
    let msg = load_err(&dir).to_string();
    assert!(msg.contains("config.json"), "{msg}");
    std::fs::create_dir_all(&dir).unwrap();
    let config = tiny_config();
    let text = serde_json::to_string(&synth::folder_config_json(&config, None)).unwrap();
    std::fs::write(dir.join("config.json"), text).unwrap();
    let msg = load_err(&dir).to_string();
    assert!(msg.contains("no *.safetensors"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}
