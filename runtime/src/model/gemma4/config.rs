//! The Gemma 4 text config (`config.json`), read flat or from `text_config`, validated.
//!
//! Every structural key must be spelled out: mlx-lm, transformers and this engine fill
//! gaps differently (gemma4.md §1), so a missing key is an error naming it rather than a
//! silent default.

use std::path::Path;

use serde_json::Value;

use crate::config::{LayerType, check_dim, read_num_layers, token_id};
use crate::error::{Error, Result};
use crate::json::{self, Obj};
pub use crate::nn::rope::RopeParams;
use crate::quantization::QuantizationMap;

/// The MoE block of the 26B-A4B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeConfig {
    /// num_experts (E).
    pub num_experts: usize,
    /// top_k_experts (K).
    pub top_k: usize,
    /// moe_intermediate_size.
    pub intermediate_size: usize,
}

/// A validated Gemma 4 text config.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Config {
    /// Where it was read from, for messages.
    pub source: String,
    /// hidden_size (H).
    pub hidden_size: usize,
    /// num_hidden_layers (N).
    pub num_hidden_layers: usize,
    /// intermediate_size of the dense GeGLU.
    pub intermediate_size: usize,
    /// num_attention_heads.
    pub num_attention_heads: usize,
    /// num_key_value_heads.
    pub num_key_value_heads: usize,
    /// num_global_key_value_heads (used only under K=V).
    pub num_global_key_value_heads: Option<usize>,
    /// head_dim of sliding layers.
    pub head_dim: usize,
    /// global_head_dim of full layers.
    pub global_head_dim: usize,
    /// attention_k_eq_v.
    pub attention_k_eq_v: bool,
    /// sliding_window (W).
    pub sliding_window: usize,
    /// layer_types, N entries.
    pub layer_types: Vec<LayerType>,
    /// num_kv_shared_layers (S).
    pub num_kv_shared_layers: usize,
    /// use_double_wide_mlp.
    pub use_double_wide_mlp: bool,
    /// hidden_size_per_layer_input (P); 0 disables per-layer inputs.
    pub hidden_size_per_layer_input: usize,
    /// vocab_size.
    pub vocab_size: usize,
    /// vocab_size_per_layer_input (rows of embed_tokens_per_layer), when P > 0.
    pub vocab_size_per_layer_input: usize,
    /// The MoE block, when enable_moe_block.
    pub moe: Option<MoeConfig>,
    /// RoPE of sliding layers.
    pub rope_sliding: RopeParams,
    /// RoPE of full layers.
    pub rope_full: RopeParams,
    /// final_logit_softcapping (c).
    pub final_logit_softcapping: Option<f64>,
    /// rms_norm_eps.
    pub rms_norm_eps: f64,
    /// tie_word_embeddings.
    pub tie_word_embeddings: bool,
    /// max_position_embeddings (informational).
    pub max_position_embeddings: Option<usize>,
    /// bos_token_id.
    pub bos_token_id: Option<u32>,
    /// eos_token_id, as a list.
    pub eos_token_ids: Vec<u32>,
    /// pad_token_id.
    pub pad_token_id: Option<u32>,
    /// The weight quantization map, when the checkpoint is quantized.
    pub quantization: Option<QuantizationMap>,
}

