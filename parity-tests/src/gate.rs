//! The parity gate: for a registered generated model, the generated forward and the
//! monolith run the same steps on identical caches, and their logits must be equal byte
//! for byte at every step; the fast-path counter must show the generated code ran
//! exactly when its guard should let it.
//!
//! Per model, weights and seed: (1) a prefill on float caches (models generated for
//! quantized caches fall back, models generated for float caches take the fast path);
//! (2) caches converted per the kv layout, a prefill chunk longer than the sliding
//! window, then single-token decode steps across the ring wrap; (3) one cache of another
//! signature: the guard refuses, the monolith runs, the bits are the same; (4) batch 2
//! with different prompts.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use runtime::cache::AnyCache;
use runtime::fingerprint::Fingerprint;
use runtime::kv_layout::KvLayout;
use runtime::kv_policy;
use runtime::mlx_rs::{Array, Dtype};
use runtime::model::{AnyConfig, LanguageModel, Loaded};
use runtime::options::ExecOptions;
use runtime::quantization::QuantSpec;
use runtime::registry::Implementation;
use runtime::synth::SynthOptions;

use crate::error::{Context, Error, Result};

/// Weights a gate run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    /// Float weights (bf16; float32 for MoE models, whose CPU `gather_mm` needs it).
    Float,
    /// Affine 4-bit group 64 (the MoE router at 8 bits).
    Q4,
}

impl fmt::Display for Weights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Weights::Float => "float",
            Weights::Q4 => "4-bit",
        })
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// Real published shapes (random weights) instead of the shrunk twin.
    pub full: bool,
    /// Weight kinds, each with the seed of its weights and tokens.
    pub cases: Vec<(Weights, u64)>,
    /// Lengths of the first (float) prefill.
    pub prompt_lens: Vec<usize>,
    /// Single-token decode steps after the second prefill; `None` = 2 × window + 2.
    pub decode_steps: Option<usize>,
    /// Length of the second prefill; `None` = window + 3 (it crosses the window).
    pub second_prefill: Option<usize>,
    /// Whether to run the batch-2 phase.
    pub batch2: bool,
    /// Whether to run the phase of rows of different lengths (continuous batching) on
    /// the models whose caches all grow.
    pub ragged: bool,
    /// Whether to run the phase with a cache of another signature (it needs quantized
    /// caches, whose attention MLX 0.32.2's CUDA backend lacks kernels for).
    pub altered: bool,
    /// How both sides execute (the same options for the monolith and the generated
    /// model).
    pub exec: ExecOptions,
    /// Pit the monolith against a second monolith instead of the generated model: on a
    /// backend where the gate fails, this tells whether the backend is deterministic at
    /// all (two runs of the same graph, same bytes). The fast-path counter is not checked
    /// then.
    pub self_check: bool,
}

impl GateOptions {
    /// The gate CI runs on every registered model's twin.
    pub fn twins() -> Self {
        GateOptions {
            full: false,
            cases: vec![(Weights::Float, 1), (Weights::Q4, 2)],
            prompt_lens: vec![5, 21],
            decode_steps: None,
            second_prefill: None,
            batch2: true,
            ragged: true,
            altered: true,
            exec: ExecOptions::default(),
            self_check: false,
        }
    }
}

/// What one model's gate compared.
#[derive(Debug, Clone, Default)]
pub struct ModelReport {
    /// Implementation id.
    pub id: String,
    /// Its fingerprint.
    pub fingerprint: String,
    /// Steps the generated model ran on its fast path: generated code against the
    /// monolith, comparisons that can fail.
    pub fast_path: u64,
    /// Logit bytes compared on fast-path steps.
    pub fast_bytes: u64,
    /// Steps where its guard sent the call to the monolith: the guard's decision is
    /// checked, but the logits are the monolith's on both sides.
    pub fallbacks: u64,
    /// Logit bytes compared on fallback steps.
    pub fallback_bytes: u64,
    /// Steps over caches nothing runs on, where the guard refused and both sides failed
    /// with the monolith's error (the MLA family's phase 3).
    pub refusals: u64,
    /// Of the fast-path steps, those over rows of different lengths (phase 5).
    pub ragged: u64,
    /// Wall time.
    pub elapsed: Duration,
}

