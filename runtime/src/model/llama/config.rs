//! The Llama-family config (`config.json` with `model_type` llama, qwen3 or minicpm),
//! validated with mlx-lm 0.32.0's defaults (`models/llama.py`, `models/qwen3.py`,
//! `models/minicpm.py`): what mlx-lm fills in is filled in the same way, what it would
//! compute differently from this engine (attention or MLP biases, traditional RoPE,
//! sliding layers, other RoPE scalings) or not load at all (a tied MiniCPM) is an error
//! naming the file and key.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::{check_dim, positions, positive_f64, read_num_layers};
use crate::error::{Error, Result};
use crate::json::{self, Obj};
use crate::nn::rope::{Llama3Scaling, LongRopeScaling, YarnScaling};
use crate::quantization::QuantizationMap;

/// Which mlx-lm model file computes the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlamaKind {
    /// `models/llama.py` (Llama 2/3.x and the many models shaped like it).
    Llama,
    /// `models/qwen3.py`: Llama with RMSNorm on q and k over the head dim.
    Qwen3,
    /// `models/minicpm.py`: Llama with the embedding, both residual branches and the
    /// head input scaled ([`MiniCpmScales`]).
    MiniCpm,
}

impl LlamaKind {
    /// The config's `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            LlamaKind::Llama => "llama",
            LlamaKind::Qwen3 => "qwen3",
            LlamaKind::MiniCpm => "minicpm",
        }
    }
}

/// MiniCPM's scalings (muP), as `models/minicpm.py` applies them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MiniCpmScales {
    /// scale_emb: the embedding is multiplied by it.
    pub scale_emb: f64,
    /// scale_depth: each residual branch is multiplied by `scale_depth / sqrt(layers)`.
    pub scale_depth: f64,
    /// dim_model_base: the head's input is divided by `hidden_size / dim_model_base`.
    pub dim_model_base: f64,
}

impl MiniCpmScales {
    /// `scale_depth / num_hidden_layers ** 0.5`, in f64 as Python computes it.
    pub fn residual(&self, layers: usize) -> f64 {
        self.scale_depth / (layers as f64).powf(0.5)
    }

    /// `hidden_size / dim_model_base`.
    pub fn logit_divisor(&self, hidden_size: usize) -> f64 {
        hidden_size as f64 / self.dim_model_base
    }
}

/// How the family rotates queries and keys (mlx-lm's `initialize_rope`).
#[derive(Debug, Clone, PartialEq)]
pub enum LlamaRope {
    /// `nn.RoPE(head_dim, base = rope_theta)` (no scaling, or `rope_type: default`).
    Default {
        /// rope_theta.
        theta: f64,
    },
    /// mlx-lm's `Llama3RoPE` (`rope_type: llama3`).
    Llama3 {
        /// rope_theta.
        theta: f64,
        /// The scaling parameters.
        scaling: Llama3Scaling,
    },
    /// `nn.RoPE` with `scale = 1 / factor` (`rope_type: linear`).
    Linear {
        /// rope_theta.
        theta: f64,
        /// factor.
        factor: f64,
    },
    /// mlx-lm's `SuScaledRoPE` (`rope_type: longrope`).
    LongRope {
        /// rope_theta.
        theta: f64,
        /// The scaling parameters.
        scaling: LongRopeScaling,
        /// short_factor as written (mlx-lm requires it and never uses it; kept so the
        /// written config reads back the same).
        short_factor: Vec<f64>,
    },
    /// mlx-lm's `YarnRoPE` (`rope_type: yarn`), its input scale included.
    Yarn {
        /// rope_theta.
        theta: f64,
        /// The scaling parameters.
        scaling: YarnScaling,
    },
}

impl LlamaRope {
    /// Whether `rope_traditional` reaches the rotation: mlx-lm's `SuScaledRoPE`
    /// (longrope) always rotates halves; every other kind passes the flag on.
    pub fn takes_traditional(&self) -> bool {
        !matches!(self, LlamaRope::LongRope { .. })
    }

