//! What every family's config reading shares: the bounds on dimensions and layer counts,
//! and the attention type of a layer.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::json::Obj;

/// The largest tensor dimension a config may imply: MLX shapes are `i32`. Every size key,
/// and every product of keys that becomes one dimension of a weight (heads × head dim,
/// layers × per-layer-input width, ...), must fit; the arithmetic on dimensions elsewhere
/// (tensor lists, memory plans) relies on it.
pub const MAX_DIM: usize = i32::MAX as usize;

/// The most layers a config may declare. Published models have under 200; the bound keeps
/// a few bytes of config (a Llama config needs no per-layer list) from sizing per-layer
/// tables past what memory holds.
pub const MAX_LAYERS: usize = 4096;

/// Reads `num_hidden_layers`: at least 1, at most [`MAX_LAYERS`].
pub(crate) fn read_num_layers(c: &Obj<'_>) -> Result<usize> {
    let n = c.positive("num_hidden_layers")?;
    if n > MAX_LAYERS {
        return Err(c.err(
            "num_hidden_layers",
            format!("{n} layers; at most {MAX_LAYERS} are supported"),
        ));
    }
    Ok(n)
}

/// The attention type of a layer (`layer_types[i]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerType {
    /// `sliding_attention`: a ring cache of `sliding_window` rows.
    Sliding,
    /// `full_attention`: a growing cache over the whole context.
    Full,
}

impl LayerType {
    /// The config spelling.
    pub fn config_name(self) -> &'static str {
        match self {
            LayerType::Sliding => "sliding_attention",
            LayerType::Full => "full_attention",
        }
    }
}

impl fmt::Display for LayerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayerType::Sliding => "sliding",
            LayerType::Full => "full",
        })
    }
}

/// A positive finite number at `key` of `o`, `default` when absent or null (an error
/// naming the key when there is none). Shared by the families' configs.
pub(crate) fn positive_f64(o: &Obj<'_>, key: &str, default: Option<f64>) -> Result<f64> {
    let v = match (o.opt_f64(key)?, default) {
        (Some(v), _) => v,
        (None, Some(d)) => d,
        (None, None) => return Err(o.err(key, "missing; expected a number")),
    };
    if !(v.is_finite() && v > 0.0) {
        return Err(o.err(key, format!("must be > 0, found {v}")));
    }
    Ok(v)
}

/// A whole number of positions that f64 holds exactly (written back as an integer by
/// the configs' `to_json`, so 0.5 would validate, then be written as 0, which does not).
pub(crate) fn positions(o: &Obj<'_>, key: &str, default: Option<f64>) -> Result<f64> {
    let v = positive_f64(o, key, default)?;
    if v.fract() != 0.0 || v > (1u64 << 53) as f64 {
        return Err(o.err(
            key,
            format!("must be a whole number of positions up to 2^53, found {v}"),
        ));
    }
    Ok(v)
}

/// `dims` multiply into one tensor dimension, which must be at most [`MAX_DIM`]; else an
/// error about `key` naming the product `what`. Shared by the families' configs.
pub(crate) fn check_dim(c: &Obj<'_>, key: &str, what: &str, dims: &[usize]) -> Result<()> {
    match dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)) {
        Some(n) if n <= MAX_DIM => Ok(()),
        product => {
            let shown = product.map_or_else(
                || {
                    let factors: Vec<String> = dims.iter().map(usize::to_string).collect();
                    factors.join(" × ")
                },
                |n| n.to_string(),
            );
            Err(c.err(
                key,
                format!("{what} = {shown} exceeds {MAX_DIM}, the largest dimension MLX indexes"),
            ))
        }
    }
}

/// `v` as a token id (a u32), or an error naming `key` of `o`.
pub(crate) fn token_id(o: &Obj<'_>, key: &str, v: &serde_json::Value) -> Result<u32> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| o.err(key, format!("expected a token id, found {v}")))
}

/// `bos_token_id` and `eos_token_id` (one id or a list) of a flat config.
pub(crate) fn read_special_tokens(c: &Obj<'_>) -> Result<(Option<u32>, Vec<u32>)> {
    let bos = match c.get_non_null("bos_token_id") {
        Some(v) => Some(token_id(c, "bos_token_id", v)?),
        None => None,
    };
    let eos = match c.get_non_null("eos_token_id") {
        None => Vec::new(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|v| token_id(c, "eos_token_id", v))
            .collect::<Result<Vec<_>>>()?,
        Some(v) => vec![token_id(c, "eos_token_id", v)?],
    };
    Ok((bos, eos))
}

/// The `quantization` block of a flat config, when it has one.
pub(crate) fn read_quantization(
    file: &str,
    c: &Obj<'_>,
) -> Result<Option<crate::quantization::QuantizationMap>> {
    match c.get_non_null("quantization") {
        Some(q) => Ok(Some(crate::quantization::QuantizationMap::from_value(
            file,
            "quantization",
            q,
        )?)),
        None => Ok(None),
    }
}
