//! `mlx-aot synth`: a synthetic model folder (config.json, kv_config.json, seeded random
//! weights in mlx-community naming and quantization, a small tokenizer) that this binary
//! and mlx-lm both load.
//!
//! The output folder is created when absent. An existing folder is written into only
//! when everything in it is something synth writes (a previous synth folder, or an empty
//! folder); every file is written through a temporary file and renamed into place, and a
//! kv_config.json left from an earlier synth that this one would not write is removed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use runtime::family::WeightFacts;
use runtime::kv_layout::KvLayout;
use runtime::mlx_rs::Dtype;
use runtime::model::AnyConfig;
use runtime::quantization::QuantSpec;
use runtime::synth::{SynthOptions, write_atomic};
use serde_json::{Value, json};

use crate::presets::Preset;

/// The files synth writes; an existing `--out` may hold only these (and hidden partial
/// files of an interrupted synth).
pub const SYNTH_FILES: [&str; 5] = [
    "config.json",
    "kv_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// The weights' float type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DtypeArg {
    /// bfloat16 (what mlx-community ships).
    Bf16,
    /// float32 (MLX's CPU `gather_mm`, used by MoE experts, takes only float32).
    F32,
}

/// `mlx-aot synth`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["preset", "config"])))]
pub struct Args {
    /// A preset: a folder of generated/models (gemma4-e4b, llama-3.2-1b, qwen3-0.6b,
    /// minicpm4-8b, glm-5, glm-5.2, deepseek-v3.2, ...).
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// A config.json to synthesize instead of a preset.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The kv_config.json to go with --config.
    #[arg(long, value_name = "FILE", requires = "config")]
    kv_config: Option<PathBuf>,
    /// Shrink the dimensions, keeping the plan (and so the fingerprint).
    #[arg(long)]
    twin: bool,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0, value_name = "N")]
    seed: u64,
    /// Quantize the weights to this many bits (the MoE router at 8).
    #[arg(long, value_name = "B")]
    bits: Option<u32>,
    /// Group size of the weight quantization.
    #[arg(long, value_name = "G", requires = "bits")]
    group: Option<u32>,
    /// Float type of the weights. Default: bf16, or f32 for MoE models (MLX's CPU
    /// gather_mm takes only float32).
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
    /// The folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn main(a: Args) -> Result<()> {
    let (mut config, layout) = match (&a.preset, &a.config) {
        (Some(name), _) => {
            let p = Preset::find(name)?;
            (p.config()?, p.kv_layout()?)
        }
        (None, Some(path)) => {
            if !path.is_file() {
                bail!("--config {}: no such file", path.display());
            }
            let config = AnyConfig::from_file(path)?;
            let layout = match &a.kv_config {
                Some(k) => {
                    if !k.is_file() {
                        bail!("--kv-config {}: no such file", k.display());
                    }
                    KvLayout::from_file(k)?
                }
                None => KvLayout::float(),
            };
            (config, layout)
        }
        (None, None) => bail!("give --preset NAME or --config FILE"),
    };
    if a.twin {
        config = config.twin();
    }
    // The weights are quantized as --bits says, whatever the source config said.
    let config = config.with_quantization(None);
    let quant = match a.bits {
        Some(bits) => Some(
            QuantSpec {
                bits,
                group_size: a.group.unwrap_or(64),
            }
            .validate()
            .map_err(|m| anyhow!("--bits/--group: {m}"))?,
        ),
        None => None,
    };
    // The kv layout must fit the (possibly shrunk) model before anything is written.
    config.resolve(&layout, WeightFacts::AsShipped)?;
    let dtype = match a.dtype {
        Some(DtypeArg::Bf16) => Dtype::Bfloat16,
        Some(DtypeArg::F32) => Dtype::Float32,
        // Float experts run through gather_mm, which MLX's CPU backend has only in f32.
        None if config.has_moe() && quant.is_none() => Dtype::Float32,
        None => Dtype::Bfloat16,
    };

    prepare_out(&a.out)?;
    let opts = SynthOptions {
        seed: a.seed,
        quant,
    };
    let (tensors, qmap) = config.random_tensors(opts, dtype)?;
    config.write_folder(&a.out, &tensors, qmap.as_ref())?;
    let kv_path = a.out.join("kv_config.json");
    if layout.is_float() {
        if kv_path.exists() {
            std::fs::remove_file(&kv_path).with_context(|| format!("{}", kv_path.display()))?;
        }
    } else {
        write_atomic(&kv_path, layout.to_json().as_bytes())?;
    }
    let vocab = config.vocab_size();
    let tokenizer = serde_json::to_string_pretty(&tokenizer_json(vocab)?)? + "\n";
    write_atomic(&a.out.join("tokenizer.json"), tokenizer.as_bytes())?;
    let tconfig = serde_json::to_string_pretty(&tokenizer_config_json())? + "\n";
    write_atomic(&a.out.join("tokenizer_config.json"), tconfig.as_bytes())?;

    let weight_bytes: usize = tensors.values().map(|t| t.nbytes()).sum();
    crate::emit(&format!(
        "wrote {}: {} layers, hidden {}, vocab {vocab}, weights {} {}{}, kv {}\n",
        a.out.display(),
        config.num_hidden_layers(),
        config.hidden_size(),
        match quant {
            Some(q) => format!("{q} ({} scales)", dtype_name(dtype)),
            None => dtype_name(dtype).to_owned(),
        },
        crate::figures::bytes(weight_bytes as u64),
        if a.twin { ", twin" } else { "" },
        if layout.is_float() {
            "float".to_owned()
        } else {
            format!("{} quantized caches", layout.entries().count())
        },
    ))
}

fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Float32 => "f32",
        _ => "bf16",
    }
}

/// Creates `out`, or checks that an existing one holds only what synth writes.
/// The preset of the embedded default model.
pub const DEFAULT_PRESET: &str = "gemma4-e4b";

/// The embedded default model: the shrunk twin of the gemma4-e4b preset with seeded
/// 4-bit weights, synthesized once into the user's cache folder (`$XDG_CACHE_HOME` or
/// `~/.cache`, else the temp folder) and reused. What `run` and `logits` use without
/// `--model`, so the binary does something real on a fresh machine.
pub fn default_model() -> Result<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let dir = cache.join("mlx-aot").join(format!(
        "{DEFAULT_PRESET}-twin-q4-v{}",
        env!("CARGO_PKG_VERSION")
    ));
    if !dir.join("model.safetensors").is_file() {
        eprintln!(
            "no --model: synthesizing the default model ({DEFAULT_PRESET} twin, 4-bit) into {}",
            dir.display()
        );
        main(Args {
            preset: Some(DEFAULT_PRESET.to_owned()),
            config: None,
            kv_config: None,
            twin: true,
            seed: 0,
            bits: Some(4),
            group: None,
            dtype: None,
            out: dir.clone(),
        })?;
    }
    Ok(dir)
}

fn prepare_out(out: &Path) -> Result<()> {
    if out.exists() {
        if !out.is_dir() {
            bail!("--out {} exists and is not a folder", out.display());
        }
        let mut foreign = Vec::new();
        for entry in std::fs::read_dir(out).with_context(|| format!("{}", out.display()))? {
            let entry = entry.with_context(|| format!("{}", out.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = SYNTH_FILES.contains(&name.as_str()) || is_partial(&name);
            if !ours || !entry.path().is_file() {
                foreign.push(name);
            }
        }
        if !foreign.is_empty() {
            foreign.sort();
            let shown: Vec<&str> = foreign.iter().take(3).map(String::as_str).collect();
            bail!(
                "refusing to write into {}: it holds files synth does not write ({}{}); \
                 give an empty or new folder, or a previous synth folder",
                out.display(),
                shown.join(", "),
                if foreign.len() > 3 { ", ..." } else { "" }
            );
        }
        Ok(())
    } else {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))
    }
}

