//! `cargo xtask bench-serve`: synthesizes the model once (as `cargo xtask bench` does),
//! starts `mlx-aot serve` on it (release, a free loopback port), runs the load test
//! `scripts/bench-serve.py` against it, and stops the server with SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail};

/// The arguments of `cargo xtask bench-serve`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The preset to serve.
    #[arg(long, default_value = "llama-3.2-1b")]
    preset: String,
    /// Its shrunk twin instead of the real shapes.
    #[arg(long)]
    twin: bool,
    /// Weight bits (group 64).
    #[arg(long, default_value_t = 4)]
    bits: u32,
    /// Concurrency levels.
    #[arg(long, default_value = "1,4,16")]
    concurrency: String,
    /// Requests per client at each level.
    #[arg(long, default_value_t = 4)]
    requests: usize,
    /// Tokens per request.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// The server's --max-batch.
    #[arg(long, default_value_t = 16)]
    max_batch: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn release_binary() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = crate::generate::repo_root();
    let ok = Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--quiet", "--release", "-p", "mlx-aot"])
        .status()
        .context("building mlx-aot")?
        .success();
    if !ok {
        bail!("building mlx-aot failed");
    }
    Ok(root.join("target/release/mlx-aot"))
}

/// Serves and measures.
pub fn run(a: &Args) -> Result<ExitCode> {
    let bin = release_binary()?;
    let root = crate::generate::repo_root();
    let dir = crate::bench::synthesized(&a.preset, a.twin, a.bits)?;
    let mut server = Command::new(&bin)
        .args([
            "serve",
            "--port",
            "0",
            "--queue",
            "1024",
            "--served-model-name",
            "bench",
        ])
        .args(["--max-batch", &a.max_batch.to_string(), "--model"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting mlx-aot serve")?;
    let mut lines = BufReader::new(server.stderr.take().expect("piped")).lines();
    let mut addr = None;
    for line in lines.by_ref() {
        let line = line?;
        eprintln!("{line}");
        if let Some(rest) = line.split("listening on ").nth(1) {
            addr = rest.split_whitespace().next().map(str::to_owned);
            break;
        }
    }
    // The rest of the server's log goes on to this terminal.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if !line.contains(" INFO ") {
                eprintln!("{line}");
            }
        }
    });
    let Some(url) = addr else {
        let _ = server.kill();
        bail!("mlx-aot serve did not start");
    };
    let mut load = Command::new("python3");
    load.arg(root.join("scripts/bench-serve.py"))
        .args(["--url", &url, "--model", "bench"])
        .args(["--concurrency", &a.concurrency])
        .args(["--requests", &a.requests.to_string()])
        .args(["--max-tokens", &a.max_tokens.to_string()])
        .args([
            "--label",
            &format!(
                "mlx-aot serve {} {} q{}",
                a.preset,
                if a.twin { "twin" } else { "full" },
                a.bits
            ),
        ]);
    if let Some(j) = &a.json {
        load.arg("--json").arg(j);
    }
    let measured = load.status().context("running scripts/bench-serve.py")?;
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", server.id())])
        .status();
    let stopped = server.wait()?;
    if !stopped.success() {
        bail!("mlx-aot serve exited with {stopped}");
    }
    Ok(if measured.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
