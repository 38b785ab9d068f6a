//! `parity`: the gate as a program, for `cargo xtask parity`. Runs every registered
//! generated model (or the ones named) on its twin, or at the real published shapes with
//! `--full`, and prints the one-screen report.

use std::process::ExitCode;

use clap::Parser;
use parity_tests::gate::{self, GateOptions, Report, Weights};

/// The parity gate: generated == monolith, byte for byte.
#[derive(Parser)]
#[command(name = "cargo xtask parity")]
struct Args {
    /// Models to gate (preset names like gemma4-e4b, or implementation ids); all if none.
    models: Vec<String>,
    /// Real published shapes with random 4-bit weights instead of the shrunk twins.
    #[arg(long)]
    full: bool,
    /// Length of the first (float-cache) prefill [twins: 5 and 21; --full: 8].
    #[arg(long)]
    prompt: Option<usize>,
    /// Length of the second prefill [window + 3].
    #[arg(long)]
    second: Option<usize>,
    /// Single-token decode steps after it [2 x window + 2].
    #[arg(long)]
    steps: Option<usize>,
    /// Skip the batch-2 phase.
    #[arg(long)]
    no_batch2: bool,
    /// Skip the phase with a cache of another signature (quantized caches).
    #[arg(long)]
    no_altered: bool,
    /// Instead of the gate: the `fast` numerics profile's distance to the `mlx` one over
    /// this many decode steps after a `--prompt`-token prefill [512 with --full, else 21]
    /// (generated under `fast` against the monolith under `mlx`, teacher-forced).
    #[arg(long)]
    distance: Option<usize>,
    /// With --distance: print every step's figures too.
    #[arg(long)]
    per_step: bool,
    /// With --distance: measure the control instead of `fast` (the `mlx` profile with its
    /// single-token attention in f32 through MLX's ops).
    #[arg(long)]
    control: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut opts = if args.full {
        GateOptions {
            full: true,
            cases: vec![(Weights::Q4, 1)],
            prompt_lens: vec![8],
            decode_steps: None,
            second_prefill: None,
            batch2: false,
            altered: true,
            ..GateOptions::twins()
        }
    } else {
        GateOptions::twins()
    };
    if let Some(p) = args.prompt {
        opts.prompt_lens = vec![p];
    }
    opts.second_prefill = args.second.or(opts.second_prefill);
    opts.decode_steps = args.steps.or(opts.decode_steps);
    opts.batch2 = opts.batch2 && !args.no_batch2;
    opts.altered = !args.no_altered;
    // The documented MLX_AOT_* execution options, read here at the program's edge.
    opts.exec = match runtime::options::ExecOptions::from_env() {
        Ok(exec) => exec,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    opts.self_check = std::env::var("MLX_AOT_GATE_SELF_CHECK").is_ok_and(|v| v != "0");
    let all = generated::implementations();
    let chosen: Vec<_> = all
        .iter()
        .filter(|i| {
            args.models.is_empty()
                || args
                    .models
                    .iter()
                    .any(|m| i.id == m || i.source.ends_with(&format!("/{m}")))
        })
        .collect();
    if chosen.is_empty() {
        let known: Vec<&str> = all.iter().map(|i| i.id).collect();
        eprintln!(
            "error: no registered model matches {:?} (registered: {})",
            args.models,
            known.join(", ")
        );
        return ExitCode::FAILURE;
    }
    if let Some(steps) = args.distance {
        let prompt = args.prompt.unwrap_or(if args.full { 512 } else { 21 });
        let mut failed = false;
        for imp in chosen {
            eprintln!("measuring {} ...", imp.id);
            let side = if args.control {
                parity_tests::distance::Side::Control
            } else {
                parity_tests::distance::Side::Fast
            };
            match parity_tests::distance::run(imp, args.full, opts.exec, prompt, steps, side) {
                Ok(d) => {
                    if args.per_step {
                        println!("step,rel_err,max_abs,argmax_equal");
                        for (t, s) in d.steps.iter().enumerate() {
                            println!("{t},{:.6e},{:.6e},{}", s.rel_err, s.max_abs, s.argmax_equal);
                        }
                    }
                    println!("{d}");
                }
                Err(e) => {
                    eprintln!("FAILED: {e}");
                    failed = true;
                }
            }
        }
        return if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let mut report = Report {
        self_check: opts.self_check,
        ..Report::default()
    };
    let mut failed = false;
    for imp in chosen {
        eprintln!("gating {} ...", imp.id);
        match gate::run(imp, &opts) {
            Ok(m) => report.models.push(m),
            Err(e) => {
                eprintln!("FAILED: {e}");
                failed = true;
            }
        }
    }
    println!("{report}");
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
