//! The MLA-family config (`config.json` with `model_type` deepseek_v32 or glm_moe_dsa),
//! validated with mlx-lm 0.32.0's rules (`models/deepseek_v32.py`, `models/glm_moe_dsa.py`):
//! DeepSeek-V3.2's dataclass defaults are filled in as mlx-lm fills them, GLM-5's
//! required keys are required, and what mlx-lm would compute differently from this
//! engine (biased attention projections, another routing method or scoring function,
//! no query compression, another RoPE scaling) is an error naming the file and key.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::{check_dim, positive_f64, read_num_layers};
use crate::error::{Error, Result};
use crate::json::{self, Obj};
use crate::nn::rope::YarnScaling;
use crate::quantization::QuantizationMap;

/// Which mlx-lm model file reads the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MlaKind {
    /// `models/deepseek_v32.py` (DeepSeek-V3.2).
    DeepseekV32,
    /// `models/glm_moe_dsa.py` (GLM-5): DeepSeek-V3.2's model with GLM's config keys
    /// (`rope_parameters` required, the indexer's RoPE interleaved by default).
    GlmMoeDsa,
}

impl MlaKind {
    /// The config's `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            MlaKind::DeepseekV32 => "deepseek_v32",
            MlaKind::GlmMoeDsa => "glm_moe_dsa",
        }
    }
}

/// How the family rotates the RoPE parts of queries and keys (mlx-lm's
/// `initialize_rope`, always `traditional = True` for attention).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MlaRope {
    /// `nn.RoPE(qk_rope_head_dim, base = theta)` (no scaling, or type `default`).
    Default {
        /// rope_theta.
        theta: f64,
    },
    /// `nn.RoPE` with `scale = 1 / factor` (type `linear`).
    Linear {
        /// rope_theta.
        theta: f64,
        /// factor.
        factor: f64,
    },
    /// mlx-lm's `YarnRoPE` (type `yarn` or `deepseek_yarn`).
    Yarn {
        /// rope_theta.
        theta: f64,
        /// The scaling parameters.
        scaling: YarnScaling,
    },
}

impl MlaRope {
    /// rope_theta.
    pub fn theta(&self) -> f64 {
        match self {
            MlaRope::Default { theta }
            | MlaRope::Linear { theta, .. }
            | MlaRope::Yarn { theta, .. } => *theta,
        }
    }
}

/// The routed experts (`n_routed_experts` set).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlaMoe {
    /// n_routed_experts.
    pub n_routed_experts: usize,
    /// n_shared_experts (a shared SwiGLU `n × moe_intermediate_size` wide), if any.
    pub n_shared_experts: Option<usize>,
    /// num_experts_per_tok.
    pub num_experts_per_tok: usize,
    /// moe_intermediate_size.
    pub moe_intermediate_size: usize,
    /// n_group: the experts are split into this many groups for choosing.
    pub n_group: usize,
    /// topk_group: groups kept.
    pub topk_group: usize,
    /// norm_topk_prob: the chosen weights are normalized to sum to 1.
    pub norm_topk_prob: bool,
    /// routed_scaling_factor.
    pub routed_scaling_factor: f64,
    /// first_k_dense_replace: layers below this are dense.
    pub first_k_dense_replace: usize,
    /// moe_layer_freq: a layer at or past `first_k_dense_replace` routes when its index
    /// is a multiple of this.
    pub moe_layer_freq: usize,
}

impl MlaMoe {
    /// Whether layer `i` routes through experts (mlx-lm's `DeepseekV32DecoderLayer`).
    pub fn routes(&self, i: usize) -> bool {
        i >= self.first_k_dense_replace && i.is_multiple_of(self.moe_layer_freq)
    }
}

/// Whether a layer runs its own DSA indexer (transformers' `indexer_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexerType {
    /// `full`: the layer runs its indexer (and caches its keys).
    Full,
    /// `shared`: the layer has no indexer and attends over the keys the last `full`
    /// layer chose in the same step.
    Shared,
}

impl IndexerType {
    /// `full` or `shared`, as configs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            IndexerType::Full => "full",
            IndexerType::Shared => "shared",
        }
    }
}

/// The DeepSeek Sparse Attention indexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlaIndexer {
    /// index_n_heads.
    pub n_heads: usize,
    /// index_head_dim.
    pub head_dim: usize,
    /// index_topk: keys kept once more than this many are cached.
    pub topk: usize,
    /// indexer_rope_interleave: its RoPE rotates adjacent pairs.
    pub rope_interleave: bool,
}

