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
