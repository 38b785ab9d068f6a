//! `cargo xtask parity`: runs the gate program of `parity-tests` (in release, so
//! `--full` at real shapes is practical). xtask itself never links generated code, so it
//! can always regenerate it.

use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

/// The arguments, passed through to the gate program.
#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true)]
pub struct Args {
    /// Arguments of the gate: [MODELS...] [--full] [--prompt N] [--second N] [--steps N] [--no-batch2].
    #[arg(allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `cargo run --release -p parity-tests --bin parity -- ARGS`.
pub fn run(args: &Args) -> Result<ExitCode> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::generate::repo_root())
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "parity-tests",
            "--bin",
            "parity",
            "--",
        ])
        .args(&args.rest)
        .status()
        .context("running the parity gate")?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