/// A validated MLA-family config.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaConfig {
    /// Where it was read from, for messages.
    pub source: String,
    /// Which model file reads it.
    pub kind: MlaKind,
    /// vocab_size.
    pub vocab_size: usize,
    /// hidden_size.
    pub hidden_size: usize,
    /// num_hidden_layers (multi-token-prediction layers past it are dropped, as
    /// mlx-lm's `sanitize` drops them).
    pub num_hidden_layers: usize,
    /// intermediate_size: the dense layers' SwiGLU width.
    pub intermediate_size: usize,
    /// num_attention_heads.
    pub num_attention_heads: usize,
    /// num_key_value_heads (read and written; MLA has one latent "head").
    pub num_key_value_heads: usize,
    /// q_lora_rank: the compressed query's width.
    pub q_lora_rank: usize,
    /// kv_lora_rank: the compressed latent's width.
    pub kv_lora_rank: usize,
    /// qk_nope_head_dim.
    pub qk_nope_head_dim: usize,
    /// qk_rope_head_dim.
    pub qk_rope_head_dim: usize,
    /// v_head_dim.
    pub v_head_dim: usize,
    /// The indexer.
    pub indexer: MlaIndexer,
    /// Per layer, whether it runs its own indexer or reuses the top-k of the last layer
    /// that does (GLM-5.2's `indexer_types`); every layer is `Full` unless the config
    /// says otherwise.
    pub indexer_types: Vec<IndexerType>,
    /// The routed experts, when the model has them.
    pub moe: Option<MlaMoe>,
    /// The RoPE.
    pub rope: MlaRope,
    /// `mscale_all_dim` and `factor` of the scaling block, which scale the attention
    /// (read whatever the RoPE type, as mlx-lm reads them).
    pub attention_mscale: Option<(f64, f64)>,
    /// rms_norm_eps.
    pub rms_norm_eps: f64,
    /// max_position_embeddings.
    pub max_position_embeddings: usize,
    /// bos_token_id.
    pub bos_token_id: Option<u32>,
    /// eos_token_id, as a list.
    pub eos_token_ids: Vec<u32>,
    /// The weight quantization map, when the checkpoint is quantized.
    pub quantization: Option<QuantizationMap>,
}

impl MlaConfig {
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

    /// `q_head_dim`: nope plus rope.
    pub fn q_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// The attention scale: `q_head_dim ** -0.5`, times `s * s` with `s = 0.1 ·
    /// mscale_all_dim · ln(factor) + 1` when the scaling block gives a nonzero
    /// `mscale_all_dim` and a factor above 1 (f64, in mlx-lm's order).
    pub fn attention_scale(&self) -> f64 {
        let scale = (self.q_head_dim() as f64).powf(-0.5);
        match self.attention_mscale {
            Some((m, factor)) if m != 0.0 && factor > 1.0 => {
                let s = 0.1 * m * factor.ln() + 1.0;
                scale * s * s
            }
            _ => scale,
        }
    }

    /// Validates a parsed config.json.
    pub fn from_value(file: &str, value: &Value) -> Result<Self> {
        let c = Obj::new(file, "", value)?;
        let kind = match c.str("model_type")? {
            "deepseek_v32" => MlaKind::DeepseekV32,
            "glm_moe_dsa" => MlaKind::GlmMoeDsa,
            other => {
                return Err(c.err(
                    "model_type",
                    format!("expected deepseek_v32 or glm_moe_dsa, found {other:?}"),
                ));
            }
        };
        let glm = kind == MlaKind::GlmMoeDsa;
        // glm_moe_dsa.py's dataclass has no defaults for these; deepseek_v32.py's has.
        let size = |key: &str, default: usize| -> Result<usize> {
            match (c.opt_usize(key)?, glm) {
                (Some(v), _) => Ok(v),
                (None, false) => Ok(default),
                (None, true) => Err(c.err(key, "missing; expected an integer")),
            }
        };
        let positive = |key: &str, default: usize| -> Result<usize> {
            let v = size(key, default)?;
            if v == 0 {
                return Err(c.err(key, "must be positive, found 0"));
            }
            Ok(v)
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            match (c.opt_bool(key)?, glm) {
                (Some(v), _) => Ok(v),
                (None, false) => Ok(default),
                (None, true) => Err(c.err(key, "missing; expected true or false")),
            }
        };
        let number = |key: &str, default: f64| -> Result<f64> {
            match (c.opt_f64(key)?, glm) {
                (Some(v), _) => Ok(v),
                (None, false) => Ok(default),
                (None, true) => Err(c.err(key, "missing; expected a number")),
            }
        };
        let text = |key: &str, default: &'static str| -> Result<String> {
            match (c.opt_str(key)?, glm) {
                (Some(v), _) => Ok(v.to_owned()),
                (None, false) => Ok(default.to_owned()),
                (None, true) => Err(c.err(key, "missing; expected a string")),
            }
        };

