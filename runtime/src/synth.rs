//! What every family's synthetic models share: how a synthetic model is filled, seeded
//! normal samples, and atomic writes of its files.

use std::path::Path;

use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};
use crate::quantization::QuantSpec;

/// How to fill a synthetic model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthOptions {
    /// Seed of every tensor (each tensor's key mixes in its name).
    pub seed: u64,
    /// Weight quantization (`None` = float weights). A family may quantize some modules
    /// otherwise, as mlx-lm's quant predicate for it does.
    pub quant: Option<QuantSpec>,
}

/// Writes `bytes` to `path` through a temporary file in the same folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.partial"));
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// Normal samples drawn directly in `dtype`, so a real-shape table never exists in
/// float32 as well (the E4B per-layer table alone would be 11 GB).
pub(crate) fn normal(shape: &[i32], std: f32, key: &Array, dtype: Dtype) -> Result<Array> {
    Ok(match dtype {
        Dtype::Bfloat16 => mlx_rs::random::normal::<half::bf16>(shape, 0.0, std, key)?,
        Dtype::Float16 => mlx_rs::random::normal::<half::f16>(shape, 0.0, std, key)?,
        _ => mlx_rs::random::normal::<f32>(shape, 0.0, std, key)?.as_dtype(dtype)?,
    })
}

/// FNV-1a of a tensor name: each tensor's random key is independent of the others.
pub(crate) fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// `config` with mlx-lm's `quantization` block for `quant`'s global spec, when it has one
/// (how mlx-community ships quantized models).
pub(crate) fn with_quantization_block(
    mut config: serde_json::Value,
    quant: Option<&crate::quantization::QuantizationMap>,
) -> serde_json::Value {
    if let Some(g) = quant.and_then(|q| q.global) {
        config["quantization"] = serde_json::json!({
            "group_size": g.group_size,
            "bits": g.bits,
            "mode": "affine",
        });
    }
    config
}

/// Writes a flat model folder as mlx-lm saves one: `model.safetensors` (canonical names
/// under `model.`, the head as `lm_head`) and `config.json`, each through a temporary
/// file renamed into place.
pub(crate) fn write_flat_folder(
    dir: &Path,
    config: &serde_json::Value,
    tensors: &std::collections::BTreeMap<String, Array>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let weights = dir.join("model.safetensors");
    let tmp = dir.join(".partial-model.safetensors");
    let named = tensors.iter().map(|(k, v)| {
        let name = if k.starts_with("lm_head") {
            k.clone()
        } else {
            format!("model.{k}")
        };
        (name, v)
    });
    let metadata = std::collections::HashMap::from([("format".to_owned(), "mlx".to_owned())]);
    Array::save_safetensors(named, &metadata, &tmp).map_err(|e| {
        Error::weights(
            tmp.display().to_string(),
            "(file)",
            format!("writing failed: {e}"),
        )
    })?;
    std::fs::rename(&tmp, &weights).map_err(|e| Error::io(&weights, e))?;
    let text = serde_json::to_string_pretty(config).expect("json") + "\n";
    write_atomic(&dir.join("config.json"), text.as_bytes())
}