/// The gate's summary over models.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One row per model.
    pub models: Vec<ModelReport>,
    /// The runs pitted the monolith against a second monolith
    /// ([`GateOptions::self_check`]): a determinism check, not parity evidence.
    pub self_check: bool,
}

impl Report {
    /// The sums over models.
    pub fn total(&self) -> ModelReport {
        let mut total = ModelReport::default();
        for m in &self.models {
            total.fast_path += m.fast_path;
            total.fast_bytes += m.fast_bytes;
            total.fallbacks += m.fallbacks;
            total.fallback_bytes += m.fallback_bytes;
            total.refusals += m.refusals;
            total.ragged += m.ragged;
            total.elapsed += m.elapsed;
        }
        total
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        if self.self_check {
            writeln!(
                f,
                "self-check: monolith == a second monolith byte for byte over {} models \
                 (a determinism check of the backend, not parity evidence)",
                self.models.len()
            )?;
        } else {
            writeln!(
                f,
                "parity gate: generated == monolith byte for byte on {} fast-path steps ({} logit \
             bytes) over {} models",
                total.fast_path,
                total.fast_bytes,
                self.models.len()
            )?;
        }
        writeln!(
            f,
            "(and {} fallback steps, {} bytes, where the guard sent both sides to the monolith: \
             the guard's decision is checked there, the bytes cannot differ; and {} refusals \
             over caches nothing runs on, where both sides failed with the monolith's error)",
            total.fallbacks, total.fallback_bytes, total.refusals
        )?;
        writeln!(
            f,
            "{:<32} {:<16} {:>9} {:>13} {:>7} {:>9} {:>13} {:>8}",
            "model",
            "fingerprint",
            "fast",
            "fast bytes",
            "ragged",
            "fallback",
            "fallback bytes",
            "time"
        )?;
        let rows = self
            .models
            .iter()
            .map(|m| (m.id.as_str(), m.fingerprint.as_str(), m));
        let sum = format!("{} models", self.models.len());
        for (id, fingerprint, m) in rows.chain(std::iter::once((sum.as_str(), "", &total))) {
            writeln!(
                f,
                "{:<32} {:<16} {:>9} {:>13} {:>7} {:>9} {:>13} {:>7.1}s",
                id,
                fingerprint,
                m.fast_path,
                m.fast_bytes,
                m.ragged,
                m.fallbacks,
                m.fallback_bytes,
                m.elapsed.as_secs_f64()
            )?;
        }
        Ok(())
    }
}

/// The workspace root: `MLX_AOT_ROOT` if set (a binary run away from the checkout it
/// was built in), else parity-tests' parent.
pub fn workspace_root() -> PathBuf {
    match std::env::var_os("MLX_AOT_ROOT") {
        Some(root) => PathBuf::from(root),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .to_owned(),
    }
}

/// The preset config and kv layout an implementation was generated from.
pub fn preset_of(imp: &Implementation) -> Result<(AnyConfig, KvLayout)> {
    let dir = workspace_root().join(imp.source);
    let config = AnyConfig::from_file(&dir.join("config.json"))
        .at(|| format!("{}: its preset config", imp.id))?;
    let kv = dir.join("kv_config.json");
    let layout = if kv.exists() {
        KvLayout::from_file(&kv).at(|| format!("{}: its kv layout", imp.id))?
    } else {
        KvLayout::float()
    };
    Ok((config, layout))
}

/// Deterministic tokens in `0..vocab`.
pub fn tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

/// The generated model and the monolith over one loaded model.
struct Pair {
    model: Loaded,
    generated: Box<dyn LanguageModel>,
    monolith: Box<dyn LanguageModel>,
    /// `generated` is a second monolith ([`self_check`]): its fast-path counter is not
    /// checked.
    self_check: bool,
}