        let num_hidden_layers = if glm || c.get("num_hidden_layers").is_some() {
            read_num_layers(&c)?
        } else {
            30
        };
        let vocab_size = positive("vocab_size", 102400)?;
        let hidden_size = positive("hidden_size", 4096)?;
        let intermediate_size = positive("intermediate_size", 11008)?;
        let moe_intermediate_size = positive("moe_intermediate_size", 1407)?;
        let num_attention_heads = positive("num_attention_heads", 32)?;
        let num_key_value_heads = positive("num_key_value_heads", 32)?;
        // deepseek_v32.py always compresses the query (the indexer reads the compressed
        // form): a config without it (DeepSeek-V2-Lite's `null`) builds no model there.
        if c.get("q_lora_rank").is_some_and(Value::is_null) {
            return Err(c.err(
                "q_lora_rank",
                "is null, but deepseek_v32/glm_moe_dsa always compress the query (the \
                 indexer reads it); expected an integer",
            ));
        }
        let q_lora_rank = positive("q_lora_rank", 1536)?;
        let kv_lora_rank = positive("kv_lora_rank", 512)?;
        let qk_nope_head_dim = positive("qk_nope_head_dim", 128)?;
        let qk_rope_head_dim = positive("qk_rope_head_dim", 64)?;
        let v_head_dim = positive("v_head_dim", 128)?;
        if !qk_rope_head_dim.is_multiple_of(2) {
            return Err(c.err(
                "qk_rope_head_dim",
                format!("must be even, found {qk_rope_head_dim}"),
            ));
        }
        let index_head_dim = positive("index_head_dim", 128)?;
        let indexer = MlaIndexer {
            n_heads: positive("index_n_heads", 64)?,
            head_dim: index_head_dim,
            topk: positive("index_topk", 2048)?,
            rope_interleave: c.opt_bool("indexer_rope_interleave")?.unwrap_or(glm),
        };
        if qk_rope_head_dim > index_head_dim {
            return Err(c.err(
                "index_head_dim",
                format!(
                    "the indexer rotates the first qk_rope_head_dim ({qk_rope_head_dim}) of \
                     its dims, so it must be at least that, found {index_head_dim}"
                ),
            ));
        }
        let indexer_types = read_indexer_types(&c, kind, num_hidden_layers)?;

        let topk_method = text("topk_method", "noaux_tc")?;
        if topk_method != "noaux_tc" {
            return Err(c.err(
                "topk_method",
                format!(
                    "only \"noaux_tc\" routing is supported (as in mlx-lm), found {topk_method:?}"
                ),
            ));
        }
        let scoring = text("scoring_func", "sigmoid")?;
        if scoring != "sigmoid" {
            return Err(c.err(
                "scoring_func",
                format!(
                    "mlx-lm scores experts with a sigmoid whatever this says; expected \
                     \"sigmoid\", found {scoring:?}"
                ),
            ));
        }
        let n_routed_experts = match c.get("n_routed_experts") {
            None if glm => {
                return Err(c.err("n_routed_experts", "missing; expected an integer or null"));
            }
            None | Some(Value::Null) => None,
            Some(_) => Some(c.positive("n_routed_experts")?),
        };
        let n_shared_experts = match c.get("n_shared_experts") {
            None if glm => {
                return Err(c.err("n_shared_experts", "missing; expected an integer or null"));
            }
            None | Some(Value::Null) => None,
            Some(_) => Some(c.positive("n_shared_experts")?),
        };
        let num_experts_per_tok = positive("num_experts_per_tok", 1)?;
        let n_group = positive("n_group", 1)?;
        let topk_group = positive("topk_group", 1)?;
        let norm_topk_prob = flag("norm_topk_prob", true)?;
        let routed_scaling_factor = number("routed_scaling_factor", 1.0)?;
        if !routed_scaling_factor.is_finite() {
            return Err(c.err("routed_scaling_factor", "must be finite"));
        }
        let moe_layer_freq = positive("moe_layer_freq", 1)?;
        let first_k_dense_replace = size("first_k_dense_replace", 0)?;
        let moe = match n_routed_experts {
            None => None,
            Some(e) => {
                if num_experts_per_tok > e {
                    return Err(c.err(
                        "num_experts_per_tok",
                        format!(
                            "must be at most n_routed_experts ({e}), found {num_experts_per_tok}"
                        ),
                    ));
                }
                if !e.is_multiple_of(n_group) {
                    return Err(c.err(
                        "n_group",
                        format!("must divide n_routed_experts ({e}), found {n_group}"),
                    ));
                }
                if n_group > 1 && (topk_group > n_group || e / n_group < 2) {
                    return Err(c.err(
                        "topk_group",
                        format!(
                            "must be at most n_group ({n_group}), with at least 2 experts a \
                             group (found topk_group {topk_group}, {} experts a group)",
                            e / n_group
                        ),
                    ));
                }
                if n_group > 1 && num_experts_per_tok > topk_group * (e / n_group) {
                    return Err(c.err(
                        "num_experts_per_tok",
                        format!(
                            "must be at most the experts of the kept groups ({}), found \
                             {num_experts_per_tok}",
                            topk_group * (e / n_group)
                        ),
                    ));
                }
                Some(MlaMoe {
                    n_routed_experts: e,
                    n_shared_experts,
                    num_experts_per_tok,
                    moe_intermediate_size,
                    n_group,
                    topk_group,
                    norm_topk_prob,
                    routed_scaling_factor,
                    first_k_dense_replace,
                    moe_layer_freq,
                })
            }
        };

