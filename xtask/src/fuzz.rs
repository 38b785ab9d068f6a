//! `cargo xtask fuzz`: builds the cargo-fuzz targets of `fuzz/` once, then runs each for
//! a bounded time, and prints per target its time, runs and result.
//!
//! Built with `-s none` (no sanitizer: the fuzzed code is safe Rust, and without
//! `-Zsanitizer` the build needs no nightly toolchain) and cargo fuzz's default release
//! profile with debug assertions, so an arithmetic overflow is a crash. libFuzzer writes
//! what it finds into `fuzz/target/fuzz-corpus/<target>/` (the checked-in seeds in
//! `fuzz/corpus/` and the saved crashes in `fuzz/regressions/` are read, never written) and
//! a crashing input into `fuzz/target/fuzz-artifacts/<target>/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The targets, and the longest input each is given (a little above its largest seed).
pub const TARGETS: [(&str, usize); 3] = [
    ("config_plan", 16384),
    ("safetensors", 32768),
    ("tokenizer", 16384),
];

/// `cargo xtask fuzz`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 60, value_name = "N")]
    seconds: u64,
    /// Targets to run (default: all of them).
    #[arg(value_name = "TARGET")]
    targets: Vec<String>,
}

/// How one target's run ended.
struct Outcome {
    target: String,
    seconds: f64,
    runs: Option<u64>,
    failure: Option<String>,
}

/// Runs `cargo xtask fuzz`.
pub fn run(args: &Args) -> Result<ExitCode> {
    if args.seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    let targets: Vec<(&str, usize)> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        args.targets
            .iter()
            .map(|t| {
                TARGETS
                    .iter()
                    .find(|(name, _)| name == t)
                    .copied()
                    .with_context(|| {
                        let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
                        format!("unknown fuzz target {t:?}; the targets are {names:?}")
                    })
            })
            .collect::<Result<_>>()?
    };
    let root = crate::generate::repo_root();
    let fuzz = root.join("fuzz");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let have = Command::new(&cargo)
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        bail!("cargo-fuzz is not installed: cargo install --locked cargo-fuzz");
    }

    let started = Instant::now();
    let status = Command::new(&cargo)
        .current_dir(&root)
        .args(["fuzz", "build", "--fuzz-dir", "fuzz", "-s", "none"])
        .status()
        .context("running cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed");
    }
    println!(
        "fuzz: built in {:.0} s; {} s per target",
        started.elapsed().as_secs_f64(),
        args.seconds
    );

    let mut outcomes = Vec::new();
    for (target, max_len) in targets {
        outcomes.push(run_target(
            &cargo,
            &root,
            &fuzz,
            target,
            max_len,
            args.seconds,
        )?);
    }
    println!(
        "\n{:<12}  {:>8}  {:>10}  result",
        "target", "seconds", "runs"
    );
    for o in &outcomes {
        println!(
            "{:<12}  {:>8.1}  {:>10}  {}",
            o.target,
            o.seconds,
            o.runs.map_or_else(|| "?".to_owned(), |r| r.to_string()),
            o.failure.as_deref().unwrap_or("ok, no crash")
        );
    }
    Ok(if outcomes.iter().all(|o| o.failure.is_none()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run_target(
    cargo: &str,
    root: &Path,
    fuzz: &Path,
    target: &str,
    max_len: usize,
    seconds: u64,
) -> Result<Outcome> {
    let work = fuzz.join("target/fuzz-corpus").join(target);
    let artifacts = fuzz.join("target/fuzz-artifacts").join(target);
    let log_path = fuzz.join("target/fuzz-logs").join(format!("{target}.log"));
    for dir in [&work, &artifacts] {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::create_dir_all(log_path.parent().expect("a log folder"))?;
    // libFuzzer adds new inputs to the first corpus folder only; the others are read.
    let mut corpora: Vec<PathBuf> = vec![work];
    corpora.extend(
        [
            fuzz.join("corpus").join(target),
            fuzz.join("regressions").join(target),
        ]
        .into_iter()
        .filter(|d| d.is_dir()),
    );
    let log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    println!(
        "fuzz: {target} for {seconds} s (log: {})",
        log_path.display()
    );
    let started = Instant::now();
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["fuzz", "run", "--fuzz-dir", "fuzz", "-s", "none", target])
        .args(&corpora)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-max_len={max_len}"))
        // One input may take 10 s and 2 GB before it counts as a hang or a leak.
        .arg("-timeout=10")
        .arg("-rss_limit_mb=2048")
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .with_context(|| format!("running cargo fuzz run {target}"))?;
    let seconds = started.elapsed().as_secs_f64();
    let text = fs::read_to_string(&log_path).unwrap_or_default();
    let runs = text
        .lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|n| n.trim().parse().ok());
    let failure = (!status.success()).then(|| describe_failure(&text, status.code()));
    Ok(Outcome {
        target: target.to_owned(),
        seconds,
        runs,
        failure,
    })
}

/// What libFuzzer reported: the kind (crash, timeout, out-of-memory), the panic message,
/// and where the input was saved.
fn describe_failure(log: &str, code: Option<i32>) -> String {
    let kind = log
        .lines()
        .find_map(|l| l.split("ERROR: libFuzzer: ").nth(1))
        .unwrap_or("failed");
    // The panic's location, then its message on the next line.
    let lines: Vec<&str> = log.lines().collect();
    let panic = lines
        .iter()
        .position(|l| l.contains("panicked at"))
        .map(|i| format!(", {}", lines[i..(i + 2).min(lines.len())].join(" ").trim()));
    let saved = log
        .lines()
        .find_map(|l| l.split("Test unit written to ").nth(1))
        .map(|p| format!(", input saved to {}", p.trim()));
    format!(
        "{kind} (exit {}){}{}",
        code.map_or_else(|| "by signal".to_owned(), |c| c.to_string()),
        panic.unwrap_or_default(),
        saved.unwrap_or_default()
    )
}