impl Gemma4Config {
    /// Reads and validates `path` (a `config.json`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_json_str(&path.display().to_string(), &text)
    }

    /// Parses and validates the text of a config.json; `file` names it in errors.
    pub fn from_json_str(file: &str, text: &str) -> Result<Self> {
        let value = json::parse(file, text)?;
        Self::from_value(file, &value)
    }

    /// Validates a parsed config.json.
    pub fn from_value(file: &str, value: &Value) -> Result<Self> {
        let top = Obj::new(file, "", value)?;
        let (text, nested) = match top.get_non_null("text_config") {
            Some(tc) => (Obj::new(file, "text_config", tc)?, true),
            None => (top.clone(), false),
        };
        let model_type = top.opt_str("model_type")?;
        if let Some(mt) = model_type
            && !matches!(mt, "gemma4" | "gemma4_text" | "gemma4_unified")
        {
            return Err(top.err(
                "model_type",
                format!("expected gemma4, gemma4_text or gemma4_unified, found {mt:?}"),
            ));
        }
        let c = &text;

        let num_hidden_layers = read_num_layers(c)?;
        let layer_types = read_layer_types(c, num_hidden_layers)?;
        let hidden_size = c.positive("hidden_size")?;
        let num_attention_heads = c.positive("num_attention_heads")?;
        let num_key_value_heads = c.positive("num_key_value_heads")?;
        let num_global_key_value_heads = c.opt_usize("num_global_key_value_heads")?;
        if num_global_key_value_heads == Some(0) {
            return Err(c.err("num_global_key_value_heads", "must be at least 1 or null"));
        }
        let head_dim = c.positive("head_dim")?;
        let global_head_dim = c.positive("global_head_dim")?;
        let attention_k_eq_v = c.bool("attention_k_eq_v")?;
        let sliding_window = c.positive("sliding_window")?;
        let num_kv_shared_layers = c.usize("num_kv_shared_layers")?;
        if num_kv_shared_layers >= num_hidden_layers {
            return Err(c.err(
                "num_kv_shared_layers",
                format!(
                    "must be below num_hidden_layers ({num_hidden_layers}): at least one layer \
                     must own its K/V, found {num_kv_shared_layers}"
                ),
            ));
        }
        let use_double_wide_mlp = c.bool("use_double_wide_mlp")?;
        let intermediate_size = c.positive("intermediate_size")?;
        let hidden_size_per_layer_input = match c.get("hidden_size_per_layer_input") {
            None => {
                return Err(c.err(
                    "hidden_size_per_layer_input",
                    "missing; expected an integer (0 or null disables per-layer inputs)",
                ));
            }
            Some(_) => c.opt_usize("hidden_size_per_layer_input")?.unwrap_or(0),
        };
        // mlx-lm's wrapper copies the top-level vocab_size into text_config.
        let vocab_size = match (nested, top.opt_usize("vocab_size")?) {
            (true, Some(v)) => v,
            _ => c.positive("vocab_size")?,
        };
        if vocab_size == 0 {
            return Err(top.err("vocab_size", "must be at least 1"));
        }
        let vocab_size_per_layer_input = if hidden_size_per_layer_input > 0 {
            c.positive("vocab_size_per_layer_input")?
        } else {
            c.opt_usize("vocab_size_per_layer_input")?.unwrap_or(0)
        };

        let moe = if c.bool("enable_moe_block")? {
            let num_experts = c
                .opt_usize("num_experts")?
                .ok_or_else(|| c.err("num_experts", "required when enable_moe_block is true"))?;
            let top_k = c
                .opt_usize("top_k_experts")?
                .ok_or_else(|| c.err("top_k_experts", "required when enable_moe_block is true"))?;
            let intermediate = c.opt_usize("moe_intermediate_size")?.ok_or_else(|| {
                c.err(
                    "moe_intermediate_size",
                    "required when enable_moe_block is true",
                )
            })?;
            if num_experts == 0 || top_k == 0 || top_k > num_experts {
                return Err(c.err(
                    "top_k_experts",
                    format!("must be between 1 and num_experts ({num_experts}), found {top_k}"),
                ));
            }
            if intermediate == 0 {
                return Err(c.err("moe_intermediate_size", "must be at least 1"));
            }
            Some(MoeConfig {
                num_experts,
                top_k,
                intermediate_size: intermediate,
            })
        } else {
            None
        };

        let rope = c.child("rope_parameters", "an object keyed by layer type")?;
        let rope_sliding = read_rope(&rope, "sliding_attention")?;
        let rope_full = read_rope(&rope, "full_attention")?;

        let final_logit_softcapping = match c.get("final_logit_softcapping") {
            None => {
                return Err(c.err(
                    "final_logit_softcapping",
                    "missing; expected a number or null",
                ));
            }
            Some(_) => c.opt_f64("final_logit_softcapping")?,
        };
        if let Some(cap) = final_logit_softcapping
            && !(cap.is_finite() && cap > 0.0)
        {
            return Err(c.err(
                "final_logit_softcapping",
                format!("must be > 0, found {cap}"),
            ));
        }
        let rms_norm_eps = c.f64("rms_norm_eps")?;
        if !(rms_norm_eps.is_finite() && rms_norm_eps > 0.0) {
            return Err(c.err("rms_norm_eps", format!("must be > 0, found {rms_norm_eps}")));
        }
        let tie_word_embeddings = match c.opt_bool("tie_word_embeddings")? {
            Some(t) => t,
            None => top
                .opt_bool("tie_word_embeddings")?
                .ok_or_else(|| c.err("tie_word_embeddings", "missing; expected true or false"))?,
        };
        if let Some(act) = c.opt_str("hidden_activation")?
            && act != "gelu_pytorch_tanh"
        {
            return Err(c.err(
                "hidden_activation",
                format!("expected \"gelu_pytorch_tanh\", found {act:?}"),
            ));
        }
        if c.opt_bool("rope_traditional")? == Some(true) {
            return Err(c.err("rope_traditional", "Gemma 4 rotates halves; expected false"));
        }

        let token = |key: &str| -> Result<Option<u32>> {
            let v = match top.get_non_null(key).filter(|_| nested) {
                Some(v) => Some((top.clone(), v)),
                None => c.get_non_null(key).map(|v| (c.clone(), v)),
            };
            match v {
                None => Ok(None),
                Some((o, v)) => token_id(&o, key, v).map(Some),
            }
        };
        let bos_token_id = token("bos_token_id")?;
        let pad_token_id = token("pad_token_id")?;
        let eos_token_ids = {
            let v = match top.get_non_null("eos_token_id").filter(|_| nested) {
                Some(v) => Some((top.clone(), v)),
                None => c.get_non_null("eos_token_id").map(|v| (c.clone(), v)),
            };
            match v {
                None => Vec::new(),
                Some((o, Value::Array(items))) => items
                    .iter()
                    .map(|item| token_id(&o, "eos_token_id", item))
                    .collect::<Result<Vec<_>>>()?,
                Some((o, v)) => vec![token_id(&o, "eos_token_id", v)?],
            }
        };

        let quantization = match top.get_non_null("quantization") {
            Some(q) => Some(QuantizationMap::from_value(file, "quantization", q)?),
            None => match c.get_non_null("quantization").filter(|_| nested) {
                Some(q) => Some(QuantizationMap::from_value(
                    file,
                    "text_config.quantization",
                    q,
                )?),
                None => None,
            },
        };

        let config = Gemma4Config {
            source: file.to_owned(),
            hidden_size,
            num_hidden_layers,
            intermediate_size,
            num_attention_heads,
            num_key_value_heads,
            num_global_key_value_heads,
            head_dim,
            global_head_dim,
            attention_k_eq_v,
            sliding_window,
            layer_types,
            num_kv_shared_layers,
            use_double_wide_mlp,
            hidden_size_per_layer_input,
            vocab_size,
            vocab_size_per_layer_input,
            moe,
            rope_sliding,
            rope_full,
            final_logit_softcapping,
            rms_norm_eps,
            tie_word_embeddings,
            max_position_embeddings: c.opt_usize("max_position_embeddings")?,
            bos_token_id,
            eos_token_ids,
            pad_token_id,
            quantization,
        };
        config.check_consistency(c)?;
        Ok(config)
    }

    /// Cross-key rules: dimensions fit MLX, head counts divide, donors exist for every
    /// shared type.
    fn check_consistency(&self, c: &Obj<'_>) -> Result<()> {
        self.check_dimensions(c)?;
        for layer in 0..self.num_hidden_layers {
            let kv = self.kv_heads(layer);
            if !self.num_attention_heads.is_multiple_of(kv) {
                let key = if self.k_eq_v(layer) && self.num_global_key_value_heads.is_some() {
                    "num_global_key_value_heads"
                } else {
                    "num_key_value_heads"
                };
                return Err(c.err(
                    key,
                    format!(
                        "num_attention_heads ({}) must be a multiple of the KV heads ({kv}) of \
                         layer {layer}",
                        self.num_attention_heads
                    ),
                ));
            }
        }
        let first_shared = self.first_shared_layer();
        for j in first_shared..self.num_hidden_layers {
            let t = self.layer_types[j];
            if !self.layer_types[..first_shared].contains(&t) {
                return Err(c.err(
                    "layer_types",
                    format!(
                        "shared layer {j} is {} but no layer below {first_shared} \
                         (num_hidden_layers - num_kv_shared_layers) has that type to donate K/V",
                        t.config_name()
                    ),
                ));
            }
        }
        if let RopeParams::Proportional {
            partial_rotary_factor,
            ..
        } = self.rope_full
        {
            let rot = (self.global_head_dim as f64 * partial_rotary_factor) as usize;
            if !rot.is_multiple_of(2) || rot > self.global_head_dim {
                return Err(c.err(
                    "rope_parameters.full_attention.partial_rotary_factor",
                    format!(
                        "rotates {rot} of {} dims; expected an even count",
                        self.global_head_dim
                    ),
                ));
            }
        }
        if let RopeParams::Proportional {
            partial_rotary_factor,
            ..
        } = self.rope_sliding
        {
            let rot = (self.head_dim as f64 * partial_rotary_factor) as usize;
            if !rot.is_multiple_of(2) || rot > self.head_dim {
                return Err(c.err(
                    "rope_parameters.sliding_attention.partial_rotary_factor",
                    format!(
                        "rotates {rot} of {} dims; expected an even count",
                        self.head_dim
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every weight dimension the config implies is at most [`MAX_DIM`].
    fn check_dimensions(&self, c: &Obj<'_>) -> Result<()> {
        let fits = |key: &str, what: &str, dims: &[usize]| check_dim(c, key, what, dims);
        fits("hidden_size", "hidden_size", &[self.hidden_size])?;
        fits("vocab_size", "vocab_size", &[self.vocab_size])?;
        fits(
            "vocab_size_per_layer_input",
            "vocab_size_per_layer_input",
            &[self.vocab_size_per_layer_input],
        )?;
        fits("sliding_window", "sliding_window", &[self.sliding_window])?;
        let widest = (0..self.num_hidden_layers).any(|i| self.double_wide(i));
        fits(
            "intermediate_size",
            if widest {
                "2 × intermediate_size (use_double_wide_mlp)"
            } else {
                "intermediate_size"
            },
            &[self.intermediate_size, if widest { 2 } else { 1 }],
        )?;
        fits(
            "hidden_size_per_layer_input",
            "num_hidden_layers × hidden_size_per_layer_input",
            &[self.num_hidden_layers, self.hidden_size_per_layer_input],
        )?;
        for t in [LayerType::Sliding, LayerType::Full] {
            let Some(layer) = self.layer_types.iter().position(|&l| l == t) else {
                continue;
            };
            let (d_key, d) = match t {
                LayerType::Sliding => ("head_dim", self.head_dim),
                LayerType::Full => ("global_head_dim", self.global_head_dim),
            };
            fits(
                d_key,
                &format!("num_attention_heads × {d_key}"),
                &[self.num_attention_heads, d],
            )?;
            let kv_key = if self.k_eq_v(layer) && self.num_global_key_value_heads.is_some() {
                "num_global_key_value_heads"
            } else {
                "num_key_value_heads"
            };
            fits(
                kv_key,
                &format!("{kv_key} × {d_key}"),
                &[self.kv_heads(layer), d],
            )?;
        }
        if let Some(m) = self.moe {
            fits("num_experts", "num_experts", &[m.num_experts])?;
            fits(
                "moe_intermediate_size",
                "2 × moe_intermediate_size (the fused gate_up_proj)",
                &[m.intermediate_size, 2],
            )?;
        }
        Ok(())
    }

    /// The flat `gemma4_text` config with every key spelled out (gemma4.md §1 rule), in
    /// the order of the published configs. `quantization` is written separately.
    pub fn to_text_json(&self) -> Value {
        use serde_json::json;
        let rope = |p: &RopeParams| match *p {
            RopeParams::Default { theta } => {
                json!({"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 1.0})
            }
            RopeParams::Proportional {
                theta,
                partial_rotary_factor,
                factor,
            } => {
                let mut v = json!({
                    "rope_type": "proportional",
                    "rope_theta": theta,
                    "partial_rotary_factor": partial_rotary_factor,
                });
                if let Some(f) = factor {
                    v["factor"] = json!(f);
                }
                v
            }
        };
        let moe = self.moe;
        json!({
            "model_type": "gemma4_text",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "intermediate_size": self.intermediate_size,
            "moe_intermediate_size": moe.map(|m| m.intermediate_size),
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "num_global_key_value_heads": self.num_global_key_value_heads,
            "head_dim": self.head_dim,
            "global_head_dim": self.global_head_dim,
            "attention_k_eq_v": self.attention_k_eq_v,
            "sliding_window": self.sliding_window,
            "layer_types": self.layer_types.iter().map(|t| t.config_name()).collect::<Vec<_>>(),
            "num_kv_shared_layers": self.num_kv_shared_layers,
            "use_double_wide_mlp": self.use_double_wide_mlp,
            "hidden_size_per_layer_input": self.hidden_size_per_layer_input,
            "vocab_size": self.vocab_size,
            "vocab_size_per_layer_input": self.vocab_size_per_layer_input,
            "enable_moe_block": moe.is_some(),
            "num_experts": moe.map(|m| m.num_experts),
            "top_k_experts": moe.map(|m| m.top_k),
            "rope_parameters": {
                "sliding_attention": rope(&self.rope_sliding),
                "full_attention": rope(&self.rope_full),
            },
            "hidden_activation": "gelu_pytorch_tanh",
            "final_logit_softcapping": self.final_logit_softcapping,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_ids,
            "pad_token_id": self.pad_token_id,
        })
    }

    /// F = N − S: the first KV-sharing layer, and the number of caches.
    pub fn first_shared_layer(&self) -> usize {
        self.num_hidden_layers - self.num_kv_shared_layers
    }

    /// Whether layer `i` is full attention with K=V.
    pub fn k_eq_v(&self, layer: usize) -> bool {
        self.attention_k_eq_v && self.layer_types[layer] == LayerType::Full
    }

    /// The head dim D of layer `i`.
    pub fn head_dim_of(&self, layer: usize) -> usize {
        match self.layer_types[layer] {
            LayerType::Full => self.global_head_dim,
            LayerType::Sliding => self.head_dim,
        }
    }

    /// The KV heads of layer `i`.
    pub fn kv_heads(&self, layer: usize) -> usize {
        match (self.k_eq_v(layer), self.num_global_key_value_heads) {
            (true, Some(n)) => n,
            _ => self.num_key_value_heads,
        }
    }

    /// The RoPE of a layer type.
    pub fn rope(&self, t: LayerType) -> &RopeParams {
        match t {
            LayerType::Sliding => &self.rope_sliding,
            LayerType::Full => &self.rope_full,
        }
    }

    /// The dense MLP width of layer `i` (doubled on shared layers under use_double_wide_mlp).
    pub fn mlp_width(&self, layer: usize) -> usize {
        if self.double_wide(layer) {
            2 * self.intermediate_size
        } else {
            self.intermediate_size
        }
    }

    /// Whether layer `i` uses the double-wide MLP.
    pub fn double_wide(&self, layer: usize) -> bool {
        let first_shared = self.first_shared_layer();
        self.use_double_wide_mlp && self.num_kv_shared_layers > 0 && layer >= first_shared
    }
}

fn read_layer_types(c: &Obj<'_>, n: usize) -> Result<Vec<LayerType>> {
    let items = c.array("layer_types")?;
    if items.len() != n {
        return Err(c.err(
            "layer_types",
            format!(
                "has {} entries, expected num_hidden_layers = {n}",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some("sliding_attention") => Ok(LayerType::Sliding),
            Some("full_attention") => Ok(LayerType::Full),
            _ => Err(c.err(
                &format!("layer_types[{i}]"),
                format!("expected \"sliding_attention\" or \"full_attention\", found {v}"),
            )),
        })
        .collect()
}

fn read_rope(rope: &Obj<'_>, layer_type: &str) -> Result<RopeParams> {
    let p = rope.child(layer_type, "{rope_type, rope_theta, partial_rotary_factor}")?;
    let theta = p.f64("rope_theta")?;
    if !(theta.is_finite() && theta > 0.0) {
        return Err(p.err("rope_theta", format!("must be > 0, found {theta}")));
    }
    let factor = p.opt_f64("factor")?;
    match p.str("rope_type")? {
        "default" => {
            if factor.is_some_and(|f| f != 1.0) {
                return Err(p.err("factor", "the default rope type takes no factor"));
            }
            Ok(RopeParams::Default { theta })
        }
        "proportional" => {
            let partial_rotary_factor = p.opt_f64("partial_rotary_factor")?.unwrap_or(1.0);
            if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
                return Err(p.err(
                    "partial_rotary_factor",
                    format!("must be in (0, 1], found {partial_rotary_factor}"),
                ));
            }
            Ok(RopeParams::Proportional {
                theta,
                partial_rotary_factor,
                factor,
            })
        }
        other => Err(p.err(
            "rope_type",
            format!("expected \"default\" or \"proportional\", found {other:?}"),
        )),
    }
}