        if let Some(types) = c.get_non_null("mlp_layer_types") {
            // transformers reads this list, mlx-lm `first_k_dense_replace` and
            // `moe_layer_freq`: both must describe the same layers.
            let derived: Vec<&str> = (0..num_hidden_layers)
                .map(|i| match moe {
                    Some(m) if m.routes(i) => "sparse",
                    _ => "dense",
                })
                .collect();
            let given: Vec<Option<&str>> = c
                .array("mlp_layer_types")?
                .iter()
                .map(Value::as_str)
                .collect();
            let differs = given.iter().zip(&derived).position(|(g, d)| *g != Some(*d));
            if given.len() != derived.len() || differs.is_some() {
                let at = match differs {
                    Some(i) => format!("layer {i} is {}", types[i]),
                    None => format!("it has {} entries", given.len()),
                };
                return Err(c.err(
                    "mlp_layer_types",
                    format!(
                        "disagrees with first_k_dense_replace and moe_layer_freq (which mlx-lm \
                         reads): expected {} entries, \"dense\" where a layer is dense and \
                         \"sparse\" where it routes, but {at}",
                        derived.len()
                    ),
                ));
            }
        }
        let max_position_embeddings = positive("max_position_embeddings", 2048)?;
        let rms_norm_eps = number("rms_norm_eps", 1e-6)?;
        if !(rms_norm_eps.is_finite() && rms_norm_eps > 0.0) {
            return Err(c.err("rms_norm_eps", format!("must be > 0, found {rms_norm_eps}")));
        }
        if flag("attention_bias", false)? {
            return Err(c.err(
                "attention_bias",
                "biased attention projections are not supported; expected false",
            ));
        }
        if c.opt_bool("tie_word_embeddings")? == Some(true) {
            return Err(c.err(
                "tie_word_embeddings",
                "mlx-lm's deepseek_v32 always has its own lm_head; expected false",
            ));
        }
        if let Some(act) = c.opt_str("hidden_act")?
            && act != "silu"
        {
            return Err(c.err("hidden_act", format!("expected \"silu\", found {act:?}")));
        }
        if c.opt_bool("rope_interleave")? == Some(false) {
            return Err(c.err(
                "rope_interleave",
                "mlx-lm rotates attention's RoPE in adjacent pairs whatever this says; \
                 expected true",
            ));
        }
        let (rope, attention_mscale) = read_rope(&c, kind)?;