/// One gate run's state: counts and where we are, for failure messages.
struct Run<'a> {
    pair: &'a Pair,
    report: &'a mut ModelReport,
    context: String,
    /// When set (full-shape runs, which take minutes to hours on a CPU), each phase and
    /// every 64th decode step print a line with the time since this instant.
    progress: Option<Instant>,
}

impl Run<'_> {
    /// Runs one forward on both over caches nothing can run on: the generated model's
    /// guard must refuse them (the fast-path counter stays) and hand the call to the
    /// monolith, so both fail with the monolith's error, word for word.
    fn refused(
        &mut self,
        what: &str,
        tokens: &Array,
        a: &mut [AnyCache],
        b: &mut [AnyCache],
    ) -> Result<()> {
        let context = format!("{}: {what}", self.context);
        let before = self.pair.generated.fast_path_calls();
        let ours = self.pair.generated.forward(tokens, b);
        let moved = self.pair.generated.fast_path_calls() - before;
        let reference = self.pair.monolith.forward(tokens, a);
        if moved != 0 && !self.pair.self_check {
            return Err(Error::Guard {
                context,
                moved,
                expected: 0,
                verdict: "should refuse",
            });
        }
        match (ours, reference) {
            (Err(x), Err(y)) if x.to_string() == y.to_string() => {
                self.report.refusals += 1;
                Ok(())
            }
            (x, y) => Err(Error::Refusal {
                context,
                generated: x.err().map_or("ran".into(), |e| e.to_string()),
                monolith: y.err().map_or("ran".into(), |e| e.to_string()),
            }),
        }
    }

    /// Runs one forward on both, compares bytes, checks the fast-path counter moved by
    /// `fast` (0 or 1).
    fn step(
        &mut self,
        what: &str,
        tokens: &Array,
        a: &mut [AnyCache],
        b: &mut [AnyCache],
        fast: bool,
    ) -> Result<()> {
        let before = self.pair.generated.fast_path_calls();
        let ours = self
            .pair
            .generated
            .forward(tokens, b)
            .at(|| format!("{}: {what}: generated", self.context))?;
        let reference = self
            .pair
            .monolith
            .forward(tokens, a)
            .at(|| format!("{}: {what}: monolith", self.context))?;
        let moved = self.pair.generated.fast_path_calls() - before;
        if moved != u64::from(fast) && !self.pair.self_check {
            return Err(Error::Guard {
                context: format!("{}: {what}", self.context),
                moved,
                expected: u64::from(fast),
                verdict: if fast { "should pass" } else { "should refuse" },
            });
        }
        let context = || format!("{}: {what}", self.context);
        let (x, y) = (
            f32_bytes(&ours).at(context)?,
            f32_bytes(&reference).at(context)?,
        );
        if x.len() != y.len() {
            return Err(Error::Shape {
                context: context(),
                generated: ours.shape().to_vec(),
                monolith: reference.shape().to_vec(),
            });
        }
        if let Some(i) = x
            .iter()
            .zip(&y)
            .position(|(p, q)| p.to_bits() != q.to_bits())
        {
            let vocab = ours.dim(-1) as usize;
            let max = x
                .iter()
                .zip(&y)
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            return Err(Error::Mismatch {
                context: context(),
                row: i / vocab,
                token: i % vocab,
                generated: x[i],
                monolith: y[i],
                max_diff: max,
            });
        }
        let bytes = 4 * x.len() as u64;
        if fast {
            self.report.fast_path += 1;
            self.report.fast_bytes += bytes;
        } else {
            self.report.fallbacks += 1;
            self.report.fallback_bytes += bytes;
        }
        let steps = self.report.fast_path + self.report.fallbacks;
        if let Some(start) = self.progress
            && (!what.starts_with("decode step") || steps.is_multiple_of(64))
        {
            eprintln!(
                "  {what}: equal ({steps} steps so far, {:.0} s)",
                start.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }
}

/// The bit patterns of `logits` as float32, flattened: what "byte for byte" compares.
pub fn logit_bits(logits: &Array) -> runtime::error::Result<Vec<u32>> {
    Ok(f32_bytes(logits)?.iter().map(|v| v.to_bits()).collect())
}

fn f32_bytes(logits: &Array) -> runtime::error::Result<Vec<f32>> {
    let l = logits
        .as_dtype(Dtype::Float32)
        .and_then(|l| l.flatten(None, None))?;
    l.eval()?;
    Ok(l.as_slice::<f32>().to_vec())
}

fn batch(rows: &[Vec<u32>], from: usize, to: usize) -> Array {
    let ids: Vec<i32> = rows
        .iter()
        .flat_map(|r| r[from..to].iter().map(|&t| t as i32))
        .collect();
    Array::from_slice(&ids, &[rows.len() as i32, (to - from) as i32])
}

fn cloned(caches: &[AnyCache]) -> Vec<AnyCache> {
    caches.to_vec()
}

/// Builds the pair for `imp` with `weights` and `seed` (twin unless `full`).
fn pair(
    imp: &Implementation,
    config: &AnyConfig,
    layout: &KvLayout,
    weights: Weights,
    seed: u64,
    opts: &GateOptions,
) -> Result<Pair> {
    let dtype = if weights == Weights::Float && config.has_moe() {
        Dtype::Float32
    } else {
        Dtype::Bfloat16
    };
    let quant = (weights == Weights::Q4).then_some(QuantSpec {
        bits: 4,
        group_size: 64,
    });
    let context = || format!("{} {weights} seed {seed}", imp.id);
    let (tensors, qmap) = config
        .random_tensors(SynthOptions { seed, quant }, dtype)
        .at(|| format!("{}: random weights", context()))?;
    let config = config.with_quantization(qmap);
    let model = Loaded::from_tensors(config, layout.clone(), opts.exec, tensors)
        .at(|| format!("{}: loading", context()))?;
    let fingerprint = Fingerprint::of(model.plan()).short();
    if fingerprint != imp.fingerprint {
        return Err(Error::Stale {
            id: imp.id.to_owned(),
            weights: weights.to_string(),
            plan: fingerprint,
            module: imp.fingerprint.to_owned(),
        });
    }
    let self_check = opts.self_check;
    let generated = if self_check {
        model.monolith()
    } else {
        imp.construct_on(&model)
            .at(|| format!("{}: constructing", context()))?
    };
    Ok(Pair {
        generated,
        monolith: model.monolith(),
        model,
        self_check,
    })
}

/// A cache list of another signature than the plan's, for phase (3).
enum Altered {
    /// The monolith runs on it (a quantized cache where float is planned, or other bits).
    Runnable(Vec<AnyCache>),
    /// Nothing runs on it (an MLA latent cache without the indexer keys its layer
    /// needs): the guard must refuse, and the fallback's error is the monolith's.
    Unrunnable(Vec<AnyCache>),
}

/// Float `caches` after the kv policy, but with one cache of another signature: an
/// 8-bit cache where 4-bit is expected (or 4 where 8), or a quantized one where the
/// layout keeps float; for the MLA family's latent caches, which have no quantized kind,
/// cache 0 without its indexer keys.
fn altered(caches: &[AnyCache], layout: &KvLayout) -> runtime::error::Result<Altered> {
    if let Some(AnyCache::Mla(c)) = caches.first() {
        let mut out = cloned(caches);
        let geometry = runtime::cache::MlaGeometry {
            index: None,
            ..c.geometry()
        };
        out[0] = AnyCache::Mla(runtime::cache::MlaCache::new(geometry));
        return Ok(Altered::Unrunnable(out));
    }
    let (index, spec) = match layout.entries().next() {
        Some(e) => (
            e.cache,
            QuantSpec {
                bits: if e.quant.bits == 8 { 4 } else { 8 },
                ..e.quant
            },
        ),
        None => (
            0,
            QuantSpec {
                bits: 4,
                group_size: 64,
            },
        ),
    };
    let mut out = cloned(caches);
    kv_policy::apply(&mut out, &layout.clone().with_entry(index, spec))?;
    Ok(Altered::Runnable(out))
}

/// Runs the gate for one implementation.
pub fn run(imp: &Implementation, opts: &GateOptions) -> Result<ModelReport> {
    let start = Instant::now();
    let (preset, layout) = preset_of(imp)?;
    let config = if opts.full { preset } else { preset.twin() };
    // Families without a window take the twins' 16 as the length scale of the phases.
    let window = config.sliding_window().unwrap_or(16);
    let vocab = config.vocab_size();
    let decode_steps = opts.decode_steps.unwrap_or(2 * window + 2);
    let second = opts.second_prefill.unwrap_or(window + 3);
    let mut report = ModelReport {
        id: imp.id.to_owned(),
        fingerprint: imp.fingerprint.to_owned(),
        ..Default::default()
    };
    for &(weights, seed) in &opts.cases {
        let pair = pair(imp, &config, &layout, weights, seed, opts)?;
        if opts.full {
            eprintln!(
                "  {weights} weights, seed {seed}, ready ({:.0} s)",
                start.elapsed().as_secs_f64()
            );
        }
        let plan = pair.model.plan();
        let float_fast = plan.cache_signatures() == plan.with_float_caches().cache_signatures();
        for &prompt in &opts.prompt_lens {
            let rows = vec![tokens(
                seed * 1000 + prompt as u64,
                prompt + second + decode_steps,
                vocab,
            )];
            let mut run = Run {
                pair: &pair,
                report: &mut report,
                context: format!("{} {weights} seed {seed} prompt {prompt}", imp.id),
                progress: opts.full.then_some(start),
            };
            let mut a = pair.model.as_ref().float_caches(1);
            let mut b = cloned(&a);
            // (1) The first prefill runs on float caches.
            run.step(
                "float prefill",
                &batch(&rows, 0, prompt),
                &mut a,
                &mut b,
                float_fast,
            )?;
            // The float caches as the prefill left them, for phase (3).
            let float_caches = cloned(&a);
            // (2) Converted caches, a prefill across the window, decode across the wrap.
            for c in [&mut a, &mut b] {
                kv_policy::apply(c, &layout).at(|| format!("{}: kv policy", run.context))?;
            }
            let end = prompt + second;
            run.step(
                "prefill across the window",
                &batch(&rows, prompt, end),
                &mut a,
                &mut b,
                true,
            )?;
            for t in end..end + decode_steps {
                for c in [&mut a, &mut b] {
                    kv_policy::apply(c, &layout).at(|| format!("{}: kv policy", run.context))?;
                }
                run.step(
                    &format!("decode step {}", t - end),
                    &batch(&rows, t, t + 1),
                    &mut a,
                    &mut b,
                    true,
                )?;
            }
            // (3) A cache of another signature: the guard refuses, the bits agree.
            if opts.altered {
                let tokens = batch(&rows, end, end + 1);
                match altered(&float_caches, &layout)
                    .at(|| format!("{}: altered caches", run.context))?
                {
                    Altered::Runnable(alter) => {
                        let (mut a2, mut b2) = (cloned(&alter), alter);
                        run.step("altered cache signature", &tokens, &mut a2, &mut b2, false)?;
                    }
                    Altered::Unrunnable(alter) => {
                        let (mut a2, mut b2) = (cloned(&alter), alter);
                        run.refused("altered cache signature", &tokens, &mut a2, &mut b2)?;
                    }
                }
            }
        }
        if opts.batch2 {
            // (4) Two rows with different prompts.
            let n = opts.prompt_lens.iter().copied().max().unwrap_or(8);
            let rows = vec![
                tokens(seed * 7 + 1, n + 6, vocab),
                tokens(seed * 7 + 2, n + 6, vocab),
            ];
            let mut run = Run {
                pair: &pair,
                report: &mut report,
                context: format!("{} {weights} seed {seed} batch 2", imp.id),
                progress: opts.full.then_some(start),
            };
            let mut a = pair.model.as_ref().float_caches(2);
            let mut b = cloned(&a);
            run.step(
                "float prefill",
                &batch(&rows, 0, n),
                &mut a,
                &mut b,
                float_fast,
            )?;
            for t in n..n + 6 {
                for c in [&mut a, &mut b] {
                    kv_policy::apply(c, &layout).at(|| format!("{}: kv policy", run.context))?;
                }
                run.step(
                    &format!("decode step {}", t - n),
                    &batch(&rows, t, t + 1),
                    &mut a,
                    &mut b,
                    true,
                )?;
            }
        }
        if opts.ragged {
            ragged(
                &pair,
                &mut report,
                &layout,
                imp,
                weights,
                seed,
                vocab,
                start,
                opts,
            )?;
        }
    }
    report.elapsed = start.elapsed();
    if report.fast_path == 0 && !opts.self_check {
        return Err(Error::NoFastPath {
            id: imp.id.to_owned(),
        });
    }
    Ok(report)
}

/// (5) Rows of different lengths in one batch, as a server runs them: three rows
/// prefilled alone (5, 9 and 3 tokens), the first two joined (left-padded) for four
/// single-token steps, the third joining for four more, then the first leaving for four
/// more. Every step on the fast path, byte for byte. Only where every cache can hold
/// rows of different lengths (growing caches, float rings); elsewhere nothing runs.
#[allow(clippy::too_many_arguments)]
fn ragged(
    pair: &Pair,
    report: &mut ModelReport,
    layout: &KvLayout,
    imp: &Implementation,
    weights: Weights,
    seed: u64,
    vocab: usize,
    start: Instant,
    opts: &GateOptions,
) -> Result<()> {
    use runtime::cache::ragged::{batchable, join, keep_rows};
    let context = format!("{} {weights} seed {seed} ragged rows", imp.id);
    let lens = [5usize, 9, 3];
    let rows: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(r, &n)| tokens(seed * 31 + r as u64, n + 12, vocab))
        .collect();
    // Each row's prefill alone, then the kv policy, as a server's prefill leaves it.
    let mut alone = Vec::new();
    for (r, &n) in lens.iter().enumerate() {
        let mut caches = pair.model.as_ref().float_caches(1);
        pair.monolith
            .forward(&batch(&rows[r..r + 1], 0, n), &mut caches)
            .at(|| format!("{context}: prefill of row {r}"))?;
        kv_policy::apply(&mut caches, layout).at(|| format!("{context}: kv policy"))?;
        alone.push(caches);
    }
    if !batchable(&alone[0]) {
        return Ok(());
    }
    let mut run = Run {
        pair,
        report,
        context: context.clone(),
        progress: opts.full.then_some(start),
    };
    // Where each row's next token is.
    let mut next = lens;
    let mut live: Vec<usize> = vec![0, 1];
    let mut a = join(&[&alone[0], &alone[1]]).at(|| format!("{context}: join"))?;
    let mut b = cloned(&a);
    for phase in 0..3 {
        if phase == 1 {
            a = join(&[&a, &alone[2]]).at(|| format!("{context}: join"))?;
            b = join(&[&b, &alone[2]]).at(|| format!("{context}: join"))?;
            live.push(2);
        }
        if phase == 2 {
            a = keep_rows(&a, &[1, 2]).at(|| format!("{context}: leave"))?;
            b = keep_rows(&b, &[1, 2]).at(|| format!("{context}: leave"))?;
            live.remove(0);
        }
        for step in 0..4 {
            let ids: Vec<i32> = live.iter().map(|&r| rows[r][next[r]] as i32).collect();
            let tokens = Array::from_slice(&ids, &[ids.len() as i32, 1]);
            for c in [&mut a, &mut b] {
                kv_policy::apply(c, layout).at(|| format!("{context}: kv policy"))?;
            }
            run.step(
                &format!("rows {live:?} step {step}"),
                &tokens,
                &mut a,
                &mut b,
                true,
            )?;
            run.report.ragged += 1;
            for &r in &live {
                next[r] += 1;
            }
        }
    }
    Ok(())
}
