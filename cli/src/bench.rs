//! `mlx-aot bench`: the monolith, the generated path (compiled and not) and mlx-lm on
//! the same saved weights, in one run: prefill tok/s, time to first token, decode tok/s,
//! host time per decode step (graph building apart from evaluation, and the part of
//! evaluation spent submitting the step to the device), ops per step by primitive and
//! peak memory, and the GPU's busy fraction through each column's decode where
//! `nvidia-smi` runs ([`crate::gpu_busy`]), over alternating repetitions after a
//! warm-up. Prints a table with ratios and writes JSON.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use runtime::generate::{self, Flow, GenerateOptions, Pipeline};
use runtime::kv_layout::KvLayout;
use runtime::mlx_rs::Array;
use runtime::model::segments::{self, CompiledStages};
use runtime::model::{LanguageModel, Loaded};
use runtime::options::{ExecOptions, Numerics};
use runtime::registry::ImplChoice;
use runtime::sampling::Sampler;
use serde_json::{Value, json};

use crate::gpu_busy::{self, Busy, Sample, Window};
use crate::model_dir::{self, KvChoice, ModelDir};
use crate::pipeline_arg::PipelineArg;

/// The mlx-lm side, run as a subprocess.
const MLX_LM_BENCH: &str = include_str!("../bench/mlx_lm_bench.py");

/// Arguments of `mlx-aot bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model folder.
    #[arg(long)]
    model: PathBuf,
    /// Prompt tokens.
    #[arg(long, default_value_t = 512)]
    prompt: usize,
    /// Generated tokens per repetition.
    #[arg(long = "gen", default_value_t = 256)]
    tokens: usize,
    /// Timed repetitions of each implementation (alternating).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// KV caches: float, config (the folder's kv_config.json) or BITS; default config if
    /// the folder has one.
    #[arg(long)]
    kv: Option<KvChoice>,
    /// Implementations to measure: monolith, generated (compiled single-token steps),
    /// generated-eager (not compiled), generated-unfused (without the fused CUDA
    /// kernels); each may end in `-mlx` or `-fast` to run under that numerics profile
    /// (`generated-mlx`), and then in `:off`, `:ahead` or `:threaded` to decode with
    /// that pipeline instead of `--pipeline`'s.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "monolith,generated,generated-eager"
    )]
    impls: Vec<String>,
    /// Single-token steps timed one at a time (graph building apart from evaluation).
    #[arg(long, default_value_t = 32)]
    host_steps: usize,
    /// Python with mlx-lm 0.32.0 for the third column; `none` to skip. Default: the
    /// workspace's reference venv if present, else python3 if it imports mlx_lm.
    #[arg(long)]
    mlx_lm: Option<String>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write each implementation's single-token step graph here as DOT
    /// (`<implementation>.dot`, and `mlx-lm.dot` from the mlx-lm side).
    #[arg(long)]
    graphs: Option<PathBuf>,
    /// How decode steps overlap (see `mlx-aot run --pipeline`).
    #[arg(long, value_enum, default_value_t = PipelineArg::Auto)]
    pipeline: PipelineArg,
    /// A label for the machine in the report.
    #[arg(long, default_value = "")]
    machine: String,
    /// Do not sample the GPU's busy fraction with `nvidia-smi` (sampled by default where
    /// it runs).
    #[arg(long)]
    no_gpu_busy: bool,
}

/// Deterministic prompt ids, the same as the mlx-lm script's.
fn prompt_tokens(n: usize, vocab: usize) -> Vec<u32> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (3 + x % (vocab as u64 - 3)) as u32
        })
        .collect()
}

/// One implementation's figures of one repetition.
#[derive(Debug, Clone, Default)]
struct Rep {
    prefill_tok_s: f64,
    ttft_s: f64,
    decode_tok_s: f64,
    peak_memory: u64,
    fast_path: u64,
    /// The tokens generated.
    tokens: Vec<u32>,
    /// When the decode steps ran (wall clock).
    decode_window: Window,
}

