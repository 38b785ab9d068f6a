//! Synthetic MLA-family models: shrunk twins of published configs (same plan, small
//! dimensions) and seeded random weights in the layout mlx-lm saves after `sanitize`,
//! float or quantized as `mlx_lm.convert` quantizes (every linear, embedding,
//! multi-linear and switch-linear whose input divides into groups; never the router).

use std::collections::BTreeMap;
use std::path::Path;

use mlx_rs::{Array, Dtype};

use super::config::MlaConfig;
use super::weights::{TensorRole, canonical_tensors};
use crate::error::Result;
use crate::quantization::QuantizationMap;
use crate::synth::{SynthOptions, fnv1a, normal};

/// The twin's `index_topk`: the gate's and the reference's prompts are below and above it,
/// and their decode steps cross it.
pub const TWIN_INDEX_TOPK: usize = 32;

/// The shrunk twin of `config`: layer count, dense/MoE layout, grouped routing (groups,
/// kept groups, shared experts, scaling), RoPE kind, indexer interleave kept; widths
/// small but multiples of 64 where a quantized layer reads them, so 4-bit group-64
/// quantization applies to every module mlx-lm would quantize. Its plan equals the
/// original's.
pub fn twin(config: &MlaConfig) -> MlaConfig {
    let mut t = config.clone();
    t.source = format!("twin of {}", config.source);
    t.hidden_size = 64;
    t.intermediate_size = 128;
    t.vocab_size = 512;
    t.num_attention_heads = 4;
    t.num_key_value_heads = 4;
    t.q_lora_rank = 64;
    t.kv_lora_rank = 64;
    t.qk_nope_head_dim = 64;
    t.qk_rope_head_dim = 32;
    t.v_head_dim = 64;
    t.indexer.n_heads = 16;
    t.indexer.head_dim = 64;
    t.indexer.topk = TWIN_INDEX_TOPK;
    if let Some(m) = &mut t.moe {
        // Two experts a group (grouped routing needs two to score a group).
        m.n_routed_experts = (2 * m.n_group).max(8);
        m.num_experts_per_tok = m
            .num_experts_per_tok
            .min(m.topk_group * (m.n_routed_experts / m.n_group))
            .min(4);
        m.moe_intermediate_size = 64;
    }
    t.quantization = None;
    t
}

/// Random tensors for `config` by canonical name (quantized modules as
/// `.weight`/`.scales`/`.biases`) with floats in `dtype` (the correction bias always in
/// float32), and the quantization map.
pub fn random_tensors_as(
    config: &MlaConfig,
    opts: SynthOptions,
    dtype: Dtype,
) -> Result<(BTreeMap<String, Array>, Option<QuantizationMap>)> {
    let mut out = BTreeMap::new();
    let qmap = opts.quant.map(|q| QuantizationMap {
        global: Some(q),
        overrides: BTreeMap::new(),
    });
    for (name, role) in canonical_tensors(config) {
        let key = mlx_rs::random::key(opts.seed ^ fnv1a(&name))?;
        match role {
            TensorRole::Module { lead, out: o, inp } => {
                let std = if name == "embed_tokens" {
                    1.0
                } else {
                    (inp as f32).powf(-0.5)
                };
                let mut shape: Vec<i32> = lead.into_iter().map(|l| l as i32).collect();
                shape.extend([o as i32, inp as i32]);
                let w = normal(&shape, std, &key, dtype)?;
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
            TensorRole::Vector(d) => {
                // Norm weights near 1; the indexer's LayerNorm bias near 0.
                let mean = if name.ends_with(".bias") { 0.0 } else { 1.0 };
                let w = mlx_rs::random::normal::<f32>(&[d as i32][..], mean, 0.1, &key)?;
                out.insert(name, w.as_dtype(dtype)?);
            }
            TensorRole::Matrix { rows, cols } => {
                let w = normal(
                    &[rows as i32, cols as i32],
                    (cols as f32).powf(-0.5),
                    &key,
                    dtype,
                )?;
                out.insert(name, w);
            }
            TensorRole::Float32Vector(d) => {
                let w = mlx_rs::random::normal::<f32>(&[d as i32][..], 0.0, 0.1, &key)?;
                out.insert(name, w);
            }
        }
    }
    let arrays: Vec<&Array> = out.values().collect();
    mlx_rs::transforms::eval(arrays)?;
    Ok((out, qmap))
}

/// The config.json of a synthetic folder (flat, as mlx-lm writes it).
pub fn folder_config_json(
    config: &MlaConfig,
    quant: Option<&QuantizationMap>,
) -> serde_json::Value {
    crate::synth::with_quantization_block(config.to_json(), quant)
}

/// Writes `model.safetensors` and `config.json` into `dir`
/// ([`crate::synth::write_flat_folder`]).
pub fn write_folder(
    dir: &Path,
    config: &MlaConfig,
    tensors: &BTreeMap<String, Array>,
    quant: Option<&QuantizationMap>,
) -> Result<()> {
    crate::synth::write_flat_folder(dir, &folder_config_json(config, quant), tensors)
}
