//! Prints the sha256 of the MLX smoke ops (see `tests/smoke.rs`): compare it across
//! processes, machines or MLX builds (e.g. a CPU-built binary run against another libmlx).
//!
//! `cargo run -p runtime --example smoke_hash`

#[path = "../tests/smoke_ops/mod.rs"]
mod smoke_ops;

fn main() {
    let outcome = smoke_ops::run();
    if std::env::args().any(|a| a == "--verbose") {
        for check in &outcome.checks {
            eprintln!("ok: {check}");
        }
    }
    println!("{}", outcome.hash);
}