    /// rope_theta.
    pub fn theta(&self) -> f64 {
        match self {
            LlamaRope::Default { theta }
            | LlamaRope::Llama3 { theta, .. }
            | LlamaRope::Linear { theta, .. }
            | LlamaRope::LongRope { theta, .. }
            | LlamaRope::Yarn { theta, .. } => *theta,
        }
    }
}

/// A validated Llama-family config.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Where it was read from, for messages.
    pub source: String,
    /// llama or qwen3.
    pub kind: LlamaKind,
    /// hidden_size.
    pub hidden_size: usize,
    /// num_hidden_layers.
    pub num_hidden_layers: usize,
    /// intermediate_size (the SwiGLU width).
    pub intermediate_size: usize,
    /// num_attention_heads.
    pub num_attention_heads: usize,
    /// num_key_value_heads.
    pub num_key_value_heads: usize,
    /// head_dim (llama: `hidden_size / num_attention_heads` when absent).
    pub head_dim: usize,
    /// RMSNorm on q and k (Qwen3).
    pub qk_norm: bool,
    /// MiniCPM's scalings.
    pub minicpm: Option<MiniCpmScales>,
    /// The RoPE.
    pub rope: LlamaRope,
    /// RoPE rotates adjacent pairs instead of halves: `rope_traditional` where mlx-lm
    /// passes it on (llama.py and minicpm.py read it, qwen3.py and LongRoPE always
    /// rotate halves).
    pub rope_traditional: bool,
    /// rms_norm_eps.
    pub rms_norm_eps: f64,
    /// vocab_size.
    pub vocab_size: usize,
    /// tie_word_embeddings.
    pub tie_word_embeddings: bool,
    /// max_position_embeddings (informational; Llama 3 RoPE does not use it).
    pub max_position_embeddings: Option<usize>,
    /// bos_token_id.
    pub bos_token_id: Option<u32>,
    /// eos_token_id, as a list.
    pub eos_token_ids: Vec<u32>,
    /// The weight quantization map, when the checkpoint is quantized.
    pub quantization: Option<QuantizationMap>,
}

