//! `mlx-aot logits`: teacher-forced logits of every position (the first K tokens as one
//! prefill, the rest one decode step each), written as float32 `[T, vocab]` to a
//! safetensors file, atomically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use runtime::generate;
use runtime::mlx_rs::Array;
use runtime::registry::ImplChoice;

use crate::model_dir::{self, KvChoice, ModelDir};

/// `mlx-aot logits`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model folder (config.json, weights).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// Token ids, comma separated.
    #[arg(long, value_name = "1,2,3,...", allow_hyphen_values = true)]
    tokens: String,
    /// Tokens of the first forward (default: all of them).
    #[arg(long, value_name = "K")]
    prefill: Option<usize>,
    /// KV caches: float, config (the folder's kv_config.json) or BITS (every cache at
    /// BITS, group 64). Default: config when the folder has kv_config.json, else float.
    #[arg(long, value_name = "float|config|BITS")]
    kv: Option<KvChoice>,
    /// Implementation: auto, monolith, generated (never a fallback), or an id.
    #[arg(long = "impl", default_value = "auto", value_parser = model_dir::parse_impl, value_name = "auto|monolith|generated")]
    implementation: ImplChoice,
    /// The output file (`FILE.safetensors`), tensor `logits`.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Parses `1,2,3`.
pub fn parse_tokens(s: &str) -> Result<Vec<u32>> {
    let tokens = s
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| anyhow!("--tokens: {t:?} is not a token id"))
        })
        .collect::<Result<Vec<u32>>>()?;
    if tokens.is_empty() {
        bail!("--tokens: no token ids given");
    }
    Ok(tokens)
}

pub fn main(a: Args) -> Result<()> {
    let tokens = parse_tokens(&a.tokens)?;
    let prefill = a.prefill.unwrap_or(tokens.len());
    if prefill == 0 || prefill > tokens.len() {
        bail!(
            "--prefill must be in 1..={} (the number of tokens), got {prefill}",
            tokens.len()
        );
    }
    let dir = ModelDir::open(&a.model)?;
    generate::check_tokens(&tokens, dir.config.vocab_size())?;
    let layout = dir.kv_layout(a.kv)?;
    // A bad plan (a kv layout the model cannot take) fails here, before loading.
    let resolved = dir.resolve(layout.clone())?;
    let loaded = dir.load(resolved, runtime::options::ExecOptions::from_env()?)?;
    let lm = model_dir::select(loaded.clone(), &a.implementation)?;
    let mut caches = loaded.as_ref().float_caches(1);
    let fast_before = lm.fast_path_calls();
    let logits = generate::logits_walk(
        lm.as_ref(),
        &mut caches,
        std::slice::from_ref(&tokens),
        prefill,
        &layout,
    )?;
    let logits = logits.squeeze_axes(&[0])?;
    logits.eval()?;
    write_logits(&a.out, &logits)?;
    let forwards = 1 + tokens.len() - prefill;
    crate::emit(&format!(
        "wrote {}: logits {:?} float32 | {} | fast path {}/{forwards} forwards\n",
        a.out.display(),
        logits.shape(),
        lm.implementation(),
        lm.fast_path_calls() - fast_before,
    ))
}

/// Writes tensor `logits` to `out` through a hidden temporary file in the same folder
/// (MLX's writer wants the `.safetensors` extension on it), renamed into place.
fn write_logits(out: &Path, logits: &Array) -> Result<()> {
    let name = out
        .file_name()
        .ok_or_else(|| anyhow!("--out {}: not a file name", out.display()))?
        .to_string_lossy()
        .into_owned();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        bail!(
            "--out {}: folder {} does not exist",
            out.display(),
            parent.display()
        );
    }
    if out.is_dir() {
        bail!("--out {} is a folder", out.display());
    }
    let tmp = parent.join(format!(".{name}.partial.safetensors"));
    let metadata = HashMap::from([("format".to_owned(), "mlx".to_owned())]);
    Array::save_safetensors([("logits", logits)], &metadata, &tmp)
        .map_err(|e| anyhow!("{}: writing failed: {e}", tmp.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("{}", out.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lists_parse_and_refuse_junk() {
        assert_eq!(parse_tokens("1, 2,3").unwrap(), vec![1, 2, 3]);
        assert!(parse_tokens("1,x").is_err());
        assert!(parse_tokens("-1").is_err());
        assert!(parse_tokens(",").is_err());
    }
}