        let (bos_token_id, eos_token_ids) = crate::config::read_special_tokens(&c)?;
        let quantization = crate::config::read_quantization(file, &c)?;
        // Every weight dimension fits MLX's i32 shapes.
        check_dim(&c, "hidden_size", "hidden_size", &[hidden_size])?;
        check_dim(&c, "vocab_size", "vocab_size", &[vocab_size])?;
        check_dim(
            &c,
            "intermediate_size",
            "intermediate_size",
            &[intermediate_size],
        )?;
        check_dim(
            &c,
            "num_attention_heads",
            "num_attention_heads × (qk_nope_head_dim + qk_rope_head_dim)",
            &[num_attention_heads, qk_nope_head_dim + qk_rope_head_dim],
        )?;
        check_dim(
            &c,
            "num_attention_heads",
            "num_attention_heads × v_head_dim",
            &[num_attention_heads, v_head_dim],
        )?;
        check_dim(
            &c,
            "index_n_heads",
            "index_n_heads × index_head_dim",
            &[indexer.n_heads, index_head_dim],
        )?;
        if let Some(m) = &moe {
            check_dim(
                &c,
                "n_routed_experts",
                "n_routed_experts × moe_intermediate_size × hidden_size",
                &[m.n_routed_experts, m.moe_intermediate_size],
            )?;
        }
        Ok(MlaConfig {
            source: file.to_owned(),
            kind,
            vocab_size,
            hidden_size,
            num_hidden_layers,
            intermediate_size,
            num_attention_heads,
            num_key_value_heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            indexer,
            indexer_types,
            moe,
            rope,
            attention_mscale,
            rms_norm_eps,
            max_position_embeddings,
            bos_token_id,
            eos_token_ids,
            quantization,
        })
    }

    /// The config as mlx-lm reads it (every key this engine uses spelled out, in the
    /// model type's own spelling). `quantization` is written separately.
    pub fn to_json(&self) -> Value {
        let theta = self.rope.theta();
        let mut scaling = match self.rope {
            MlaRope::Default { .. } => json!({"rope_type": "default"}),
            MlaRope::Linear { factor, .. } => json!({"rope_type": "linear", "factor": factor}),
            MlaRope::Yarn { scaling, .. } => scaling.to_json("type"),
        };
        if let (Some((m, factor)), false) = (
            self.attention_mscale,
            matches!(self.rope, MlaRope::Yarn { .. }),
        ) {
            scaling["mscale_all_dim"] = json!(m);
            scaling["factor"] = json!(factor);
        }
        let moe = self.moe;
        let mut out = json!({
            "model_type": self.kind.model_type(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "intermediate_size": self.intermediate_size,
            "moe_intermediate_size": moe.map_or(self.intermediate_size, |m| m.moe_intermediate_size),
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "q_lora_rank": self.q_lora_rank,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "v_head_dim": self.v_head_dim,
            "index_n_heads": self.indexer.n_heads,
            "index_head_dim": self.indexer.head_dim,
            "index_topk": self.indexer.topk,
            "indexer_rope_interleave": self.indexer.rope_interleave,
            "n_routed_experts": moe.map(|m| m.n_routed_experts),
            "n_shared_experts": moe.and_then(|m| m.n_shared_experts),
            "num_experts_per_tok": moe.map_or(1, |m| m.num_experts_per_tok),
            "n_group": moe.map_or(1, |m| m.n_group),
            "topk_group": moe.map_or(1, |m| m.topk_group),
            "norm_topk_prob": moe.is_none_or(|m| m.norm_topk_prob),
            "routed_scaling_factor": moe.map_or(1.0, |m| m.routed_scaling_factor),
            "first_k_dense_replace": moe.map_or(0, |m| m.first_k_dense_replace),
            "moe_layer_freq": moe.map_or(1, |m| m.moe_layer_freq),
            "topk_method": "noaux_tc",
            "scoring_func": "sigmoid",
            "attention_bias": false,
            "hidden_act": "silu",
            "tie_word_embeddings": false,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_ids,
        });
        let o = out.as_object_mut().expect("an object");
        if self.indexer_types.contains(&IndexerType::Shared) {
            let types: Vec<&str> = self.indexer_types.iter().map(|t| t.as_str()).collect();
            o.insert("indexer_types".into(), json!(types));
        }
        match self.kind {
            MlaKind::GlmMoeDsa => {
                scaling["rope_theta"] = json!(theta);
                o.insert("rope_parameters".into(), scaling);
            }
            MlaKind::DeepseekV32 => {
                o.insert("rope_theta".into(), json!(theta));
                let plain =
                    matches!(self.rope, MlaRope::Default { .. }) && self.attention_mscale.is_none();
                o.insert(
                    "rope_scaling".into(),
                    if plain { Value::Null } else { scaling },
                );
            }
        }
        out
    }
}

