//! `cargo xtask`: developer tasks of mlx-aot.
use clap::Parser;

/// mlx-aot developer tasks.
#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {}

fn main() {
    let Cli {} = Cli::parse();
}
