//! `mlx-aot inspect`: a model folder's config, per-layer plan, cache signatures,
//! fingerprint, and which registered implementation matches.

use std::path::PathBuf;

use anyhow::Result;
use runtime::fingerprint::Fingerprint;
use runtime::plan::{KvRole, LayerFlags, ModelPlan};
use runtime::weights::catalog::Catalog;
use serde_json::{Value, json};

use crate::figures;
use crate::model_dir::{self, KvChoice, ModelDir};

/// `mlx-aot inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model folder (config.json; weights optional).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// KV caches the plan is resolved for: float, config or BITS. Default: config when
    /// the folder has kv_config.json, else float.
    #[arg(long, value_name = "float|config|BITS")]
    kv: Option<KvChoice>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn flag_names(f: &LayerFlags) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (on, name) in [
        (f.k_eq_v, "k_eq_v"),
        (f.per_layer_input, "per_layer_input"),
        (f.moe, "moe"),
        (f.layer_scalar, "layer_scalar"),
        (f.double_wide_mlp, "double_wide_mlp"),
        (f.qk_norm, "qk_norm"),
        (f.residual_scale, "residual_scale"),
    ] {
        if on {
            out.push(name);
        }
    }
    out
}

/// The catalog of the folder, or `None` when it has no weight files at all.
pub fn optional_catalog(dir: &ModelDir) -> Result<Option<Catalog>> {
    let has_weights = std::fs::read_dir(&dir.dir)?
        .filter_map(|e| e.ok())
        .any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            !name.starts_with('.') && name.ends_with(".safetensors")
        })
        || dir.dir.join(runtime::weights::catalog::INDEX_FILE).exists();
    if has_weights {
        Ok(Some(dir.catalog()?))
    } else {
        Ok(None)
    }
}

pub fn main(a: Args) -> Result<()> {
    let dir = ModelDir::open(&a.model)?;
    let layout = dir.kv_layout(a.kv)?;
    let catalog = optional_catalog(&dir)?;
    let plan = dir.plan(catalog.as_ref(), &layout)?;
    let fingerprint = Fingerprint::of(&plan);
    let registry = model_dir::registry()?;
    let matching = registry.find_fingerprint(&fingerprint);
    let layers: Vec<Value> = plan
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let (role, donor, exported) = match l.kv {
                KvRole::Donor { cache, exported } => ("donor", cache, exported),
                KvRole::Sharer { donor } => ("sharer", donor, false),
            };
            json!({
                "layer": i,
                "attention": l.attention.to_string(),
                "kv": role,
                "donor": donor,
                "exported": exported,
                "cache": l.cache.to_string(),
                "flags": flag_names(&l.flags),
            })
        })
        .collect();
    let caches: Vec<String> = plan
        .cache_signatures()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let weights = catalog.as_ref().map(|cat| {
        json!({
            "bytes": cat.total_bytes(),
            "tensors": cat.names().count(),
            "activation_dtype_bytes": cat.activation_dtype_bytes(),
        })
    });
    let (config, config_line) = dir.config.summary(&plan);
    if a.json {
        let out = json!({
            "model": dir.dir.display().to_string(),
            "config": config,
            "weights": weights,
            "kv_layout": layout.source,
            "quantized_caches": layout.entries().count(),
            "layers": layers,
            "caches": caches,
            "fingerprint": fingerprint.short(),
            "implementation": matching.map(|i| i.id),
            "implementation_source": matching.map(|i| i.source),
        });
        return crate::emit(&(serde_json::to_string_pretty(&out)? + "\n"));
    }

    let mut out = String::new();
    outln!(out, "model        {}", dir.dir.display());
    outln!(out, "{config_line}");
    match &catalog {
        Some(cat) => outln!(
            out,
            "weights      {} in {} tensors",
            figures::bytes(cat.total_bytes()),
            cat.names().count()
        ),
        None => outln!(
            out,
            "weights      none in the folder (the plan assumes the tensors as published checkpoints have them)"
        ),
    }
    outln!(
        out,
        "kv layout    {} ({} quantized caches)",
        layout.source,
        layout.entries().count()
    );
    outln!(out);
    print_table(&mut out, &plan);
    outln!(out);
    outln!(out, "caches       {}", summarize(&caches));
    outln!(out, "fingerprint  {fingerprint}");
    match matching {
        Some(i) => outln!(out, "implementation {} (generated from {})", i.id, i.source),
        None => outln!(
            out,
            "implementation monolith only (no generated implementation has fingerprint {fingerprint})"
        ),
    }
    crate::emit(&out)
}

fn print_table(out: &mut String, plan: &ModelPlan) {
    outln!(
        out,
        "{:>5}  {:<9}  {:<15}  {:<24}  flags",
        "layer",
        "attention",
        "kv",
        "cache"
    );
    for (i, l) in plan.layers.iter().enumerate() {
        let kv = match l.kv {
            KvRole::Donor { exported: true, .. } => "donor, exported".to_owned(),
            KvRole::Donor { .. } => "donor".to_owned(),
            KvRole::Sharer { donor } => format!("sharer of {donor}"),
        };
        outln!(
            out,
            "{i:>5}  {:<9}  {kv:<15}  {:<24}  {}",
            l.attention.to_string(),
            l.cache.to_string(),
            flag_names(&l.flags).join(" ")
        );
    }
}

/// `kv:rotating-quant:4:64 x3, kv:quant:8:64, ...` in cache order, runs collapsed.
fn summarize(caches: &[String]) -> String {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for c in caches {
        match runs.last_mut() {
            Some((last, n)) if last == c => *n += 1,
            _ => runs.push((c.clone(), 1)),
        }
    }
    let parts: Vec<String> = runs
        .into_iter()
        .map(|(c, n)| if n > 1 { format!("{c} x{n}") } else { c })
        .collect();
    format!("{} caches: {}", caches.len(), parts.join(", "))
}
