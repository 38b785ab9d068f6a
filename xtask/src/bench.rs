//! `cargo xtask bench`: synthesizes the model (a preset at its real shapes, or its shrunk
//! twin) once into `target/bench-models/`, then runs `mlx-aot bench` on it (release).

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

/// The arguments of `cargo xtask bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The preset to measure.
    #[arg(long, default_value = "gemma4-e4b")]
    preset: String,
    /// Its shrunk twin (same plan, small dimensions) instead of the real shapes.
    #[arg(long)]
    twin: bool,
    /// Weight bits (group 64); 16 for bf16 weights.
    #[arg(long, default_value_t = 4)]
    bits: u32,
    /// Prompt tokens.
    #[arg(long, default_value_t = 512)]
    prompt: usize,
    /// Generated tokens per repetition.
    #[arg(long = "gen", default_value_t = 256)]
    tokens: usize,
    /// Repetitions.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// More `mlx-aot bench` arguments (e.g. --kv float, --impls ..., --mlx-lm none).
    #[arg(last = true)]
    rest: Vec<String>,
}

fn mlx_aot(args: &[String]) -> Result<bool> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::generate::repo_root())
        .args(["run", "--quiet", "--release", "-p", "mlx-aot", "--"])
        .args(args)
        .status()
        .context("running mlx-aot")?;
    Ok(status.success())
}

/// `target/bench-models/<preset>-<twin|full>-<q<bits>|bf16>`, synthesized there the
/// first time (release `mlx-aot synth`; `bits` 16 for bf16 weights).
pub fn synthesized(preset: &str, twin: bool, bits: u32) -> Result<PathBuf> {
    let shape = if twin { "twin" } else { "full" };
    let quant = if bits == 16 {
        "bf16".to_owned()
    } else {
        format!("q{bits}")
    };
    let dir = crate::generate::repo_root()
        .join("target/bench-models")
        .join(format!("{preset}-{shape}-{quant}"));
    if !dir.join("model.safetensors").is_file() {
        let mut synth = vec![
            "synth".into(),
            "--preset".into(),
            preset.to_owned(),
            "--out".into(),
            dir.display().to_string(),
        ];
        if twin {
            synth.push("--twin".into());
        }
        if bits != 16 {
            synth.extend(["--bits".into(), bits.to_string()]);
        }
        if !mlx_aot(&synth)? {
            bail!("synthesizing {preset} failed");
        }
    }
    Ok(dir)
}

/// Synthesizes (once) and measures.
pub fn run(a: &Args) -> Result<ExitCode> {
    let dir = synthesized(&a.preset, a.twin, a.bits)?;
    let mut bench = vec![
        "bench".into(),
        "--model".into(),
        dir.display().to_string(),
        "--prompt".into(),
        a.prompt.to_string(),
        "--gen".into(),
        a.tokens.to_string(),
        "--reps".into(),
        a.reps.to_string(),
    ];
    if let Some(j) = &a.json {
        bench.extend(["--json".into(), j.display().to_string()]);
    }
    bench.extend(a.rest.iter().cloned());
    Ok(if mlx_aot(&bench)? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
