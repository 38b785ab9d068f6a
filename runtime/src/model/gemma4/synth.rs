//! Synthetic Gemma 4 models: shrunk twins of published configs (same plan, small
//! dimensions) and seeded random weights in mlx-community naming, float or quantized.

use std::collections::BTreeMap;
use std::path::Path;

use mlx_rs::{Array, Dtype};

use super::config::Gemma4Config;
use crate::error::{Error, Result};
use crate::model::gemma4::weights::{TensorRole, canonical_tensors};
use crate::quantization::{QuantSpec, QuantizationMap};
use crate::synth::{SynthOptions, fnv1a, normal, write_atomic};

/// The shrunk twin of `config`: every structural key kept (layer types, KV sharing,
/// K=V, PLE, MoE, head counts, expert counts), dimensions small. Its plan, and so its
/// fingerprint, equal the original's.
pub fn twin(config: &Gemma4Config) -> Gemma4Config {
    let mut t = config.clone();
    t.source = format!("twin of {}", config.source);
    t.hidden_size = 64;
    t.intermediate_size = 128;
    // Head dims stay multiples of 64 so group-64 KV quantization applies, and full
    // layers stay twice as wide as sliding ones.
    t.head_dim = 64;
    t.global_head_dim = 128;
    t.sliding_window = 16;
    t.vocab_size = 512;
    if t.hidden_size_per_layer_input > 0 {
        t.hidden_size_per_layer_input = 64;
        t.vocab_size_per_layer_input = 512;
    }
    if let Some(m) = &mut t.moe {
        m.intermediate_size = 64;
    }
    t.quantization = None;
    t
}

/// The router's quantization under mlx-lm's Gemma 4 predicate.
pub const ROUTER_QUANT: QuantSpec = QuantSpec {
    bits: 8,
    group_size: 64,
};

/// Random bf16 tensors for `config` by canonical name (quantized modules as
/// `.weight`/`.scales`/`.biases`), and the quantization map describing them.
pub fn random_tensors(
    config: &Gemma4Config,
    opts: SynthOptions,
) -> Result<(BTreeMap<String, Array>, Option<QuantizationMap>)> {
    random_tensors_as(config, opts, Dtype::Bfloat16)
}

/// [`random_tensors`] with float tensors (and quantization scales) in `dtype`: float32
/// for MoE models on MLX's CPU backend, whose `gather_mm` only takes float32.
pub fn random_tensors_as(
    config: &Gemma4Config,
    opts: SynthOptions,
    dtype: Dtype,
) -> Result<(BTreeMap<String, Array>, Option<QuantizationMap>)> {
    let mut out = BTreeMap::new();
    let mut qmap = opts.quant.map(|q| QuantizationMap {
        global: Some(q),
        overrides: BTreeMap::new(),
    });
    for (name, role) in canonical_tensors(config) {
        let key = mlx_rs::random::key(opts.seed ^ fnv1a(&name))?;
        match role {
            TensorRole::Module { lead, out: o, inp } => {
                let mut shape: Vec<i32> = lead.iter().map(|&d| d as i32).collect();
                shape.extend([o as i32, inp as i32]);
                let std = if name == "embed_tokens" || name == "embed_tokens_per_layer" {
                    1.0
                } else {
                    (inp as f32).powf(-0.5)
                };
                let w = normal(&shape, std, &key, dtype)?;
                let spec = match opts.quant {
                    Some(_) if name.ends_with("router.proj") => Some(ROUTER_QUANT),
                    q => q,
                };
                match spec.filter(|q| inp % q.group_size as usize == 0) {
                    Some(q) => {
                        let (wq, scales, biases) =
                            mlx_rs::ops::quantize(&w, q.group_size as i32, q.bits as i32)?;
                        // One tensor at a time: the float weight never outlives its
                        // quantization (a real-shape model fits where its float form would not).
                        mlx_rs::transforms::eval([&wq, &scales, &biases])?;
                        out.insert(format!("{name}.weight"), wq);
                        out.insert(format!("{name}.scales"), scales);
                        out.insert(format!("{name}.biases"), biases);
                        if Some(q) != opts.quant
                            && let Some(m) = qmap.as_mut()
                        {
                            m.overrides.insert(name.clone(), Some(q));
                        }
                    }
                    None => {
                        w.eval()?;
                        out.insert(format!("{name}.weight"), w);
                    }
                }
            }
            TensorRole::Norm(d) => {
                let w = mlx_rs::random::normal::<f32>(&[d as i32][..], 1.0, 0.1, &key)?;
                out.insert(name, w.as_dtype(dtype)?);
            }
            TensorRole::Vector(d) => {
                let w = mlx_rs::random::uniform::<_, f32>(0.5f32, 1.5f32, &[d as i32][..], &key)?;
                out.insert(name, w.as_dtype(dtype)?);
            }
            TensorRole::LayerScalar => {
                let w = mlx_rs::random::uniform::<_, f32>(0.5f32, 1.0f32, &[1][..], &key)?;
                out.insert(name, w.as_dtype(dtype)?);
            }
        }
    }
    let arrays: Vec<&Array> = out.values().collect();
    mlx_rs::transforms::eval(arrays)?;
    Ok((out, qmap))
}

/// The config.json of a synthetic folder: mlx-community's wrapper form (`model_type`
/// gemma4 with `text_config`), top-level vocab, eos and quantization.
pub fn folder_config_json(
    config: &Gemma4Config,
    quant: Option<&QuantizationMap>,
) -> serde_json::Value {
    use serde_json::json;
    let mut top = json!({
        "model_type": "gemma4",
        "text_config": config.to_text_json(),
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_word_embeddings,
        "eos_token_id": config.eos_token_ids,
    });
    if let Some(q) = quant {
        let mut block = serde_json::Map::new();
        if let Some(g) = q.global {
            block.insert("group_size".into(), json!(g.group_size));
            block.insert("bits".into(), json!(g.bits));
            block.insert("mode".into(), json!("affine"));
        }
        for (path, spec) in &q.overrides {
            let v = match spec {
                Some(s) => json!({"group_size": s.group_size, "bits": s.bits}),
                None => json!(false),
            };
            block.insert(format!("language_model.model.{path}"), v);
        }
        top["quantization"] = serde_json::Value::Object(block);
    }
    top
}

/// Writes `model.safetensors` (names under `language_model.model.`) and `config.json`
/// into `dir`, each through a temporary file renamed into place.
pub fn write_folder(
    dir: &Path,
    config: &Gemma4Config,
    tensors: &BTreeMap<String, Array>,
    quant: Option<&QuantizationMap>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let weights = dir.join("model.safetensors");
    // MLX insists on the extension; catalogs skip hidden files, so a crash leaves nothing loadable.
    let tmp = dir.join(".partial-model.safetensors");
    let named = tensors
        .iter()
        .map(|(k, v)| (format!("language_model.model.{k}"), v));
    let metadata = std::collections::HashMap::from([("format".to_owned(), "mlx".to_owned())]);
    Array::save_safetensors(named, &metadata, &tmp).map_err(|e| {
        Error::weights(
            tmp.display().to_string(),
            "(file)",
            format!("writing failed: {e}"),
        )
    })?;
    std::fs::rename(&tmp, &weights).map_err(|e| Error::io(&weights, e))?;
    let text =
        serde_json::to_string_pretty(&folder_config_json(config, quant)).expect("json") + "\n";
    write_atomic(&dir.join("config.json"), text.as_bytes())
}