impl LlamaConfig {
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
        let c = Obj::new(file, "", value)?;
        let kind = match c.str("model_type")? {
            "llama" => LlamaKind::Llama,
            "qwen3" => LlamaKind::Qwen3,
            "minicpm" => LlamaKind::MiniCpm,
            other => {
                return Err(c.err(
                    "model_type",
                    format!("expected llama, qwen3 or minicpm, found {other:?}"),
                ));
            }
        };
        let qwen = kind == LlamaKind::Qwen3;
        let minicpm_kind = kind == LlamaKind::MiniCpm;
        let num_hidden_layers = read_num_layers(&c)?;
        let hidden_size = c.positive("hidden_size")?;
        let intermediate_size = c.positive("intermediate_size")?;
        let num_attention_heads = c.positive("num_attention_heads")?;
        // Required by qwen3.py's and minicpm.py's dataclasses; llama.py defaults them.
        let num_key_value_heads = match (qwen || minicpm_kind, c.opt_usize("num_key_value_heads")?)
        {
            (_, Some(n)) => n,
            (false, None) => num_attention_heads,
            (true, None) => {
                return Err(c.err("num_key_value_heads", "missing; expected an integer"));
            }
        };
        if num_key_value_heads == 0 || !num_attention_heads.is_multiple_of(num_key_value_heads) {
            return Err(c.err(
                "num_key_value_heads",
                format!(
                    "must divide num_attention_heads ({num_attention_heads}), found \
                     {num_key_value_heads}"
                ),
            ));
        }
        let head_dim = match (qwen, c.opt_usize("head_dim")?) {
            // minicpm.py takes hidden_size // num_attention_heads whatever the config says.
            (_, Some(d)) if minicpm_kind && d * num_attention_heads != hidden_size => {
                return Err(c.err(
                    "head_dim",
                    format!(
                        "MiniCPM's head dim is hidden_size / num_attention_heads ({}), found {d}",
                        hidden_size / num_attention_heads.max(1)
                    ),
                ));
            }
            (_, Some(d)) => d,
            (false, None) => {
                if !hidden_size.is_multiple_of(num_attention_heads) {
                    return Err(c.err(
                        "head_dim",
                        format!(
                            "missing, and hidden_size ({hidden_size}) is not a multiple of \
                             num_attention_heads ({num_attention_heads})"
                        ),
                    ));
                }
                hidden_size / num_attention_heads
            }
            (true, None) => return Err(c.err("head_dim", "missing; expected an integer")),
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(c.err(
                "head_dim",
                format!("must be even and positive, found {head_dim}"),
            ));
        }
        let rms_norm_eps = c.f64("rms_norm_eps")?;
        if !(rms_norm_eps.is_finite() && rms_norm_eps > 0.0) {
            return Err(c.err("rms_norm_eps", format!("must be > 0, found {rms_norm_eps}")));
        }
        let vocab_size = c.positive("vocab_size")?;
        let max_position_embeddings = c.opt_usize("max_position_embeddings")?;
        if qwen && max_position_embeddings.is_none() {
            return Err(c.err("max_position_embeddings", "missing; expected an integer"));
        }
        let tie_word_embeddings = match (kind, c.opt_bool("tie_word_embeddings")?) {
            (LlamaKind::MiniCpm, Some(true)) => {
                return Err(c.err(
                    "tie_word_embeddings",
                    "a tied MiniCPM does not load in mlx-lm 0.32.0 (its sanitize adds \
                     lm_head.weight, which a tied model has no module for); expected false",
                ));
            }
            (_, Some(t)) => t,
            (LlamaKind::MiniCpm, None) => false,
            (LlamaKind::Llama, None) => true,
            (LlamaKind::Qwen3, None) => {
                return Err(c.err("tie_word_embeddings", "missing; expected true or false"));
            }
        };
        let minicpm = if minicpm_kind {
            Some(MiniCpmScales {
                scale_emb: positive_f64(&c, "scale_emb", None)?,
                scale_depth: positive_f64(&c, "scale_depth", None)?,
                dim_model_base: positive_f64(&c, "dim_model_base", None)?,
            })
        } else {
            None
        };
        for key in ["attention_bias", "mlp_bias"] {
            if c.opt_bool(key)? == Some(true) {
                return Err(c.err(key, "biased projections are not supported; expected false"));
            }
        }
        let asked_traditional = match kind {
            LlamaKind::Qwen3 => false,
            LlamaKind::Llama | LlamaKind::MiniCpm => {
                c.opt_bool("rope_traditional")?.unwrap_or(false)
            }
        };
        if let Some(types) = c.get_non_null("layer_types") {
            let all_full = types
                .as_array()
                .is_some_and(|t| t.iter().all(|v| v.as_str() == Some("full_attention")));
            if !all_full {
                return Err(c.err(
                    "layer_types",
                    "only full_attention layers are supported in the Llama family",
                ));
            }
        }
        if c.opt_bool("use_sliding_window")? == Some(true) {
            return Err(c.err(
                "use_sliding_window",
                "sliding-window attention is not supported in the Llama family; expected false",
            ));
        }
        if let Some(act) = c.opt_str("hidden_act")?
            && act != "silu"
        {
            return Err(c.err("hidden_act", format!("expected \"silu\", found {act:?}")));
        }
        let rope = read_rope(&c, kind, max_position_embeddings, head_dim)?;
        let rope_traditional = asked_traditional && rope.takes_traditional();