/// Figures of the one-step-at-a-time measurement.
#[derive(Debug, Clone, Default)]
struct HostSplit {
    build_ms: Vec<f64>,
    eval_ms: Vec<f64>,
    /// The part of `eval_ms` spent in `async_eval` (the host handing the step's kernels
    /// to the device); the rest is waiting for the device.
    submit_ms: Vec<f64>,
    /// The step graph as MLX writes it (DOT).
    dot: String,
}

struct Subject {
    name: String,
    /// The implementation's name without its pipeline.
    base: String,
    model: Box<dyn LanguageModel>,
    /// The loaded model with this subject's execution options (the same weight arrays
    /// for every subject).
    loaded: Loaded,
    pipeline: PipelineArg,
    reps: Vec<Rep>,
    host: HostSplit,
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn subject(name: &str, loaded: &Loaded, pipeline: PipelineArg) -> Result<Subject> {
    let (base, pipeline) = match name.split_once(':') {
        None => (name, pipeline),
        Some((base, p)) => (
            base,
            <PipelineArg as clap::ValueEnum>::from_str(p, false).map_err(|_| {
                anyhow!("unknown pipeline {p:?} in {name:?} (off, ahead, threaded)")
            })?,
        ),
    };
    let mut options = *loaded.options();
    // `monolith-mlx`, `generated-fast`, ...: that implementation under that profile.
    let profiled = base.rsplit_once('-').and_then(|(implementation, profile)| {
        Some((implementation, Numerics::from_name(profile)?))
    });
    let base_impl = match profiled {
        Some((implementation, numerics)) => {
            options.numerics = Some(numerics);
            implementation
        }
        None => base,
    };
    let choice = match base_impl {
        "monolith" => ImplChoice::Monolith,
        "generated" => ImplChoice::Generated,
        "generated-compiled" => {
            options.compiled_stages = Some(segments::device_default_stages());
            ImplChoice::Generated
        }
        "generated-eager" => {
            options.compiled_stages = Some(CompiledStages::None);
            ImplChoice::Generated
        }
        "generated-unfused" => {
            options.fused_kernels = false;
            ImplChoice::Generated
        }
        _ => bail!(
            "unknown implementation {base:?} (monolith, generated, generated-compiled, generated-eager, generated-unfused, each of them may end in -mlx or -fast)"
        ),
    };
    let loaded = loaded.with_options(options);
    let model = model_dir::select(loaded.clone(), &choice)?;
    Ok(Subject {
        name: name.to_owned(),
        base: base.to_owned(),
        model,
        loaded,
        pipeline,
        reps: Vec::new(),
        host: HostSplit::default(),
    })
}

fn options(layout: &KvLayout, tokens: usize, pipeline: Pipeline) -> GenerateOptions {
    GenerateOptions {
        max_tokens: tokens,
        sampler: Sampler::Greedy,
        stop_tokens: Vec::new(),
        prefill_chunk: generate::DEFAULT_PREFILL_CHUNK,
        kv_layout: layout.clone(),
        pipeline,
        memory_limit: None,
    }
}

/// One generation: prefill, then `gen` tokens pipelined.
fn rep(s: &Subject, prompt: &[u32], layout: &KvLayout, tokens: usize) -> Result<Rep> {
    let mut caches = s.loaded.float_caches(1);
    let (tokens, stats) = generate::generate(
        s.model.as_ref(),
        &mut caches,
        prompt,
        &options(layout, tokens, s.pipeline.runtime()),
        |_| Flow::Continue,
    )?;
    let end = gpu_busy::now_s();
    Ok(Rep {
        decode_window: Window {
            start: end - stats.decode.as_secs_f64(),
            end,
        },
        prefill_tok_s: stats.prefill_tok_s(),
        ttft_s: stats.time_to_first_token.as_secs_f64(),
        decode_tok_s: stats.decode_tok_s(),
        peak_memory: stats.peak_memory as u64,
        fast_path: stats.fast_path_calls,
        tokens,
    })
}

/// After a prefill, `steps` single-token steps one at a time: the time to build each
/// step's graph, the time to evaluate it, and the ops of one step's graph.
fn host_split(s: &Subject, prompt: &[u32], layout: &KvLayout, steps: usize) -> Result<HostSplit> {
    let mut caches = s.loaded.float_caches(1);
    let opts = options(layout, 1, Pipeline::Off);
    generate::generate(s.model.as_ref(), &mut caches, prompt, &opts, |_| {
        Flow::Continue
    })?;
    let mut out = HostSplit::default();
    let mut token = Array::from_slice(&[prompt[0] as i32], &[1, 1]);
    for i in 0..steps + 2 {
        runtime::kv_policy::apply(&mut caches, layout)?;
        let t0 = Instant::now();
        let logits = s.model.forward(&token, &mut caches)?;
        let next = Sampler::Greedy.sample(&logits.reshape(&[1, -1])?, 0)?;
        let built = Instant::now();
        if i == 0 {
            out.dot = runtime::graph::dot(&[&next])?;
        }
        let t1 = Instant::now();
        runtime::mlx_rs::transforms::async_eval([&next])?;
        let t2 = Instant::now();
        next.eval()?;
        let t3 = Instant::now();
        // The first two steps trace compiled segments; they are not timed.
        if i >= 2 {
            out.build_ms.push((built - t0).as_secs_f64() * 1e3);
            out.submit_ms.push((t2 - t1).as_secs_f64() * 1e3);
            out.eval_ms.push((t3 - t1).as_secs_f64() * 1e3);
        }
        token = next.reshape(&[1, 1])?;
    }
    Ok(out)
}

/// The python for mlx-lm, if any.
fn mlx_lm_python(arg: Option<&str>) -> Option<String> {
    match arg {
        Some("none") => None,
        Some(p) => Some(p.to_owned()),
        None => {
            let venv =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/mlx-lm-venv/bin/python");
            let candidates = [venv.display().to_string(), "python3".to_owned()];
            candidates.into_iter().find(|p| {
                Command::new(p)
                    .args(["-c", "import mlx_lm"])
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
        }
    }
}

fn run_mlx_lm(python: &str, a: &Args) -> Result<Value> {
    let script =
        std::env::temp_dir().join(format!("mlx-aot-mlx-lm-bench-{}.py", std::process::id()));
    std::fs::write(&script, MLX_LM_BENCH)
        .with_context(|| format!("writing {}", script.display()))?;
    let output = Command::new(python)
        .arg(&script)
        .args(["--model", &a.model.display().to_string()])
        .args([
            "--prompt",
            &a.prompt.to_string(),
            "--gen",
            &a.tokens.to_string(),
            "--reps",
            &a.reps.to_string(),
        ])
        .args(
            a.graphs
                .iter()
                .flat_map(|d| ["--dot".into(), d.join("mlx-lm.dot").display().to_string()]),
        )
        .output()
        .with_context(|| format!("running {python}"));
    let _ = std::fs::remove_file(&script);
    let output = output?;
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        bail!(
            "mlx-lm failed: {}",
            err.lines().last().unwrap_or("no output")
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .last()
        .ok_or_else(|| anyhow!("mlx-lm printed nothing"))?;
    Ok(serde_json::from_str(line)?)
}

/// `mlx-aot bench`.
pub fn main(a: Args) -> Result<()> {
    if a.reps == 0 || a.tokens < 2 || a.prompt == 0 {
        bail!("--reps must be >= 1, --gen >= 2 and --prompt >= 1");
    }
    // Before anything touches MLX, whichever pipelines run: a threaded one needs every
    // array, weights and traced functions included, on the shared stream.
    runtime::stream::share_default()?;
    let dir = ModelDir::open(&a.model)?;
    let layout = dir.kv_layout(a.kv)?;
    let loaded = dir.load(dir.resolve(layout.clone())?, ExecOptions::from_env()?)?;
    let vocab = loaded.vocab_size();
    let prompt = prompt_tokens(a.prompt, vocab);
    let mut subjects: Vec<Subject> = a
        .impls
        .iter()
        .map(|n| subject(n, &loaded, a.pipeline))
        .collect::<Result<_>>()?;

    // Warm-up: kernels compiled (the GPU's first forward JITs them), segments traced.
    let warm = Instant::now();
    for s in &subjects {
        rep(s, &prompt, &layout, 8)?;
    }
    let warmup_s = warm.elapsed().as_secs_f64();
    eprintln!("warm-up {warmup_s:.1} s");
    let sampler = if a.no_gpu_busy {
        None
    } else {
        gpu_busy::Sampler::start()
    };
    for r in 0..a.reps {
        for s in subjects.iter_mut() {
            let x = rep(s, &prompt, &layout, a.tokens)?;
            eprintln!(
                "rep {} {:<16} decode {:8.1} tok/s",
                r + 1,
                s.name,
                x.decode_tok_s
            );
            s.reps.push(x);
        }
    }
    for s in subjects.iter_mut() {
        s.host = host_split(s, &prompt, &layout, a.host_steps)?;
    }
    if let Some(dir) = &a.graphs {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for s in &subjects {
            let path = dir.join(format!("{}.dot", s.name));
            runtime::synth::write_atomic(&path, s.host.dot.as_bytes())?;
        }
    }
    let mlx_lm = match mlx_lm_python(a.mlx_lm.as_deref()) {
        Some(python) => match run_mlx_lm(&python, &a) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("mlx-lm column skipped: {e:#}");
                None
            }
        },
        None => None,
    };
    let samples = sampler.map(gpu_busy::Sampler::stop).unwrap_or_default();
    let report = report(
        &a,
        &loaded,
        &layout,
        &subjects,
        mlx_lm.as_ref(),
        warmup_s,
        &samples,
    );
    print_table(&report);
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        runtime::synth::write_atomic(path, text.as_bytes())?;
    }
    Ok(())
}

fn stat(v: &[f64]) -> Value {
    let (lo, hi) = min_max(v);
    json!({"median": median(v), "min": lo, "max": hi, "all": v})
}

fn report(
    a: &Args,
    m: &Loaded,
    layout: &KvLayout,
    subjects: &[Subject],
    mlx_lm: Option<&Value>,
    warmup_s: f64,
    samples: &[Sample],
) -> Value {
    let busy = |windows: &[Window]| -> Value {
        match gpu_busy::busy_in(samples, windows) {
            Some(Busy { mean_pct, samples }) => json!({"mean_pct": mean_pct, "samples": samples}),
            None => Value::Null,
        }
    };
    // Greedy decoding of one prompt on one set of weights: every implementation, pipeline
    // and repetition should give the same tokens (the parity gate's promise, end to end).
    // Each repetition's first position that differs from the first one measured.
    let first = subjects
        .first()
        .and_then(|s| s.reps.first())
        .map(|r| r.tokens.clone());
    let differs_at = |r: &Rep| -> Option<usize> {
        let first = first.as_ref()?;
        let n = first.len().min(r.tokens.len());
        (0..n)
            .find(|&i| first[i] != r.tokens[i])
            .or((first.len() != r.tokens.len()).then_some(n))
    };
    let same_tokens = subjects
        .iter()
        .flat_map(|s| &s.reps)
        .all(|r| differs_at(r).is_none());
    let mut impls = serde_json::Map::new();
    for s in subjects {
        let pick = |f: fn(&Rep) -> f64| -> Vec<f64> { s.reps.iter().map(f).collect() };
        impls.insert(
            s.name.clone(),
            json!({
                "implementation": s.model.implementation(),
                "pipeline": format!("{:?}", s.pipeline.runtime()),
                "compiled_decode": !s.base.starts_with("monolith")
                    && segments::compiles_with(s.loaded.options(), s.loaded.dtype()),
                "fused_kernels": !s.base.starts_with("monolith")
                    && runtime::kernels::enabled(s.loaded.options()),
                "numerics": s.loaded.options().numerics().name(),
                "fast_kernels": runtime::kernels::fast::enabled(s.loaded.options()),
                "prefill_tok_s": stat(&pick(|r| r.prefill_tok_s)),
                "ttft_s": stat(&pick(|r| r.ttft_s)),
                "decode_tok_s": stat(&pick(|r| r.decode_tok_s)),
                "gpu_busy_in_decode": busy(&s.reps.iter().map(|r| r.decode_window).collect::<Vec<_>>()),
                "peak_memory_bytes": s.reps.iter().map(|r| r.peak_memory).max(),
                "fast_path_calls_per_rep": s.reps.first().map(|r| r.fast_path),
                "tokens_differ_from_first_at": s.reps.iter().map(differs_at).collect::<Vec<_>>(),
                "host_build_ms_per_step": stat(&s.host.build_ms),
                "eval_ms_per_step": stat(&s.host.eval_ms),
                "submit_ms_per_step": stat(&s.host.submit_ms),
                "ops_per_step": runtime::graph::primitives(&s.host.dot).count(),
                "ops_by_primitive": runtime::graph::histogram(&s.host.dot),
            }),
        );
    }
    // Each implementation's decode tok/s, repetition by repetition.
    let per_rep = |name: &str| {
        subjects
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.reps.iter().map(|r| r.decode_tok_s).collect::<Vec<_>>())
    };
    let decode = |name: &str| per_rep(name).map(|v| median(&v));
    let mlxlm_decode = mlx_lm.and_then(|v| {
        let reps = v["mlx_lm"].as_array()?;
        let d: Vec<f64> = reps
            .iter()
            .filter_map(|r| r["decode_tok_s"].as_f64())
            .collect();
        (!d.is_empty()).then(|| median(&d))
    });
    let generated = decode("generated");
    let monolith = decode("monolith");
    // Each repetition runs the implementations back to back, so the ratio within a
    // repetition shares the host's state of the moment; its median is steadier than the
    // ratio of medians on a host whose speed drifts.
    let paired = per_rep("generated").zip(per_rep("monolith")).map(|(g, m)| {
        let ratios: Vec<f64> = g.iter().zip(&m).map(|(g, m)| g / m).collect();
        stat(&ratios)
    });
    let ratio = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x / y);
    let mlx_lm_summary = mlx_lm.map(|v| {
        let reps = v["mlx_lm"].as_array().cloned().unwrap_or_default();
        let f = |k: &str| -> Vec<f64> { reps.iter().filter_map(|r| r[k].as_f64()).collect() };
        json!({
            "prefill_tok_s": stat(&f("prefill_tok_s")),
            "ttft_s": stat(&f("ttft_s")),
            "decode_tok_s": stat(&f("decode_tok_s")),
            "gpu_busy_in_decode": busy(&reps.iter().filter_map(|r| {
                let w = r["decode_window"].as_array()?;
                Some(Window { start: w.first()?.as_f64()?, end: w.get(1)?.as_f64()? })
            }).collect::<Vec<_>>()),
            "peak_memory_bytes": reps.iter().filter_map(|r| r["peak_memory"].as_u64()).max(),
            "ops_per_step": v["ops_by_primitive"]
                .as_object()
                .map(|h| h.values().filter_map(Value::as_u64).sum::<u64>()),
            "ops_by_primitive": v["ops_by_primitive"].clone(),
            "host_build_ms_per_step": {"median": v["host_build_ms_per_step"].clone()},
            "submit_ms_per_step": {"median": v["submit_ms_per_step"].clone()},
            "eval_ms_per_step": {"median": v["eval_ms_per_step"].clone()},
            "device": v["device"].clone(),
            "caches": if m.plan().layers.iter().any(|l| l.cache.is_rotating()) {
                "float (mlx-lm cannot quantize rotating caches)"
            } else {
                "float (mlx-lm's own caches as made)"
            },
        })
    });
    json!({
        "machine": a.machine,
        "same_tokens": same_tokens,
        "model": a.model.display().to_string(),
        "fingerprint": runtime::fingerprint::Fingerprint::of(m.plan()).short(),
        "kv_layout": layout.source,
        "prefill_barrier": format!("{:?}", m.as_ref().barrier()),
        "prompt": a.prompt,
        "gen": a.tokens,
        "reps": a.reps,
        "warmup_s": warmup_s,
        "implementations": impls,
        "mlx_lm": mlx_lm_summary,
        "decode": {
            "generated_tok_s": generated,
            "monolith_tok_s": monolith,
            "mlxlm_tok_s": mlxlm_decode,
            "generated_over_monolith": ratio(generated, monolith),
            "generated_over_monolith_per_rep": paired,
            "generated_over_mlxlm": ratio(generated, mlxlm_decode),
        },
    })
}