/// Each layer's indexer type as transformers 5.17 derives it for `glm_moe_dsa`: an
/// explicit `indexer_types` list, else `index_topk_pattern` (a string of `F`/`S` or a
/// list), else `index_topk_freq` (default 1) and `index_skip_topk_offset` (default 2): a
/// layer is full when `max(i - offset + 1, 0)` is a multiple of the frequency. Without any
/// of them every layer is full (mlx-lm's model, which knows none of these keys). The first
/// layer must be full (a shared layer reuses an earlier one's choice). `deepseek_v32`
/// has no such layout: the keys are refused there.
fn read_indexer_types(c: &Obj<'_>, kind: MlaKind, layers: usize) -> Result<Vec<IndexerType>> {
    const KEYS: [&str; 4] = [
        "indexer_types",
        "index_topk_pattern",
        "index_topk_freq",
        "index_skip_topk_offset",
    ];
    if kind == MlaKind::DeepseekV32 {
        if let Some(key) = KEYS.iter().find(|k| c.get_non_null(k).is_some()) {
            return Err(c.err(
                key,
                "deepseek_v32 has no shared-indexer layout (every layer runs its indexer); \
                 remove it, or use model_type glm_moe_dsa",
            ));
        }
        return Ok(vec![IndexerType::Full; layers]);
    }
    let parse = |key: &str, items: &[Value]| -> Result<Vec<IndexerType>> {
        items
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_str() {
                Some("full") => Ok(IndexerType::Full),
                Some("shared") => Ok(IndexerType::Shared),
                _ => Err(c.err(
                    &format!("{key}[{i}]"),
                    format!("expected \"full\" or \"shared\", found {v}"),
                )),
            })
            .collect()
    };
    let (key, types) = if c.get_non_null("indexer_types").is_some() {
        (
            "indexer_types",
            parse("indexer_types", c.array("indexer_types")?)?,
        )
    } else if let Some(p) = c.get_non_null("index_topk_pattern") {
        let types = match p {
            Value::String(text) => text
                .chars()
                .enumerate()
                .map(|(i, ch)| match ch {
                    'F' => Ok(IndexerType::Full),
                    'S' => Ok(IndexerType::Shared),
                    other => Err(c.err(
                        "index_topk_pattern",
                        format!("character {i} is {other:?}; expected F (full) or S (shared)"),
                    )),
                })
                .collect::<Result<Vec<_>>>()?,
            _ => parse("index_topk_pattern", c.array("index_topk_pattern")?)?,
        };
        ("index_topk_pattern", types)
    } else {
        let freq = match c.get_non_null("index_topk_freq") {
            Some(v) => match v.as_i64() {
                Some(f) => f.max(1) as usize,
                None => {
                    return Err(c.err("index_topk_freq", format!("expected an integer, found {v}")));
                }
            },
            None => 1,
        };
        let offset = match c.get_non_null("index_skip_topk_offset") {
            Some(v) => v.as_i64().ok_or_else(|| {
                c.err(
                    "index_skip_topk_offset",
                    format!("expected an integer, found {v}"),
                )
            })?,
            None => 2,
        };
        let types = (0..layers as i64)
            .map(|i| {
                if (i - offset + 1).max(0) % freq as i64 == 0 {
                    IndexerType::Full
                } else {
                    IndexerType::Shared
                }
            })
            .collect();
        ("index_topk_freq", types)
    };
    if types.len() != layers {
        return Err(c.err(
            key,
            format!(
                "gives {} layers, but num_hidden_layers is {layers}",
                types.len()
            ),
        ));
    }
    if types.first() == Some(&IndexerType::Shared) {
        return Err(c.err(
            key,
            "layer 0 is shared, but a shared layer reuses the top-k of an earlier full layer",
        ));
    }
    Ok(types)
}

