//! Synthetic Llama-family models: shrunk twins of published configs (same plan, small
//! dimensions) and seeded random weights in mlx-community naming, float or quantized.

use std::collections::BTreeMap;
use std::path::Path;

use mlx_rs::{Array, Dtype};

use super::config::{LlamaConfig, LlamaRope};
use super::weights::{TensorRole, canonical_tensors};
use crate::error::Result;
use crate::quantization::QuantizationMap;
use crate::synth::SynthOptions;

/// The shrunk twin of `config`: layer count, q/k norm, RoPE kind, MiniCPM's scales,
/// tying and the GQA ratio kept; dimensions small (head dim 64, so group-64 KV
/// quantization applies). A MiniCPM twin is 256 wide (its head dim is hidden / heads)
/// and keeps the published head-input divisor;
/// LongRoPE factor lists keep every other entry when the head dim halves, so the twin
/// still spans the published range.
pub fn twin(config: &LlamaConfig) -> LlamaConfig {
    let mut t = config.clone();
    t.source = format!("twin of {}", config.source);
    let ratio = (config.num_attention_heads / config.num_key_value_heads).clamp(1, 4);
    t.num_attention_heads = 4;
    t.num_key_value_heads = 4 / ratio;
    t.head_dim = 64;
    t.hidden_size = if config.minicpm.is_some() { 256 } else { 64 };
    t.intermediate_size = 128;
    t.vocab_size = 512;
    t.quantization = None;
    // The head input's divisor stays the published one (hidden / dim_model_base), so the
    // twin divides by what the real model does rather than by 1.
    if let Some(m) = &mut t.minicpm {
        m.dim_model_base = t.hidden_size as f64 * m.dim_model_base / config.hidden_size as f64;
    }
    if let LlamaRope::LongRope {
        scaling,
        short_factor,
        ..
    } = &mut t.rope
    {
        for list in [&mut scaling.long_factor, short_factor] {
            *list = resampled(list, t.head_dim / 2);
        }
    }
    t
}

/// `factors` (one per rotated pair, or a single one) for `pairs` pairs: a single factor
/// stays; a list is sampled at evenly spaced entries, first and last kept.
fn resampled(factors: &[f64], pairs: usize) -> Vec<f64> {
    if factors.len() <= 1 || factors.len() == pairs {
        return factors.to_vec();
    }
    let last = (factors.len() - 1) as f64;
    (0..pairs)
        .map(|i| factors[((i as f64 * last) / (pairs - 1).max(1) as f64).round() as usize])
        .collect()
}

/// Random tensors for `config` by canonical name (quantized modules as
/// `.weight`/`.scales`/`.biases`) with floats in `dtype`, and the quantization map.
pub fn random_tensors_as(
    config: &LlamaConfig,
    opts: SynthOptions,
    dtype: Dtype,
) -> Result<(BTreeMap<String, Array>, Option<QuantizationMap>)> {
    let mut out = BTreeMap::new();
    let qmap = opts.quant.map(|q| QuantizationMap {
        global: Some(q),
        overrides: BTreeMap::new(),
    });
    for (name, role) in canonical_tensors(config) {
        let key = mlx_rs::random::key(opts.seed ^ crate::synth::fnv1a(&name))?;
        match role {
            TensorRole::Module { out: o, inp } => {
                let std = if name == "embed_tokens" {
                    1.0
                } else {
                    (inp as f32).powf(-0.5)
                };
                let w = crate::synth::normal(&[o as i32, inp as i32], std, &key, dtype)?;
                match opts.quant.filter(|q| inp % q.group_size as usize == 0) {
                    Some(q) => {
                        let (wq, scales, biases) =
                            mlx_rs::ops::quantize(&w, q.group_size as i32, q.bits as i32)?;
                        mlx_rs::transforms::eval([&wq, &scales, &biases])?;
                        out.insert(format!("{name}.weight"), wq);
                        out.insert(format!("{name}.scales"), scales);
                        out.insert(format!("{name}.biases"), biases);
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
        }
    }
    let arrays: Vec<&Array> = out.values().collect();
    mlx_rs::transforms::eval(arrays)?;
    Ok((out, qmap))
}

/// The config.json of a synthetic folder (flat, as mlx-lm writes it).
pub fn folder_config_json(
    config: &LlamaConfig,
    quant: Option<&QuantizationMap>,
) -> serde_json::Value {
    crate::synth::with_quantization_block(config.to_json(), quant)
}

/// Writes `model.safetensors` and `config.json` into `dir`
/// ([`crate::synth::write_flat_folder`]).
pub fn write_folder(
    dir: &Path,
    config: &LlamaConfig,
    tensors: &BTreeMap<String, Array>,
    quant: Option<&QuantizationMap>,
) -> Result<()> {
    crate::synth::write_flat_folder(dir, &folder_config_json(config, quant), tensors)
}