        let (bos_token_id, eos_token_ids) = crate::config::read_special_tokens(&c)?;
        let quantization = crate::config::read_quantization(file, &c)?;
        // Every weight dimension fits MLX's i32 shapes (the tensor list multiplies them).
        check_dim(&c, "hidden_size", "hidden_size", &[hidden_size])?;
        check_dim(
            &c,
            "intermediate_size",
            "intermediate_size",
            &[intermediate_size],
        )?;
        check_dim(&c, "vocab_size", "vocab_size", &[vocab_size])?;
        check_dim(
            &c,
            "head_dim",
            "num_attention_heads × head_dim",
            &[num_attention_heads, head_dim],
        )?;
        Ok(LlamaConfig {
            source: file.to_owned(),
            kind,
            hidden_size,
            num_hidden_layers,
            intermediate_size,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            qk_norm: qwen,
            minicpm,
            rope,
            rope_traditional,
            rms_norm_eps,
            vocab_size,
            tie_word_embeddings,
            max_position_embeddings,
            bos_token_id,
            eos_token_ids,
            quantization,
        })
    }

    /// The config as mlx-lm reads it (every key this engine uses spelled out).
    /// `quantization` is written separately.
    pub fn to_json(&self) -> Value {
        let rope_scaling = match &self.rope {
            LlamaRope::Default { .. } => Value::Null,
            LlamaRope::Llama3 { scaling: s, .. } => json!({
                "rope_type": "llama3",
                "factor": s.factor,
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_position_embeddings as u64,
            }),
            LlamaRope::Linear { factor, .. } => json!({"rope_type": "linear", "factor": factor}),
            LlamaRope::LongRope {
                scaling,
                short_factor,
                ..
            } => json!({
                "rope_type": "longrope",
                "long_factor": scaling.long_factor,
                "short_factor": short_factor,
                "original_max_position_embeddings":
                    scaling.original_max_position_embeddings as u64,
            }),
            LlamaRope::Yarn { scaling, .. } => scaling.to_json("rope_type"),
        };
        let theta = self.rope.theta();
        let mut out = json!({
            "model_type": self.kind.model_type(),
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "attention_bias": false,
            "mlp_bias": false,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": theta,
            "rope_scaling": rope_scaling,
            "rope_traditional": self.rope_traditional,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_ids,
        });
        if let (Some(m), Some(o)) = (self.minicpm, out.as_object_mut()) {
            o.insert("scale_emb".into(), json!(m.scale_emb));
            o.insert("scale_depth".into(), json!(m.scale_depth));
            o.insert("dim_model_base".into(), json!(m.dim_model_base));
        }
        out
    }
}