/// The RoPE and the attention's mscale inputs: GLM reads `rope_parameters` (required,
/// with `rope_theta` inside; it replaces any `rope_scaling`), DeepSeek `rope_theta`
/// (default 10000) and `rope_scaling`.
fn read_rope(c: &Obj<'_>, kind: MlaKind) -> Result<(MlaRope, Option<(f64, f64)>)> {
    let (theta, scaling) = match kind {
        MlaKind::GlmMoeDsa => {
            let p = c.child("rope_parameters", "an object")?;
            (positive_f64(&p, "rope_theta", None)?, Some(p))
        }
        MlaKind::DeepseekV32 => {
            let theta = positive_f64(c, "rope_theta", Some(10000.0))?;
            let s = match c.get_non_null("rope_scaling") {
                Some(_) => Some(c.child("rope_scaling", "an object")?),
                None => None,
            };
            (theta, s)
        }
    };
    let Some(s) = scaling else {
        return Ok((MlaRope::Default { theta }, None));
    };
    let mscale_all_dim = s.opt_f64("mscale_all_dim")?;
    let factor = s.opt_f64("factor")?;
    let attention_mscale = match (mscale_all_dim, factor) {
        (Some(m), Some(f)) if m != 0.0 => Some((m, f)),
        (Some(m), None) if m != 0.0 => {
            return Err(s.err("factor", "missing beside mscale_all_dim; expected a number"));
        }
        _ => None,
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
    let rope = match rope_type {
        "default" => MlaRope::Default { theta },
        "linear" => MlaRope::Linear {
            theta,
            factor: positive_f64(&s, "factor", None)?,
        },
        "yarn" | "deepseek_yarn" => {
            let scaling = YarnScaling::read(&s)?;
            if scaling.input_scale() != 1.0 {
                return Err(s.err(
                    "mscale",
                    format!(
                        "YaRN with an input scale (mscale {} against mscale_all_dim {}) is not \
                         supported; expected them equal",
                        scaling.mscale, scaling.mscale_all_dim
                    ),
                ));
            }
            MlaRope::Yarn { theta, scaling }
        }
        other => {
            return Err(s.err(
                type_key,
                format!("expected \"default\", \"linear\" or \"yarn\", found {other:?}"),
            ));
        }
    };
    Ok((rope, attention_mscale))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GLM5: &str = include_str!("../../../../generated/models/glm-5/config.json");
    const DSV32: &str = include_str!("../../../../generated/models/deepseek-v3.2/config.json");

    fn with(base: &str, edit: impl FnOnce(&mut Value)) -> String {
        let mut v: Value = serde_json::from_str(base).unwrap();
        edit(&mut v);
        v.to_string()
    }

    fn err(text: &str) -> String {
        MlaConfig::from_json_str("c.json", text)
            .expect_err("must fail")
            .to_string()
    }

    #[test]
    fn the_presets_read_as_published() {
        let g = MlaConfig::from_json_str("g", GLM5).unwrap();
        assert_eq!(g.kind, MlaKind::GlmMoeDsa);
        assert_eq!(
            (
                g.num_hidden_layers,
                g.hidden_size,
                g.num_attention_heads,
                g.vocab_size
            ),
            (78, 6144, 64, 154880)
        );
        assert_eq!(
            (
                g.q_lora_rank,
                g.kv_lora_rank,
                g.qk_nope_head_dim,
                g.qk_rope_head_dim,
                g.v_head_dim
            ),
            (2048, 512, 192, 64, 256)
        );
        assert_eq!(
            g.indexer,
            MlaIndexer {
                n_heads: 32,
                head_dim: 128,
                topk: 2048,
                rope_interleave: true
            }
        );
        let m = g.moe.unwrap();
        assert_eq!(
            (
                m.n_routed_experts,
                m.n_shared_experts,
                m.num_experts_per_tok,
                m.n_group,
                m.topk_group
            ),
            (256, Some(1), 8, 1, 1)
        );
        assert_eq!(
            (
                m.first_k_dense_replace,
                m.moe_layer_freq,
                m.routed_scaling_factor
            ),
            (3, 1, 2.5)
        );
        assert_eq!(g.rope, MlaRope::Default { theta: 1e6 });
        // (192 + 64) ** -0.5, no mscale.
        assert_eq!(g.attention_scale(), 0.0625);
        assert_eq!(g.eos_token_ids, vec![154820, 154827, 154829]);

        let d = MlaConfig::from_json_str("d", DSV32).unwrap();
        assert_eq!(d.kind, MlaKind::DeepseekV32);
        assert_eq!(
            (d.num_hidden_layers, d.hidden_size, d.num_attention_heads),
            (61, 7168, 128)
        );
        assert!(
            !d.indexer.rope_interleave,
            "deepseek_v32.py defaults it to False"
        );
        let m = d.moe.unwrap();
        assert_eq!((m.n_group, m.topk_group, m.num_experts_per_tok), (8, 4, 8));
        match d.rope {
            MlaRope::Yarn { theta, scaling } => {
                assert_eq!(theta, 10000.0);
                assert_eq!(scaling.factor, 40.0);
                assert_eq!(scaling.original_max_position_embeddings, 4096.0);
                assert_eq!(scaling.input_scale(), 1.0);
            }
            other => panic!("{other:?}"),
        }
        let s = 0.1 * 40f64.ln() + 1.0;
        assert_eq!(d.attention_scale(), 192f64.powf(-0.5) * s * s);
        assert_eq!(
            (d.bos_token_id, d.eos_token_ids.as_slice()),
            (Some(0), &[1u32][..])
        );
    }

    #[test]
    fn the_written_form_reads_back_the_same() {
        for text in [GLM5, DSV32] {
            let c = MlaConfig::from_json_str("c", text).unwrap();
            let again = MlaConfig::from_value("c", &c.to_json()).unwrap();
            assert_eq!(
                again,
                MlaConfig {
                    source: "c".into(),
                    ..c
                }
            );
        }
    }

    #[test]
    fn what_mlx_lm_would_compute_otherwise_is_refused_by_key() {
        let cases: Vec<(String, &str)> = vec![
            (
                // Two entries for 78 layers.
                with(GLM5, |v| {
                    v["indexer_types"] = serde_json::json!(["full", "shared"])
                }),
                "indexer_types",
            ),
            (
                with(GLM5, |v| {
                    v["indexer_types"] = serde_json::json!(vec!["shared"; 78]);
                }),
                "indexer_types",
            ),
            (
                with(GLM5, |v| v["index_topk_pattern"] = serde_json::json!("FSX")),
                "index_topk_pattern",
            ),
            (
                with(DSV32, |v| v["index_topk_freq"] = serde_json::json!(4)),
                "index_topk_freq",
            ),
            (
                with(GLM5, |v| {
                    v["mlp_layer_types"] = serde_json::json!(vec!["dense"; 78]);
                }),
                "mlp_layer_types",
            ),
            (
                with(GLM5, |v| v["scoring_func"] = serde_json::json!("softmax")),
                "scoring_func",
            ),
            (
                with(GLM5, |v| v["topk_method"] = serde_json::json!("greedy")),
                "topk_method",
            ),
            (
                with(DSV32, |v| v["q_lora_rank"] = Value::Null),
                "q_lora_rank",
            ),
            (
                with(GLM5, |v| v["attention_bias"] = serde_json::json!(true)),
                "attention_bias",
            ),
            (
                with(GLM5, |v| v["tie_word_embeddings"] = serde_json::json!(true)),
                "tie_word_embeddings",
            ),
            (
                with(GLM5, |v| v["rope_interleave"] = serde_json::json!(false)),
                "rope_interleave",
            ),
            (
                with(GLM5, |v| v["hidden_act"] = serde_json::json!("gelu")),
                "hidden_act",
            ),
            (
                with(GLM5, |v| {
                    v.as_object_mut().unwrap().remove("rope_parameters");
                }),
                "rope_parameters",
            ),
            (
                with(GLM5, |v| {
                    v.as_object_mut().unwrap().remove("index_topk");
                }),
                "index_topk",
            ),
            (
                with(DSV32, |v| {
                    v["rope_scaling"]["mscale"] = serde_json::json!(0.707)
                }),
                "mscale",
            ),
            (
                with(DSV32, |v| {
                    v["rope_scaling"]["type"] = serde_json::json!("dynamic")
                }),
                "type",
            ),
            (
                with(DSV32, |v| v["n_group"] = serde_json::json!(3)),
                "n_group",
            ),
            (
                with(DSV32, |v| v["num_experts_per_tok"] = serde_json::json!(300)),
                "num_experts_per_tok",
            ),
            (
                with(DSV32, |v| v["qk_rope_head_dim"] = serde_json::json!(63)),
                "qk_rope_head_dim",
            ),
            (
                with(DSV32, |v| v["index_head_dim"] = serde_json::json!(32)),
                "index_head_dim",
            ),
            (
                with(GLM5, |v| v["model_type"] = serde_json::json!("deepseek_v3")),
                "model_type",
            ),
        ];
        for (text, key) in cases {
            let e = err(&text);
            assert!(e.contains("c.json") && e.contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn glm_5_2_shares_the_indexer_as_published() {
        let text = include_str!("../../../../generated/models/glm-5.2/config.json");
        let c = MlaConfig::from_json_str("g52", text).unwrap();
        let full: Vec<usize> = (0..78)
            .filter(|&i| c.indexer_types[i] == IndexerType::Full)
            .collect();
        let mut expected = vec![0, 1, 2];
        expected.extend((6..78).step_by(4));
        assert_eq!(full, expected);
        assert_eq!(full.len(), 21);
        // The published list is what its freq 4 / offset 3 derive.
        let mut v: Value = serde_json::from_str(text).unwrap();
        v.as_object_mut().unwrap().remove("indexer_types");
        let derived = MlaConfig::from_value("g52", &v).unwrap();
        assert_eq!(derived.indexer_types, c.indexer_types);
        // A pattern string, and the written form, read back the same.
        let pattern: String = c
            .indexer_types
            .iter()
            .map(|t| if *t == IndexerType::Full { 'F' } else { 'S' })
            .collect();
        v["index_topk_pattern"] = serde_json::json!(pattern);
        v["index_topk_freq"] = serde_json::json!(1);
        assert_eq!(
            MlaConfig::from_value("p", &v).unwrap().indexer_types,
            c.indexer_types
        );
        let again = MlaConfig::from_value("g52", &c.to_json()).unwrap();
        assert_eq!(again, c);
        // GLM-5 (no keys) runs an indexer in every layer.
        let g5 = MlaConfig::from_json_str("g", GLM5).unwrap();
        assert!(g5.indexer_types.iter().all(|t| *t == IndexerType::Full));
    }

    #[test]
    fn deepseek_defaults_fill_in_as_mlx_lm_fills_them() {
        let c = MlaConfig::from_json_str("m", r#"{"model_type": "deepseek_v32"}"#).unwrap();
        assert_eq!(
            (
                c.vocab_size,
                c.hidden_size,
                c.num_hidden_layers,
                c.q_lora_rank,
                c.kv_lora_rank
            ),
            (102400, 4096, 30, 1536, 512)
        );
        assert_eq!((c.indexer.n_heads, c.indexer.topk), (64, 2048));
        assert!(
            c.moe.is_none(),
            "n_routed_experts defaults to None: every layer dense"
        );
        assert_eq!(c.rope, MlaRope::Default { theta: 10000.0 });
        assert_eq!(c.max_position_embeddings, 2048);
    }
}