/// A temporary file of an interrupted synth (`runtime::synth`'s names).
fn is_partial(name: &str) -> bool {
    name == ".partial-model.safetensors"
        || (name.starts_with('.')
            && name.ends_with(".partial")
            && SYNTH_FILES.contains(&&name[1..name.len() - ".partial".len()]))
}

/// Special tokens of the synthetic vocabulary, Gemma's ids where the vocabulary is large
/// enough (0 pad, 1 eos, 2 bos, 3 unk, 105/106 turn markers).
fn specials(vocab: usize) -> Vec<(u32, &'static str)> {
    let turn = if vocab > 106 {
        105
    } else {
        vocab.saturating_sub(2) as u32
    };
    vec![
        (0, "<pad>"),
        (1, "<eos>"),
        (2, "<bos>"),
        (3, "<unk>"),
        (turn, "<start_of_turn>"),
        (turn + 1, "<end_of_turn>"),
    ]
}

/// A WordLevel tokenizer over `vocab` ids: the special tokens, every other id `i` the
/// word `t<i>`; whitespace pre-tokenizer; `<bos>` prepended.
pub fn tokenizer_json(vocab: usize) -> Result<Value> {
    if vocab < 8 {
        bail!("the vocabulary has {vocab} tokens; a synthetic tokenizer needs at least 8");
    }
    let specials = specials(vocab);
    let mut words = serde_json::Map::new();
    for id in 0..vocab as u32 {
        let word = specials
            .iter()
            .find(|(i, _)| *i == id)
            .map_or_else(|| format!("t{id}"), |(_, w)| (*w).to_owned());
        words.insert(word, json!(id));
    }
    let added: Vec<Value> = specials
        .iter()
        .map(|(id, content)| {
            json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true
            })
        })
        .collect();
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<bos>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}
            ],
            "pair": [
                {"SpecialToken": {"id": "<bos>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}}
            ],
            "special_tokens": {
                "<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}
            }
        },
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": Value::Object(words), "unk_token": "<unk>"}
    }))
}

/// A simple Gemma-style chat template.
pub const CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}\
{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}\
<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}\
{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/// tokenizer_config.json: the fast tokenizer, its special tokens and the chat template.
pub fn tokenizer_config_json() -> Value {
    json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "add_bos_token": true,
        "add_eos_token": false,
        "clean_up_tokenization_spaces": false,
        "model_max_length": 131072,
        "chat_template": CHAT_TEMPLATE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_tokenizer_loads_and_round_trips() {
        let text = serde_json::to_string(&tokenizer_json(512).unwrap()).unwrap();
        let t: tokenizers::Tokenizer = text.parse().unwrap();
        assert_eq!(t.get_vocab_size(true), 512);
        let enc = t.encode("t5 t9 hello", true).unwrap();
        assert_eq!(enc.get_ids(), &[2, 5, 9, 3]);
        let user = crate::tokenizer::ChatMessage {
            role: "user".into(),
            content: "t7".into(),
        };
        let chat = crate::tokenizer::render_chat(CHAT_TEMPLATE, &[user], "<bos>", "<eos>").unwrap();
        let enc = t.encode(chat.as_str(), false).unwrap();
        assert_eq!(enc.get_ids(), &[2, 105, 3, 7, 106, 105, 3]);
        assert_eq!(t.decode(&[2, 5, 9], true).unwrap(), "t5 t9");
    }

    #[test]
    fn partial_files_are_recognized() {
        assert!(is_partial(".config.json.partial"));
        assert!(is_partial(".partial-model.safetensors"));
        assert!(!is_partial(".bashrc.partial"));
        assert!(!is_partial("notes.txt"));
    }
}