fn read_rope(
    c: &Obj<'_>,
    kind: LlamaKind,
    max_position_embeddings: Option<usize>,
    head_dim: usize,
) -> Result<LlamaRope> {
    let qwen = kind == LlamaKind::Qwen3;
    // transformers >= 5 nests rope_theta and rope_scaling under rope_parameters (qwen3.py
    // reads them from there when the flat keys are absent).
    let params = match c.get_non_null("rope_parameters") {
        Some(_) if qwen => Some(c.child("rope_parameters", "an object")?),
        _ => None,
    };
    let theta = match (c.opt_f64("rope_theta")?, &params) {
        (Some(_), _) => positive_f64(c, "rope_theta", None)?,
        (None, Some(p)) => positive_f64(p, "rope_theta", None)?,
        (None, None) => match kind {
            LlamaKind::Qwen3 => return Err(c.err("rope_theta", "missing; expected a number")),
            LlamaKind::Llama => 10000.0,
            LlamaKind::MiniCpm => 1_000_000.0,
        },
    };
    let scaling = match (c.get_non_null("rope_scaling"), params) {
        (Some(_), _) => Some(c.child("rope_scaling", "an object")?),
        (None, p) => p,
    };
    let Some(s) = scaling else {
        return Ok(LlamaRope::Default { theta });
    };
    let type_key = if s.get("type").is_some() {
        "type"
    } else {
        "rope_type"
    };
    let rope_type = match s.opt_str("type")? {
        Some(t) => t,
        None => s.opt_str("rope_type")?.unwrap_or("default"),
    };
    match rope_type {
        "default" => Ok(LlamaRope::Default { theta }),
        "linear" => Ok(LlamaRope::Linear {
            theta,
            factor: positive_f64(&s, "factor", None)?,
        }),
        "llama3" => {
            let scaling = Llama3Scaling {
                factor: positive_f64(&s, "factor", None)?,
                low_freq_factor: positive_f64(&s, "low_freq_factor", Some(1.0))?,
                high_freq_factor: positive_f64(&s, "high_freq_factor", Some(4.0))?,
                original_max_position_embeddings: positions(
                    &s,
                    "original_max_position_embeddings",
                    Some(8192.0),
                )?,
            };
            if scaling.high_freq_factor <= scaling.low_freq_factor {
                return Err(s.err(
                    "high_freq_factor",
                    format!(
                        "must exceed low_freq_factor ({}), found {}",
                        scaling.low_freq_factor, scaling.high_freq_factor
                    ),
                ));
            }
            Ok(LlamaRope::Llama3 { theta, scaling })
        }
        "longrope" => {
            // SuScaledRoPE divides max_position_embeddings by the original: without it
            // mlx-lm fails to build the model.
            let max = max_position_embeddings.ok_or_else(|| {
                c.err(
                    "max_position_embeddings",
                    "missing; longrope scales by it (expected an integer)",
                )
            })?;
            let factors = |key: &str| -> Result<Vec<f64>> {
                let bad = || {
                    s.err(
                        key,
                        format!(
                            "expected a number or {} positive numbers (one per rotated pair)",
                            head_dim / 2
                        ),
                    )
                };
                let v = s
                    .get_non_null(key)
                    .ok_or_else(|| s.err(key, "missing; expected a list of numbers"))?;
                let list: Vec<f64> = match v {
                    Value::Array(items) => items
                        .iter()
                        .map(|x| x.as_f64().ok_or_else(bad))
                        .collect::<Result<_>>()?,
                    other => vec![other.as_f64().ok_or_else(bad)?],
                };
                let ok_len = list.len() == 1 || list.len() == head_dim / 2;
                if !ok_len || list.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
                    return Err(bad());
                }
                Ok(list)
            };
            let scaling = LongRopeScaling {
                long_factor: factors("long_factor")?,
                original_max_position_embeddings: positions(
                    &s,
                    "original_max_position_embeddings",
                    None,
                )?,
                max_position_embeddings: max as f64,
            };
            Ok(LlamaRope::LongRope {
                theta,
                scaling,
                short_factor: factors("short_factor")?,
            })
        }
        // mlx-lm's initialize_rope builds the same YarnRoPE for these spellings.
        "yarn" | "deepseek_yarn" => Ok(LlamaRope::Yarn {
            theta,
            scaling: YarnScaling::read(&s)?,
        }),
        other => Err(s.err(
            type_key,
            format!(
                "expected \"default\", \"linear\", \"llama3\", \"longrope\" or \"yarn\", \
                 found {other:?}"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA: &str = include_str!("../../../../generated/models/llama-3.2-1b/config.json");
    const QWEN: &str = include_str!("../../../../generated/models/qwen3-0.6b/config.json");
    const MINICPM4: &str = include_str!("../../../../generated/models/minicpm4-8b/config.json");
    const MINICPM2: &str = include_str!("../../../../generated/models/minicpm-2b/config.json");

    fn with(base: &str, edit: impl FnOnce(&mut Value)) -> String {
        let mut v: Value = serde_json::from_str(base).unwrap();
        edit(&mut v);
        v.to_string()
    }

    fn err(text: &str) -> String {
        LlamaConfig::from_json_str("c.json", text)
            .expect_err("must fail")
            .to_string()
    }

    #[test]
    fn the_presets_read_as_published() {
        let l = LlamaConfig::from_json_str("l", LLAMA).unwrap();
        assert_eq!(
            (
                l.hidden_size,
                l.num_hidden_layers,
                l.num_attention_heads,
                l.num_key_value_heads
            ),
            (2048, 16, 32, 8)
        );
        assert_eq!(
            (l.head_dim, l.intermediate_size, l.vocab_size),
            (64, 8192, 128256)
        );
        assert!(l.tie_word_embeddings && !l.qk_norm);
        match l.rope {
            LlamaRope::Llama3 { theta, scaling } => {
                assert_eq!(theta, 500000.0);
                assert_eq!(scaling.factor, 32.0);
                assert_eq!(scaling.original_max_position_embeddings, 8192.0);
            }
            other => panic!("{other:?}"),
        }
        let q = LlamaConfig::from_json_str("q", QWEN).unwrap();
        assert_eq!(
            (q.hidden_size, q.num_hidden_layers, q.head_dim),
            (1024, 28, 128)
        );
        assert!(q.qk_norm && q.tie_word_embeddings);
        assert_eq!(q.rope, LlamaRope::Default { theta: 1e6 });
        assert_eq!(q.max_position_embeddings, Some(40960));
        // The written form reads back to the same config.
        let again = LlamaConfig::from_value("l", &l.to_json()).unwrap();
        assert_eq!(
            LlamaConfig {
                source: "l".into(),
                ..again
            },
            l
        );
    }

    #[test]
    fn yarn_and_traditional_rope_read_as_mlx_lm_reads_them() {
        let q = LlamaConfig::from_json_str(
            "q",
            &with(QWEN, |v| {
                v["rope_scaling"] = serde_json::json!({
                    "rope_type": "yarn", "factor": 4.0,
                    "original_max_position_embeddings": 32768
                });
                // qwen3.py always rotates halves, whatever the config says.
                v["rope_traditional"] = true.into();
            }),
        )
        .unwrap();
        let LlamaRope::Yarn { theta, scaling } = q.rope else {
            panic!("{:?}", q.rope)
        };
        assert_eq!((theta, scaling.factor), (1e6, 4.0));
        assert_eq!(
            (
                scaling.beta_fast,
                scaling.beta_slow,
                scaling.mscale,
                scaling.mscale_all_dim
            ),
            (32.0, 1.0, 1.0, 0.0)
        );
        assert!((scaling.input_scale() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
        assert!(!q.rope_traditional);
        let again = LlamaConfig::from_value("q", &q.to_json()).unwrap();
        assert_eq!(again.rope, q.rope);
        let l =
            LlamaConfig::from_json_str("l", &with(LLAMA, |v| v["rope_traditional"] = true.into()))
                .unwrap();
        assert!(l.rope_traditional);
        assert!(
            LlamaConfig::from_value("l", &l.to_json())
                .unwrap()
                .rope_traditional
        );
    }

    #[test]
    fn what_mlx_lm_computes_differently_is_an_error_naming_the_key() {
        let cases: Vec<(String, &str)> = vec![
            (
                with(LLAMA, |v| v["attention_bias"] = true.into()),
                "c.json: `attention_bias`",
            ),
            (
                with(LLAMA, |v| v["rope_traditional"] = 1.into()),
                "`rope_traditional`: expected true or false",
            ),
            (
                with(LLAMA, |v| v["rope_scaling"]["rope_type"] = "dynamic".into()),
                "`rope_scaling.rope_type`: expected \"default\", \"linear\", \"llama3\", \"longrope\" or \"yarn\"",
            ),
            (
                with(QWEN, |v| {
                    v["rope_scaling"] = serde_json::json!({"rope_type": "yarn"});
                }),
                "`rope_scaling.factor`: missing",
            ),
            (
                with(QWEN, |v| {
                    v["rope_scaling"] = serde_json::json!({
                        "rope_type": "yarn", "factor": 4.0,
                        "original_max_position_embeddings": 32768.5
                    });
                }),
                "`rope_scaling.original_max_position_embeddings`: must be a whole number",
            ),
            (
                with(QWEN, |v| {
                    v["rope_scaling"] = serde_json::json!({
                        "rope_type": "yarn", "factor": 4.0, "beta_fast": -1
                    });
                }),
                "`rope_scaling.beta_fast`: must be > 0",
            ),
            (
                with(QWEN, |v| {
                    v["rope_scaling"] = serde_json::json!({
                        "rope_type": "yarn", "factor": 4.0, "mscale": "big"
                    });
                }),
                "`rope_scaling.mscale`: expected a number",
            ),
            (
                with(LLAMA, |v| v["num_key_value_heads"] = 5.into()),
                "`num_key_value_heads`: must divide",
            ),
            (
                with(LLAMA, |v| {
                    v["layer_types"] = serde_json::json!(["sliding_attention"])
                }),
                "`layer_types`",
            ),
            (
                with(LLAMA, |v| v["model_type"] = "mistral".into()),
                "`model_type`",
            ),
            (
                with(QWEN, |v| {
                    v.as_object_mut().unwrap().remove("head_dim");
                }),
                "`head_dim`: missing",
            ),
            (
                with(QWEN, |v| v["use_sliding_window"] = true.into()),
                "`use_sliding_window`",
            ),
            (
                with(QWEN, |v| v["hidden_act"] = "gelu".into()),
                "`hidden_act`",
            ),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
    }

    #[test]
    fn minicpm_reads_its_scales_and_longrope() {
        let c = LlamaConfig::from_json_str("m", MINICPM4).unwrap();
        assert_eq!(c.kind, LlamaKind::MiniCpm);
        assert_eq!((c.head_dim, c.num_key_value_heads), (128, 2));
        assert!(!c.tie_word_embeddings && !c.qk_norm);
        let s = c.minicpm.expect("scales");
        assert_eq!(
            (s.scale_emb, s.scale_depth, s.dim_model_base),
            (12.0, 1.4, 256.0)
        );
        assert_eq!(s.residual(32), 1.4 / 32f64.sqrt());
        assert_eq!(s.logit_divisor(4096), 16.0);
        match &c.rope {
            LlamaRope::LongRope {
                theta,
                scaling,
                short_factor,
            } => {
                assert_eq!(*theta, 10000.0);
                assert_eq!(scaling.long_factor.len(), 64);
                assert_eq!(short_factor.len(), 64);
                // max == original: no input scale.
                assert_eq!(scaling.mscale(), 1.0);
            }
            other => panic!("{other:?}"),
        }
        let again = LlamaConfig::from_value("m", &c.to_json()).unwrap();
        assert_eq!(
            LlamaConfig {
                source: "m".into(),
                ..again
            },
            c
        );
        // minicpm.py's defaults: rope_theta 1e6, untied.
        let small = with(MINICPM2, |v| {
            let o = v.as_object_mut().unwrap();
            o.remove("rope_theta");
        });
        let c = LlamaConfig::from_json_str("m", &small).unwrap();
        assert_eq!(c.rope, LlamaRope::Default { theta: 1e6 });
        assert_eq!(c.head_dim, 64);
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn minicpm_refuses_what_mlx_lm_cannot_load_naming_the_key() {
        let cases: Vec<(String, &str)> = vec![
            (
                with(MINICPM2, |v| v["tie_word_embeddings"] = true.into()),
                "`tie_word_embeddings`: a tied MiniCPM does not load in mlx-lm",
            ),
            (
                with(MINICPM2, |v| {
                    v.as_object_mut().unwrap().remove("scale_depth");
                }),
                "`scale_depth`: missing",
            ),
            (
                with(MINICPM2, |v| v["head_dim"] = 128.into()),
                "`head_dim`: MiniCPM's head dim is hidden_size / num_attention_heads (64)",
            ),
            (
                with(MINICPM4, |v| {
                    v.as_object_mut().unwrap().remove("max_position_embeddings");
                }),
                "`max_position_embeddings`: missing; longrope scales by it",
            ),
            (
                with(MINICPM4, |v| {
                    v["rope_scaling"]["long_factor"] = serde_json::json!([1.0, 2.0]);
                }),
                "`rope_scaling.long_factor`: expected a number or 64 positive numbers",
            ),
            (
                with(MINICPM4, |v| {
                    v["rope_scaling"]
                        .as_object_mut()
                        .unwrap()
                        .remove("short_factor");
                }),
                "`rope_scaling.short_factor`: missing",
            ),
            (
                with(MINICPM4, |v| v["rope_scaling"]["rope_type"] = "su".into()),
                "`rope_scaling.rope_type`: expected",
            ),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
    }
}
