//! Generation: chunked prefill, the decode loop, sampling, stop tokens, the kv policy
//! before every forward, and per-phase timings. Also the teacher-forced logits walk that
//! parity work and bug reports use.

use std::time::{Duration, Instant};

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Dtype};

use crate::cache::AnyCache;
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::kv_policy;
use crate::model::LanguageModel;
use crate::sampling::Sampler;
use crate::submitter::Submitter;

/// mlx-lm's default prefill chunk.
pub const DEFAULT_PREFILL_CHUNK: usize = 2048;

/// How to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Token choice.
    pub sampler: Sampler,
    /// Tokens that end generation (not emitted).
    pub stop_tokens: Vec<u32>,
    /// Prompt tokens per prefill forward.
    pub prefill_chunk: usize,
    /// Which caches to quantize once they hold tokens (float layout: none).
    pub kv_layout: KvLayout,
    /// How decode steps overlap.
    pub pipeline: Pipeline,
    /// Bytes the device may use: when given, a request whose prompt plus `max_tokens`
    /// exceeds the memory plan's largest safe context is refused before any work
    /// ([`crate::memory::MemoryModel::admit`], the one admission every family takes).
    pub memory_limit: Option<u64>,
}

/// How the decode loop overlaps building a step with evaluating the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipeline {
    /// Build a step, evaluate it, read its token, then build the next.
    Off,
    /// Build step t+1's graph (from the not yet computed token of step t) and queue it
    /// before reading token t, as mlx-lm's `async_eval` loop does. One thread builds and
    /// submits, so the host's two costs add up.
    Ahead,
    /// As [`Pipeline::Ahead`], with the submitting and reading done by a second thread
    /// ([`crate::submitter`]): step t+1 is built while step t is submitted. Needs
    /// [`crate::stream::share_default`] on the calling thread before the model's first
    /// step. The same graphs are evaluated in the same order as with `Ahead`.
    Threaded,
}

/// What the caller wants after each token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep going.
    Continue,
    /// Stop now.
    Stop,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A stop token was produced.
    StopToken,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The caller asked to stop.
    Caller,
}

/// Figures of one generation.
#[derive(Debug, Clone)]
pub struct GenerationStats {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens (emitted).
    pub generated_tokens: usize,
    /// Time of the whole prefill, first token included.
    pub prefill: Duration,
    /// Time from the start to the first generated token.
    pub time_to_first_token: Duration,
    /// Time of the decode steps after the first token.
    pub decode: Duration,
    /// Forwards of the prefill: the chunks of every prompt token but the last, then the
    /// last token's step.
    pub prefill_forwards: usize,
    /// Decode steps run (forwards after the prefill).
    pub decode_steps: usize,
    /// MLX peak memory over the run, bytes.
    pub peak_memory: usize,
    /// The implementation that ran.
    pub implementation: String,
    /// Forwards that took the generated fast path.
    pub fast_path_calls: u64,
    /// Why it ended.
    pub stop: StopReason,
}

impl GenerationStats {
    /// Prompt tokens per second of the prefill.
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    /// Decode steps per second.
    pub fn decode_tok_s(&self) -> f64 {
        self.decode_steps as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// Refuses an empty prompt or one with ids outside the model's vocabulary: what every
/// way into a prefill checks first.
pub(crate) fn check_prompt(model: &dyn LanguageModel, prompt: &[u32]) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::Request("the prompt is empty".into()));
    }
    check_tokens(prompt, model.loaded().vocab_size())
}

/// Checks token ids against the vocabulary.
pub fn check_tokens(tokens: &[u32], vocab: usize) -> Result<()> {
    if let Some((i, t)) = tokens
        .iter()
        .enumerate()
        .find(|&(_, &t)| t as usize >= vocab)
    {
        return Err(Error::Request(format!(
            "token {t} at position {i} is outside the vocabulary (0..{vocab})"
        )));
    }
    Ok(())
}

fn row(tokens: &[u32]) -> Array {
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    Array::from_slice(&ids, &[1, ids.len() as i32])
}

/// The last position's logits `[B, vocab]`.
pub(crate) fn last(logits: &Array) -> Result<Array> {
    Ok(logits.try_index((.., -1, ..))?)
}