fn print_table(r: &Value) {
    println!(
        "bench: {} | prompt {} | gen {} | reps {} | kv {} | prefill barrier {}",
        r["model"].as_str().unwrap_or(""),
        r["prompt"],
        r["gen"],
        r["reps"],
        r["kv_layout"].as_str().unwrap_or(""),
        r["prefill_barrier"].as_str().unwrap_or("")
    );
    println!(
        "{:<17} {:>10} {:>9} {:>22} {:>10} {:>10} {:>10} {:>7} {:>9} {:>7}",
        "implementation",
        "prefill/s",
        "ttft ms",
        "decode tok/s med[min-max]",
        "host ms",
        "submit ms",
        "eval ms",
        "ops",
        "peak MB",
        "busy %"
    );
    let row = |name: &str, v: &Value| {
        let med = |k: &str| v[k]["median"].as_f64().unwrap_or(f64::NAN);
        let mn = v["decode_tok_s"]["min"].as_f64().unwrap_or(f64::NAN);
        let mx = v["decode_tok_s"]["max"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<17} {:>10.1} {:>9.1} {:>8.1} [{:>5.1}-{:>5.1}] {:>10} {:>10} {:>10} {:>7} {:>9.0} {:>7}",
            name,
            med("prefill_tok_s"),
            med("ttft_s") * 1e3,
            med("decode_tok_s"),
            mn,
            mx,
            v["host_build_ms_per_step"]["median"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.2}")),
            v["submit_ms_per_step"]["median"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.2}")),
            v["eval_ms_per_step"]["median"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.2}")),
            v["ops_per_step"]
                .as_u64()
                .map_or("-".into(), |x| x.to_string()),
            v["peak_memory_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6,
            v["gpu_busy_in_decode"]["mean_pct"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.0}"))
        );
    };
    if let Some(impls) = r["implementations"].as_object() {
        for (name, v) in impls {
            row(name, v);
        }
    }
    if r["mlx_lm"].is_object() {
        row("mlx-lm 0.32.0", &r["mlx_lm"]);
    }
    let d = &r["decode"];
    let f = |k: &str| d[k].as_f64().map_or("n/a".into(), |x| format!("{x:.2}x"));
    println!(
        "decode ratios: generated/monolith {} | generated/mlx-lm {}",
        f("generated_over_monolith"),
        f("generated_over_mlxlm")
    );
    if r["same_tokens"].as_bool() == Some(true) {
        println!("same tokens from every implementation and repetition: yes");
    } else {
        println!(
            "same tokens from every implementation and repetition: NO (first differing position, per repetition)"
        );
        if let Some(impls) = r["implementations"].as_object() {
            for (name, v) in impls {
                println!("  {name}: {}", v["tokens_differ_from_first_at"]);
            }
        }
    }
    let p = &d["generated_over_monolith_per_rep"];
    if let (Some(med), Some(lo), Some(hi)) =
        (p["median"].as_f64(), p["min"].as_f64(), p["max"].as_f64())
    {
        println!("generated/monolith within each repetition: {med:.2}x [{lo:.2}-{hi:.2}]");
    }
}
