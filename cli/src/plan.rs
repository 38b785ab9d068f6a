//! `mlx-aot plan`: the memory plan of a model at a context length: weights, KV per cache
//! and in total, transient, reserve, total against usable, whether it fits, and the
//! largest safe context.

use std::path::PathBuf;

use anyhow::{Result, bail};
use runtime::family::{ModelConfig, WeightFacts};
use runtime::generate::DEFAULT_PREFILL_CHUNK;
use runtime::kv_layout::KvLayout;
use runtime::memory::{self, MemoryPlan};
use runtime::quantization::QuantSpec;
use serde_json::json;

use crate::figures;
use crate::inspect::optional_catalog;
use crate::model_dir::{self, KvChoice, ModelDir};
use crate::presets::Preset;

/// `mlx-aot plan`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["model", "preset"])))]
pub struct Args {
    /// A model folder (weight bytes measured from its files).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// A preset (weight bytes estimated from its config).
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Bits of the estimated weights, group 64 (16: bfloat16). Default 4; for a model
    /// folder without weight files, its config's quantization.
    #[arg(long, value_name = "B")]
    bits: Option<u32>,
    /// Context tokens (prompt and generation).
    #[arg(long, value_name = "N")]
    context: u64,
    /// Batch rows.
    #[arg(long, default_value_t = 1, value_name = "B")]
    batch: u64,
    /// Usable memory in GB (decimal) instead of what the device reports.
    #[arg(long, value_name = "GB")]
    memory: Option<f64>,
    /// KV caches: float, config or BITS. Default: the folder's or preset's kv_config.json
    /// when it has one, else float.
    #[arg(long, value_name = "float|config|BITS")]
    kv: Option<KvChoice>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Weight bytes of `config` estimated at `bits` (16: bf16), group 64.
fn estimate(config: &dyn ModelConfig, bits: u32) -> Result<(u64, String)> {
    if bits == 16 {
        return Ok((
            config.estimate_weight_bytes(None, 2),
            "estimated, bfloat16".to_owned(),
        ));
    }
    let q = QuantSpec {
        bits,
        group_size: 64,
    }
    .validate()
    .map_err(|m| anyhow::anyhow!("--bits: {m} (or 16 for bfloat16)"))?;
    Ok((
        config.estimate_weight_bytes(Some(q), 2),
        format!("estimated, {q}"),
    ))
}

pub fn main(a: Args) -> Result<()> {
    if a.context == 0 {
        bail!("--context must be at least 1");
    }
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let usable = match a.memory {
        Some(gb) if gb.is_finite() && gb > 0.0 => (gb * 1e9) as u64,
        Some(gb) => bail!("--memory must be a positive number of GB, got {gb}"),
        None => memory::device_usable()?,
    };

    let (name, config, layout, plan, weight_bytes, dtype_bytes, weights_from) = match (
        &a.model, &a.preset,
    ) {
        (Some(path), _) => {
            let dir = ModelDir::open(path)?;
            let layout = dir.kv_layout(a.kv)?;
            let catalog = optional_catalog(&dir)?;
            let plan = dir.plan(catalog.as_ref(), &layout)?;
            let (bytes, dtype, from) = match &catalog {
                Some(cat) => {
                    if a.bits.is_some() {
                        bail!(
                            "--bits is for estimated weights; {} has weight files, whose bytes are measured",
                            path.display()
                        );
                    }
                    (
                        cat.total_bytes(),
                        cat.activation_dtype_bytes(),
                        "measured from the weight files".to_owned(),
                    )
                }
                None => {
                    let bits = a.bits.unwrap_or_else(|| {
                        dir.config
                            .quantization()
                            .and_then(|q| q.global)
                            .map_or(16, |q| q.bits)
                    });
                    let (b, from) = estimate(&*dir.config, bits)?;
                    (b, 2, from)
                }
            };
            let name = path.display().to_string();
            (name, dir.config, layout, plan, bytes, dtype, from)
        }
        (None, Some(preset)) => {
            let p = Preset::find(preset)?;
            let config = p.config()?;
            let layout = match a.kv {
                None | Some(KvChoice::Config) if p.kv_config.is_some() => p.kv_layout()?,
                Some(KvChoice::Config) => {
                    bail!("--kv config: preset {} has no kv_config.json", p.name)
                }
                None | Some(KvChoice::Float) => KvLayout::float(),
                Some(KvChoice::Bits(bits)) => model_dir::uniform_layout(&config, bits)?,
            };
            let plan = config.resolve(&layout, WeightFacts::AsShipped)?;
            let (bytes, from) = estimate(&*config, a.bits.unwrap_or(4))?;
            (p.name.to_owned(), config, layout, plan, bytes, 2, from)
        }
        (None, None) => bail!("give --model DIR or --preset NAME"),
    };

    let model = memory::MemoryModel {
        shape: config.memory_shape(&plan),
        weight_bytes,
        dtype_bytes,
        prefill_chunk: DEFAULT_PREFILL_CHUNK as u64,
    };
    let p = model.plan(a.context, a.batch, usable);

    if a.json {
        let out = json!({
            "model": name,
            "weights_from": weights_from,
            "kv_layout": layout.source,
            "max_position_embeddings": config.max_position_embeddings(),
            "plan": p,
        });
        return crate::emit(&(serde_json::to_string_pretty(&out)? + "\n"));
    }
    let mut text = render(&name, &weights_from, &layout, &p);
    // The memory plan does not know the model's trained context length; show it beside.
    if let Some(m) = config.max_position_embeddings() {
        outln!(text, "model limit  {m} tokens (max_position_embeddings)");
    }
    crate::emit(&text)
}

fn render(name: &str, weights_from: &str, layout: &KvLayout, p: &MemoryPlan) -> String {
    let mut out = String::new();
    outln!(out, "model        {name}");
    outln!(out, "context      {} tokens, batch {}", p.context, p.batch);
    outln!(
        out,
        "weights      {} ({} bytes, {weights_from})",
        figures::bytes(p.weights),
        p.weights
    );
    outln!(
        out,
        "kv           {} ({} bytes) over {} caches, layout {}",
        figures::bytes(p.kv),
        p.kv,
        p.caches.len(),
        layout.source
    );
    outln!(
        out,
        "  {:>5}  {:<24}  {:>11}  {:>8}  {:>12}",
        "cache",
        "signature",
        "bytes/token",
        "rows",
        "bytes"
    );
    for c in &p.caches {
        outln!(
            out,
            "  {:>5}  {:<24}  {:>11}  {:>8}  {:>12}",
            c.cache,
            c.signature,
            c.bytes_per_token,
            c.rows,
            c.bytes
        );
    }
    outln!(
        out,
        "transient    {} ({} bytes)",
        figures::bytes(p.transient),
        p.transient
    );
    outln!(
        out,
        "reserve      {} ({} bytes)",
        figures::bytes(p.reserve),
        p.reserve
    );
    outln!(
        out,
        "total        {} of {} usable: {}",
        figures::bytes(p.total),
        figures::bytes(p.usable),
        if p.fits { "fits" } else { "does NOT fit" }
    );
    outln!(out, "largest safe context  {} tokens", p.max_context);
    if !p.fits {
        // What spreading the weights alone would take: the caches, transient and reserve
        // come on top on every device.
        outln!(
            out,
            "devices      the weights alone need {} devices of {} usable",
            p.weights.div_ceil(p.usable.max(1)),
            figures::bytes(p.usable)
        );
    }
    out
}
