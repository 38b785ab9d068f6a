//! `mlx-aot run`: tokenize (optionally through the chat template), check the memory plan,
//! load, warm up, generate while streaming text, and end with one line of figures.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Result, bail};
use runtime::generate::{self, DEFAULT_PREFILL_CHUNK, Flow, GenerateOptions};
use runtime::memory;
use runtime::options::ExecOptions;
use runtime::registry::ImplChoice;
use runtime::sampling::Sampler;

use crate::figures;
use crate::model_dir::{self, KvChoice, ModelDir};
use crate::pipeline_arg::PipelineArg;
use crate::tokenizer::{Detokenizer, Tokenizer};

/// `mlx-aot run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model folder (config.json, weights, tokenizer.json). Default: the embedded
    /// default model (the gemma4-e4b twin, synthesized once into the cache folder).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The prompt.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    prompt: String,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 100, value_name = "N")]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "T",
        allow_hyphen_values = true
    )]
    temperature: f32,
    /// Nucleus mass in (0, 1] (with a temperature above 0).
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "P",
        allow_hyphen_values = true
    )]
    top_p: f32,
    /// Sampling seed.
    #[arg(long, default_value_t = 0, value_name = "S")]
    seed: u64,
    /// KV caches: float, config (the folder's kv_config.json) or BITS (every cache at
    /// BITS, group 64). Default: config when the folder has kv_config.json, else float.
    #[arg(long, value_name = "float|config|BITS")]
    kv: Option<KvChoice>,
    /// Implementation: auto (generated when the fingerprint matches), monolith,
    /// generated (never a fallback), or a registered implementation id.
    #[arg(long = "impl", default_value = "auto", value_parser = model_dir::parse_impl, value_name = "auto|monolith|generated")]
    implementation: ImplChoice,
    /// Render the prompt through the folder's chat template as one user message.
    #[arg(long)]
    chat: bool,
    /// Generate exactly --max-tokens tokens: do not stop at the model's end-of-sequence
    /// tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Prompt tokens per prefill forward.
    #[arg(long, default_value_t = DEFAULT_PREFILL_CHUNK, value_name = "N")]
    prefill_chunk: usize,
    /// How decode steps overlap: threaded (a second thread submits step t while step t+1
    /// is built), ahead (one thread, mlx-lm's loop), off, or auto (threaded on the CPU,
    /// ahead on a GPU).
    #[arg(long, value_enum, default_value_t = PipelineArg::Auto)]
    pipeline: PipelineArg,
    /// Skip the warm-up: the first forwards then pay for kernel compilation inside the
    /// reported prefill.
    #[arg(long)]
    no_warm_up: bool,
}

/// The sampler of `--temperature` and `--top-p`, checked whatever the temperature.
pub fn sampler(temperature: f32, top_p: f32, seed: u64) -> Result<Sampler> {
    if !(top_p > 0.0 && top_p <= 1.0) {
        bail!("--top-p must be in (0, 1], got {top_p}");
    }
    if !(temperature.is_finite() && temperature >= 0.0) {
        bail!("--temperature must be >= 0, got {temperature}");
    }
    Ok(Sampler::top_p(temperature, top_p, seed)?)
}

pub fn main(a: Args) -> Result<()> {
    // Everything that can be checked without the weights, first.
    let sampler = sampler(a.temperature, a.top_p, a.seed)?;
    if a.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    if a.prefill_chunk == 0 {
        bail!("--prefill-chunk must be at least 1");
    }
    if a.prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    // The documented MLX_AOT_* execution options, read once, here at the edge.
    let exec = ExecOptions::from_env()?;
    // Before anything touches MLX: a threaded pipeline needs every array on the shared stream.
    let pipeline = a.pipeline.prepare()?;
    let model = match &a.model {
        Some(m) => m.clone(),
        None => crate::synth::default_model()?,
    };
    let dir = ModelDir::open(&model)?;
    let layout = dir.kv_layout(a.kv)?;
    let tokenizer = Tokenizer::open(&dir.dir)?;
    let prompt = if a.chat {
        let text = tokenizer.chat_prompt(&a.prompt)?;
        tokenizer.encode(&text, false)?
    } else {
        tokenizer.encode(&a.prompt, true)?
    };
    if prompt.is_empty() {
        bail!("the prompt tokenizes to no tokens");
    }
    generate::check_tokens(&prompt, dir.config.vocab_size())?;

    // The memory plan, before anything is allocated: the one admission every family
    // takes, on the plan the load then uses.
    let resolved = dir.resolve(layout.clone())?;
    let usable = memory::device_usable()?;
    let context = (prompt.len() + a.max_tokens) as u64;
    let memory_plan = resolved
        .memory_model(a.prefill_chunk)
        .admit(context, 1, usable)?;
    tracing::info!(
        "memory plan: {} of {} usable for {context} tokens",
        figures::bytes(memory_plan.total),
        figures::bytes(usable)
    );

    let loaded = dir.load(resolved, exec)?;
    let stop_tokens = if a.ignore_eos {
        Vec::new()
    } else {
        dir.stop_tokens(loaded.eos_token_ids(), &tokenizer)?
    };
    let lm = model_dir::select(loaded.clone(), &a.implementation)?;
    let mut caches = loaded.as_ref().float_caches(1);
    let opts = GenerateOptions {
        max_tokens: a.max_tokens,
        sampler,
        stop_tokens,
        prefill_chunk: a.prefill_chunk,
        kv_layout: layout,
        pipeline,
        memory_limit: None,
    };

    // The first forwards of a process compile kernels (seconds on the CPU, a minute or
    // more on CUDA): run them on scratch caches first and report them apart.
    let cold_start = if a.no_warm_up {
        None
    } else {
        let progress = std::io::stderr().is_terminal();
        if progress {
            eprint!("warming up (the first forwards compile their kernels) ...");
        }
        let took = generate::warm_up(lm.as_ref(), &prompt, &opts)?;
        if progress {
            eprint!("\r\x1b[K");
        }
        Some(took)
    };

    let mut stdout = std::io::stdout().lock();
    let mut detok = Detokenizer::new(&tokenizer);
    let mut failure: Option<anyhow::Error> = None;
    let (_, stats) = generate::generate(lm.as_ref(), &mut caches, &prompt, &opts, |id| {
        let written = detok.push(id).and_then(|text| {
            stdout.write_all(text.as_bytes())?;
            Ok(stdout.flush()?)
        });
        match written {
            Ok(()) => Flow::Continue,
            Err(e) => {
                failure = Some(e);
                Flow::Stop
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    let rest = detok.finish()?;
    write!(stdout, "{rest}\n{}\n", figures::line(&stats, cold_start))?;
    stdout.flush()?;
    Ok(())
}
