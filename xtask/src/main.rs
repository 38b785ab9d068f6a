//! `cargo xtask`: developer tasks of mlx-aot.

mod bench;
mod bench_serve;
mod bindings;
mod fuzz;
mod generate;
mod parity;
mod soak;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mlx-aot developer tasks.
#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "mlx-aot developer tasks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Regenerate mlx-sys/src/bindings.rs from the pinned mlx-c headers (needs libclang),
    /// or check that it is fresh.
    Bindings(bindings::Args),
    /// Generate the specialized forward pass of a model (or check it is up to date).
    Generate(generate::Args),
    /// The parity gate: every generated model == the monolith, byte for byte (twins, or
    /// `--full` real shapes).
    Parity(parity::Args),
    /// Benchmark the monolith, the generated path and mlx-lm on a synthesized preset.
    Bench(bench::Args),
    /// Load-test `mlx-aot serve` on a synthesized preset: aggregate tok/s and time to
    /// first token at several concurrencies.
    BenchServe(bench_serve::Args),
    /// The long run: 10,000 steps, generated == monolith throughout, memory bounded.
    Soak,
    /// Run the cargo-fuzz targets of fuzz/ for a bounded time each (cargo-fuzz must be
    /// installed).
    Fuzz(fuzz::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bindings(args) => bindings::run(&args),
        Command::Generate(args) => generate::run(&args),
        Command::Parity(args) => parity::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::BenchServe(args) => bench_serve::run(&args),
        Command::Soak => soak::run(),
        Command::Fuzz(args) => fuzz::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
