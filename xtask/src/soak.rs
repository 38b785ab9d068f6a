//! `cargo xtask soak`: the long-run test of parity-tests (10,000 steps, resident memory
//! sampled every 500), in release.

use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

/// Runs `cargo test --release -p parity-tests --test soak -- --ignored --nocapture`.
pub fn run() -> Result<ExitCode> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::generate::repo_root())
        .args([
            "test",
            "--release",
            "-p",
            "parity-tests",
            "--test",
            "soak",
            "--",
            "--ignored",
            "--nocapture",
        ])
        .status()
        .context("running the soak test")?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