/// Runs the shapes a [`generate`] of `prompt` starts with, on scratch caches that are
/// dropped after: the first prefill chunk, the last prompt token's step and one decode
/// step, each evaluated. What the first forwards of a process pay once (MLX compiling
/// its kernels and the compiled stages tracing) is then not counted as prefill.
/// Returns how long it took.
pub fn warm_up(
    model: &dyn LanguageModel,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> Result<Duration> {
    check_prompt(model, prompt)?;
    let start = Instant::now();
    let mut caches = model.loaded().float_caches(1);
    let filled = &prompt[..prompt.len() - 1];
    let chunk = opts.prefill_chunk.max(1);
    let mut steps: Vec<&[u32]> = Vec::new();
    if !filled.is_empty() {
        steps.push(&filled[..filled.len().min(chunk)]);
    }
    let last_token = &prompt[prompt.len() - 1..];
    steps.push(last_token);
    steps.push(last_token);
    for part in steps {
        kv_policy::apply(&mut caches, &opts.kv_layout)?;
        let logits = model.forward(&row(part), &mut caches)?;
        let mut arrays: Vec<&Array> = caches.iter().flat_map(AnyCache::arrays).collect();
        arrays.push(&logits);
        mlx_rs::transforms::eval(arrays)?;
    }
    Ok(start.elapsed())
}

/// Generates from `prompt` (batch 1) on `caches`, calling `on_token` with each token.
pub fn generate(
    model: &dyn LanguageModel,
    caches: &mut [AnyCache],
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: impl FnMut(u32) -> Flow,
) -> Result<(Vec<u32>, GenerationStats)> {
    check_prompt(model, prompt)?;
    if opts.pipeline == Pipeline::Threaded {
        // Refused before any work rather than after the prefill.
        Submitter::check_thread()?;
    }
    admit(model, prompt, opts)?;
    let fast_before = model.fast_path_calls();
    mlx_rs::memory::reset_peak_memory()?;
    let start = Instant::now();
    let prefill_forwards = (prompt.len() - 1).div_ceil(opts.prefill_chunk.max(1)) + 1;
    let next = prefill(model, caches, prompt, opts)?;
    let prefill = start.elapsed();

    let mut out = Vec::new();
    let mut steps = 0usize;
    let decode_start = Instant::now();
    // A scope that spawns no thread costs nothing: every pipeline goes through it.
    let stop = std::thread::scope(|scope| {
        let submitter = match opts.pipeline {
            Pipeline::Threaded => Some(Submitter::start(scope)?),
            Pipeline::Off | Pipeline::Ahead => None,
        };
        decode(
            model,
            caches,
            opts,
            next,
            &mut out,
            &mut steps,
            submitter.as_ref(),
            on_token,
        )
    })?;
    let stats = GenerationStats {
        prompt_tokens: prompt.len(),
        generated_tokens: out.len(),
        prefill,
        time_to_first_token: prefill,
        decode: decode_start.elapsed(),
        prefill_forwards,
        decode_steps: steps,
        peak_memory: mlx_rs::memory::peak_memory()?,
        implementation: model.implementation().to_owned(),
        fast_path_calls: model.fast_path_calls() - fast_before,
        stop,
    };
    Ok((out, stats))
}

/// Refuses `prompt` plus `opts.max_tokens` beyond the memory plan when `opts` gives the
/// usable bytes.
pub(crate) fn admit(
    model: &dyn LanguageModel,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> Result<()> {
    if let Some(usable) = opts.memory_limit {
        let context = prompt.len() + opts.max_tokens;
        model
            .loaded()
            .memory_model(opts.prefill_chunk)
            .admit(context as u64, 1, usable)?;
    }
    Ok(())
}

/// Prefills a non-empty `prompt` (batch 1) as mlx-lm's generate_step does: every prompt
/// token but the last only fills the caches, in chunks (their logits are never
/// evaluated, so no head runs over them); the last token is a single-token step, whose
/// logits give the first token (sampled at step 0, evaluated).
pub(crate) fn prefill(
    model: &dyn LanguageModel,
    caches: &mut [AnyCache],
    prompt: &[u32],
    opts: &GenerateOptions,
) -> Result<Array> {
    let mut done = 0;
    loop {
        if let Some(next) = prefill_part(model, caches, prompt, &mut done, opts)? {
            return Ok(next);
        }
    }
}

/// One forward of a prefill that has put `done` of `prompt`'s tokens into `caches`: the
/// next `prefill_chunk` tokens but the last (evaluated into the caches), advancing `done`;
/// or, when only the last is left, that token and the first sampled token (evaluated),
/// returned. [`prefill`] is these parts in a row; a scheduler may run other work between
/// them (the parts, and so the bytes, are the same).
pub(crate) fn prefill_part(
    model: &dyn LanguageModel,
    caches: &mut [AnyCache],
    prompt: &[u32],
    done: &mut usize,
    opts: &GenerateOptions,
) -> Result<Option<Array>> {
    let filled = prompt.len() - 1;
    kv_policy::apply(caches, &opts.kv_layout)?;
    if *done < filled {
        let end = (*done + opts.prefill_chunk.max(1)).min(filled);
        model.forward(&row(&prompt[*done..end]), caches)?;
        let arrays: Vec<&Array> = caches.iter().flat_map(AnyCache::arrays).collect();
        mlx_rs::transforms::eval(arrays)?;
        *done = end;
        return Ok(None);
    }
    let logits = model.forward(&row(&prompt[filled..]), caches)?;
    let next = opts.sampler.sample(&last(&logits)?, 0)?;
    next.eval()?;
    Ok(Some(next))
}

/// The decode loop after the prefill: `first` is the evaluated first token; tokens go to
/// `out`, steps run are counted in `steps`.
#[allow(clippy::too_many_arguments)]
fn decode(
    model: &dyn LanguageModel,
    caches: &mut [AnyCache],
    opts: &GenerateOptions,
    first: Array,
    out: &mut Vec<u32>,
    steps: &mut usize,
    submitter: Option<&Submitter<'_>>,
    mut on_token: impl FnMut(u32) -> Flow,
) -> Result<StopReason> {
    // The step after `token`: its graph only, not evaluated.
    let mut step = |token: &Array, steps: &mut usize| -> Result<Array> {
        kv_policy::apply(caches, &opts.kv_layout)?;
        let logits = model.forward(&token.reshape(&[1, 1])?, caches)?;
        *steps += 1;
        opts.sampler.sample(&last(&logits)?, *steps as u64)
    };
    let mut next = first;
    // With a submit thread every `next` goes to it, which reads it (the first one is
    // already evaluated; reading it there keeps one path).
    if let Some(s) = submitter {
        s.send(&next)?;
    }
    loop {
        // With pipelining the next step is built, and queued, before this token is read.
        let ahead = if opts.pipeline != Pipeline::Off && out.len() + 1 < opts.max_tokens {
            let n = step(&next, steps)?;
            if opts.pipeline == Pipeline::Ahead {
                mlx_rs::transforms::async_eval([&n])?;
            }
            Some(n)
        } else {
            None
        };
        let token = match submitter {
            Some(s) => s.token()?,
            None => read_token(&next)?,
        };
        if opts.stop_tokens.contains(&token) {
            return Ok(StopReason::StopToken);
        }
        out.push(token);
        if on_token(token) == Flow::Stop {
            return Ok(StopReason::Caller);
        }
        if out.len() >= opts.max_tokens {
            return Ok(StopReason::MaxTokens);
        }
        next = match ahead {
            Some(n) => n,
            None => {
                let n = step(&next, steps)?;
                n.eval()?;
                n
            }
        };
        if let Some(s) = submitter {
            s.send(&next)?;
        }
    }
}

/// The sampled token `token` holds, waiting for it. Reads `token` itself, not a slice of
/// it: a new op would be queued behind the step sent ahead, and on a GPU stream (in
/// order) waiting on it would wait for that whole step too, which undoes the pipelining.
pub(crate) fn read_token(token: &Array) -> Result<u32> {
    token
        .try_item_exact::<u32>()
        .map_err(|e| Error::Request(format!("reading the sampled token: {e}")))
}

/// Teacher-forced logits: the first `prefill` tokens of every row as one forward, then
/// each remaining token as a single-token step, the kv policy applied before every
/// forward. Returns float32 `[B, T, vocab]` (every position) and how many forwards took
/// the fast path. Rows must have equal length.
pub fn logits_walk(
    model: &dyn LanguageModel,
    caches: &mut [AnyCache],
    rows: &[Vec<u32>],
    prefill: usize,
    kv_layout: &KvLayout,
) -> Result<Array> {
    let len = rows.first().map_or(0, Vec::len);
    if len == 0 || rows.iter().any(|r| r.len() != len) {
        return Err(Error::Request(
            "token rows must be non-empty and of equal length".into(),
        ));
    }
    if prefill == 0 || prefill > len {
        return Err(Error::Request(format!(
            "prefill must be in 1..={len}, got {prefill}"
        )));
    }
    let vocab = model.loaded().vocab_size();
    for r in rows {
        check_tokens(r, vocab)?;
    }
    let batch = |from: usize, to: usize| -> Array {
        let ids: Vec<i32> = rows
            .iter()
            .flat_map(|r| r[from..to].iter().map(|&t| t as i32))
            .collect();
        Array::from_slice(&ids, &[rows.len() as i32, (to - from) as i32])
    };
    let mut parts = Vec::with_capacity(len - prefill + 1);
    kv_policy::apply(caches, kv_layout)?;
    let l = model
        .forward(&batch(0, prefill), caches)?
        .as_dtype(Dtype::Float32)?;
    l.eval()?;
    parts.push(l);
    for t in prefill..len {
        kv_policy::apply(caches, kv_layout)?;
        let l = model
            .forward(&batch(t, t + 1), caches)?
            .as_dtype(Dtype::Float32)?;
        l.eval()?;
        parts.push(l);
    }
    Ok(mlx_rs::ops::concatenate(&parts, 1)?)
}
