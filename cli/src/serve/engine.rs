//! The engine thread: it loads the model (MLX arrays and streams belong to the thread
//! that made them), then runs every admitted request. Requests wait in a bounded queue;
//! at each step boundary waiting ones join the running set (up to `--max-batch`), each
//! running one advances one token, and finished, failed or abandoned ones leave.
//!
//! The running requests share one forward a step where the model's caches allow rows of
//! different lengths (a [`Batch`]); otherwise each keeps batch-1 caches of its own and
//! their steps are queued together ([`Rows`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use runtime::batch::Batch;
use runtime::error::Error as RuntimeError;
use runtime::fingerprint::Fingerprint;
use runtime::generate::{self, GenerateOptions, Pipeline, StopReason};
use runtime::kv_layout::KvLayout;
use runtime::model::LanguageModel;
use runtime::options::ExecOptions;
use runtime::registry::ImplChoice;
use runtime::sampling::Sampler;
use runtime::sequence::{Advance, Prefilling, Sequence};
use runtime::signature::CacheSignature;
use tokio::sync::mpsc::UnboundedSender;

use crate::model_dir::{self, KvChoice, ModelDir};
use crate::tokenizer::Tokenizer;

/// What the engine needs to start.
pub struct Setup {
    /// The model folder.
    pub dir: PathBuf,
    /// Its tokenizer (for the tokens that end generation).
    pub tokenizer: Arc<Tokenizer>,
    /// KV caches.
    pub kv: Option<KvChoice>,
    /// Implementation choice.
    pub implementation: ImplChoice,
    /// Execution options, read once at the command line.
    pub exec: ExecOptions,
    /// Most requests decoding at once.
    pub max_batch: usize,
    /// Whether running requests may share one forward (when every cache is a growing
    /// K/V cache).
    pub batching: Batching,
    /// Most requests waiting for a place.
    pub queue: usize,
    /// Prompt tokens per prefill forward.
    pub prefill_chunk: usize,
    /// Run the warm-up before accepting requests.
    pub warm_up: bool,
}

/// `--batching`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Batching {
    /// On, except on CUDA for models with caches other than growing float ones: there a
    /// batched step over quantized caches failed with an illegal memory access inside
    /// MLX 0.32.2's CUDA graph, and Gemma 4's batched steps over float rings ran at a
    /// fifth of one stream's rate, while growing float caches batched well
    /// (BENCHMARKS.md, 2026-12-03), so such requests run one forward each.
    Auto,
    /// One forward for all running requests where every cache can hold rows of
    /// different lengths.
    On,
    /// Each request its own forward.
    Off,
}

impl Batching {
    /// Whether batching is on for a model whose caches have `signatures`.
    fn enabled(self, signatures: &[CacheSignature]) -> bool {
        match self {
            Batching::Auto => {
                !runtime::backend::cuda_default()
                    || signatures.iter().all(|s| *s == CacheSignature::Plain)
            }
            Batching::On => true,
            Batching::Off => false,
        }
    }
}

/// What the loaded model tells the HTTP side.
#[derive(Debug, Clone)]
pub struct Info {
    /// Vocabulary size.
    pub vocab: usize,
    /// The most prompt + generated tokens one request may have: the memory plan's
    /// largest safe context with `max_batch` rows.
    pub max_context: usize,
    /// The plan's fingerprint, reported as `system_fingerprint`.
    pub fingerprint: String,
    /// The implementation that runs.
    pub implementation: String,
    /// Seconds the warm-up took.
    pub warm_up: Option<f64>,
    /// Requests decode as one batch (rows of different lengths), not one by one.
    pub batched: bool,
}

/// One request for the engine.
pub struct Job {
    /// Prompt ids (checked against the vocabulary).
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Token choice.
    pub sampler: Sampler,
    /// Where its events go; a closed channel (the client left) ends the request.
    pub events: UnboundedSender<Event>,
}

/// What the engine reports about a job, in order: `Started` or `Failed`, then tokens,
/// then `Finished` or `Failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The prompt is prefilled and the first token chosen.
    Started,
    /// A generated token.
    Token(u32),
    /// The end: a stop token or `max_tokens`.
    Finished(StopReason),
    /// The request failed: `client` when the request itself was at fault.
    Failed {
        /// The request's fault (4xx) rather than the server's (5xx).
        client: bool,
        /// What happened.
        message: String,
    },
}

/// Flags the HTTP side sets.
#[derive(Debug, Default)]
pub struct Control {
    /// End every running and waiting request now (the shutdown bound passed).
    pub cancel_all: AtomicBool,
    /// Exit once nothing runs.
    pub stop: AtomicBool,
    /// Set when a forward failed inside MLX on a GPU: the device context is then gone
    /// (a CUDA illegal memory access leaves nothing to run on), so every later request
    /// is refused with this message instead of failing in stranger ways.
    pub device_failed: std::sync::Mutex<Option<String>>,
}

impl Control {
    /// Records `e` when it is an MLX failure on a GPU ([`Control::device_failed`]).
    fn note(&self, e: &RuntimeError) {
        if matches!(e, RuntimeError::Mlx(_)) && !runtime::backend::cpu_default() {
            let mut failed = self.device_failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| e.to_string());
        }
    }

    /// The device failure, if one happened.
    pub fn device_failure(&self) -> Option<String> {
        self.device_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The running engine.
pub struct Engine {
    queue: SyncSender<Job>,
    /// Its flags.
    pub control: Arc<Control>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine thread and waits until the model is loaded (and warmed up).
    pub fn start(setup: Setup) -> Result<(Engine, Info)> {
        let (queue, jobs) = std::sync::mpsc::sync_channel::<Job>(setup.queue);
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<Info>>(1);
        let control = Arc::new(Control::default());
        let thread_control = control.clone();
        let thread = std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let model = match load(&setup) {
                    Ok((model, info)) => {
                        let _ = ready_tx.send(Ok(info));
                        model
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                run(model, &setup, &jobs, &thread_control);
            })
            .context("starting the engine thread")?;
        let info = ready_rx
            .recv()
            .map_err(|_| anyhow!("the engine thread ended while loading the model"))??;
        Ok((
            Engine {
                queue,
                control,
                thread: Some(thread),
            },
            info,
        ))
    }

    /// A handle that queues jobs.
    pub fn sender(&self) -> SyncSender<Job> {
        self.queue.clone()
    }

    /// Tells the engine to exit once nothing runs, and waits for it.
    pub fn stop(mut self) {
        self.control.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A model ready to serve.
struct Model {
    lm: Box<dyn LanguageModel>,
    layout: KvLayout,
    eos: Vec<u32>,
    /// Running requests share one forward: every cache is a growing K/V cache (rows of
    /// different lengths can share a batch), more than one may run, and batching is on.
    batched: bool,
}

fn load(setup: &Setup) -> Result<(Model, Info)> {
    let dir = ModelDir::open(&setup.dir)?;
    let layout = dir.kv_layout(setup.kv)?;
    let resolved = dir.resolve(layout.clone())?;
    let usable = runtime::memory::device_usable()?;
    let max_context = resolved
        .memory_model(setup.prefill_chunk)
        .max_context(setup.max_batch as u64, usable);
    if max_context < 2 {
        anyhow::bail!(
            "the memory plan leaves no room for a request at --max-batch {} ({} usable)",
            setup.max_batch,
            crate::figures::bytes(usable)
        );
    }
    let loaded = dir.load(resolved, setup.exec)?;
    // As `mlx-aot run` stops (mlx-lm's rule: generation_config.json, the tokenizer's eos).
    let eos = dir.stop_tokens(loaded.eos_token_ids(), &setup.tokenizer)?;
    let vocab = loaded.vocab_size();
    let lm = model_dir::select(loaded, &setup.implementation)?;
    let fingerprint = Fingerprint::of(lm.plan()).short();
    // Rows of different lengths share caches of the growing K/V kinds only (the rule
    // `Batch` applies to the caches themselves).
    let signatures = lm.plan().cache_signatures();
    let grows = signatures.iter().all(|s| s.is_batchable());
    let model = Model {
        lm,
        layout,
        eos,
        batched: grows && setup.max_batch > 1 && setup.batching.enabled(&signatures),
    };
    let warm_up = if setup.warm_up {
        let prompt: Vec<u32> = (0..8u32).map(|i| (i + 1) % vocab as u32).collect();
        let opts = model.options(1, Sampler::Greedy, setup.prefill_chunk);
        Some(generate::warm_up(model.lm.as_ref(), &prompt, &opts)?.as_secs_f64())
    } else {
        None
    };
    let info = Info {
        vocab,
        max_context: usize::try_from(max_context).unwrap_or(usize::MAX),
        fingerprint,
        implementation: model.lm.implementation().to_owned(),
        warm_up,
        batched: model.batched,
    };
    Ok((model, info))
}

impl Model {
    fn options(
        &self,
        max_tokens: usize,
        sampler: Sampler,
        prefill_chunk: usize,
    ) -> GenerateOptions {
        GenerateOptions {
            max_tokens,
            sampler,
            stop_tokens: self.eos.clone(),
            prefill_chunk,
            kv_layout: self.layout.clone(),
            pipeline: Pipeline::Ahead,
            // Admitted already: the HTTP side refuses a prompt + max_tokens over the
            // plan's largest safe context at --max-batch rows, which no single row
            // exceeds.
            memory_limit: None,
        }
    }
}

/// A running request.
struct Running {
    seq: Sequence,
    events: UnboundedSender<Event>,
}

fn failed(control: &Control, e: &RuntimeError) -> Event {
    control.note(e);
    Event::Failed {
        client: matches!(e, RuntimeError::Request(_)),
        message: e.to_string(),
    }
}

/// Ends a request because the shutdown bound passed.
fn shut_down(events: &UnboundedSender<Event>) {
    let _ = events.send(Event::Failed {
        client: false,
        message: "the server is shutting down".into(),
    });
}

/// The engine's one loop: at each step boundary waiting requests take free places (up to
/// `--max-batch`, prefilling ones included), requests whose client left are dropped, the
/// oldest prefill runs one forward (a `--prefill-chunk` of its prompt, so a long prompt
/// holds the running streams up by a chunk a step, not by its whole prefill), and every
/// running row advances one token; a shutdown's cancel ends them all.
fn run(model: Model, setup: &Setup, jobs: &Receiver<Job>, control: &Control) {
    let lm = model.lm.as_ref();
    let mut rows = Rows::new(&model);
    let mut pending: VecDeque<Pending> = VecDeque::new();
    loop {
        while rows.len() + pending.len() < setup.max_batch {
            let idle = rows.is_empty() && pending.is_empty();
            let job = match take_job(jobs, idle, control) {
                Ok(Some(job)) => job,
                Ok(None) if idle => continue,
                Ok(None) => break,
                Err(()) => return,
            };
            let opts = model.options(job.max_tokens, job.sampler, setup.prefill_chunk);
            match Prefilling::start(lm, &job.prompt, &opts) {
                Ok(prefill) => pending.push_back(Pending {
                    job,
                    opts,
                    prefill,
                    since: Instant::now(),
                }),
                Err(e) => {
                    let _ = job.events.send(failed(control, &e));
                }
            }
        }
        if control.cancel_all.load(Ordering::SeqCst) {
            rows.end_all(&model, shut_down);
            pending.drain(..).for_each(|p| shut_down(&p.job.events));
            continue;
        }
        // A client that left frees its place here, at the step boundary.
        pending.retain(|p| !p.job.events.is_closed());
        rows.drop_gone(&model, control);
        let part = pending.front_mut().map(|p| p.prefill.step(lm));
        match part {
            Some(Ok(Some(seq))) => {
                if let Some(p) = pending.pop_front() {
                    rows.add(p, seq, control);
                }
            }
            Some(Err(e)) => {
                if let Some(p) = pending.pop_front() {
                    let _ = p.job.events.send(failed(control, &e));
                }
            }
            Some(Ok(None)) | None => {}
        }
        if !rows.is_empty() {
            rows.step(lm, &model, control);
        }
    }
}

/// A request whose prompt is going in.
struct Pending {
    job: Job,
    opts: GenerateOptions,
    prefill: Prefilling,
    since: Instant,
}

/// The running requests, in the form the model's caches allow.
enum Rows {
    /// The rows of one batch ([`Batch`]), one forward a step for all of them; `events`
    /// in the batch's row order.
    Batched {
        batch: Batch,
        events: Vec<UnboundedSender<Event>>,
    },
    /// Each request with batch-1 caches of its own ([`Sequence`]), running the graphs
    /// `mlx-aot run` would for it alone; every next step is queued (one `async_eval`)
    /// before any token is read, so the device works through them back to back.
    Separate(Vec<Running>),
}

impl Rows {
    fn new(model: &Model) -> Rows {
        if model.batched {
            Rows::Batched {
                batch: Batch::new(model.layout.clone()),
                events: Vec::new(),
            }
        } else {
            Rows::Separate(Vec::new())
        }
    }

    fn len(&self) -> usize {
        match self {
            Rows::Batched { events, .. } => events.len(),
            Rows::Separate(running) => running.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the request `p`, whose prefill gave `seq` (reporting `Started`), or reports
    /// why it cannot run.
    fn add(&mut self, p: Pending, seq: Sequence, control: &Control) {
        let Pending {
            job, opts, since, ..
        } = p;
        let result = match self {
            Rows::Batched { batch, .. } => batch.join_prefilled(seq, &opts),
            Rows::Separate(running) => {
                running.push(Running {
                    seq,
                    events: job.events.clone(),
                });
                Ok(())
            }
        };
        match result {
            Ok(()) => {
                tracing::debug!(
                    "prefill of {} tokens in {:.1} ms",
                    job.prompt.len(),
                    since.elapsed().as_secs_f64() * 1e3
                );
                let _ = job.events.send(Event::Started);
                if let Rows::Batched { events, .. } = self {
                    events.push(job.events);
                }
            }
            Err(e) => {
                let _ = job.events.send(failed(control, &e));
            }
        }
    }

    /// Ends every row, telling each client through `tell`, and starts afresh.
    fn end_all(&mut self, model: &Model, tell: impl Fn(&UnboundedSender<Event>)) {
        match self {
            Rows::Batched { events, .. } => events.iter().for_each(&tell),
            Rows::Separate(running) => running.iter().for_each(|r| tell(&r.events)),
        }
        *self = Rows::new(model);
    }

    /// Drops the rows whose client left: a row is freed at the step boundary.
    fn drop_gone(&mut self, model: &Model, control: &Control) {
        match self {
            Rows::Separate(running) => running.retain(|r| !r.events.is_closed()),
            Rows::Batched { batch, events } => {
                let gone: Vec<usize> = (0..events.len())
                    .filter(|&r| events[r].is_closed())
                    .collect();
                if gone.is_empty() {
                    return;
                }
                if let Err(e) = batch.remove(&gone) {
                    // A batch that failed to shrink leaves no row to trust.
                    self.end_all(model, |tx| {
                        let _ = tx.send(failed(control, &e));
                    });
                    return;
                }
                let mut r = 0;
                events.retain(|_| {
                    let keep = !gone.contains(&r);
                    r += 1;
                    keep
                });
            }
        }
    }

    /// One token for every row; rows that finished or failed leave.
    fn step(&mut self, lm: &dyn LanguageModel, model: &Model, control: &Control) {
        match self {
            Rows::Batched { batch, events } => match batch.step(lm) {
                Ok(advances) => {
                    let mut r = 0;
                    events.retain(|tx| {
                        let advance = advances[r];
                        r += 1;
                        report(Ok(advance), tx, control);
                        // The batch keeps every row that goes on, so its channel stays
                        // beside it even when the client has left: the row and the
                        // channel leave together at the next boundary (`drop_gone`).
                        matches!(advance, Advance::Token(_))
                    });
                }
                // A failed batched step leaves no row to trust.
                Err(e) => self.end_all(model, |tx| {
                    let _ = tx.send(failed(control, &e));
                }),
            },
            Rows::Separate(running) => step_separately(lm, running, control),
        }
    }
}

/// One token for every separately running request: every next step queued, then every
/// current token read.
fn step_separately(lm: &dyn LanguageModel, running: &mut Vec<Running>, control: &Control) {
    let mut queued = Vec::with_capacity(running.len());
    let mut broken = vec![false; running.len()];
    for (i, r) in running.iter_mut().enumerate() {
        match r.seq.queue_next(lm) {
            Ok(Some(next)) => queued.push(next.clone()),
            Ok(None) => {}
            Err(e) => {
                let _ = r.events.send(failed(control, &e));
                broken[i] = true;
            }
        }
    }
    if let Err(e) = mlx_rs_async_eval(&queued) {
        for r in running.iter() {
            let _ = r.events.send(failed(control, &e));
        }
        running.clear();
        return;
    }
    drop(queued);
    let mut i = 0;
    running.retain_mut(|r| {
        let keep = !broken[i] && report(r.seq.advance(lm), &r.events, control);
        i += 1;
        keep
    });
}

fn mlx_rs_async_eval(arrays: &[runtime::mlx_rs::Array]) -> runtime::error::Result<()> {
    Ok(runtime::mlx_rs::transforms::async_eval(arrays)?)
}

/// Tells a row's client what its step gave; whether the row goes on.
fn report(
    advance: runtime::error::Result<Advance>,
    events: &UnboundedSender<Event>,
    control: &Control,
) -> bool {
    match advance {
        Ok(Advance::Token(t)) => events.send(Event::Token(t)).is_ok(),
        Ok(Advance::Last(t)) => {
            let _ = events.send(Event::Token(t));
            let _ = events.send(Event::Finished(StopReason::MaxTokens));
            false
        }
        Ok(Advance::Stopped) => {
            let _ = events.send(Event::Finished(StopReason::StopToken));
            false
        }
        Err(e) => {
            let _ = events.send(failed(control, &e));
            false
        }
    }
}

/// The next job for a free place: waits (a while) only when nothing runs. `None` when
/// none is waiting; `Err` when the engine should exit.
fn next_job(
    jobs: &Receiver<Job>,
    idle: bool,
    control: &Control,
) -> std::result::Result<Option<Job>, ()> {
    if idle {
        match jobs.recv_timeout(Duration::from_millis(50)) {
            Ok(job) => Ok(Some(job)),
            Err(RecvTimeoutError::Timeout) if control.stop.load(Ordering::SeqCst) => Err(()),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(()),
        }
    } else {
        Ok(jobs.try_recv().ok())
    }
}

/// The next job to start ([`next_job`]): during a shutdown waiting jobs are refused,
/// and jobs whose client left are skipped.
fn take_job(
    jobs: &Receiver<Job>,
    idle: bool,
    control: &Control,
) -> std::result::Result<Option<Job>, ()> {
    while let Some(job) = next_job(jobs, idle, control)? {
        if control.cancel_all.load(Ordering::SeqCst) {
            shut_down(&job.events);
            continue;
        }
        if let Some(failure) = control.device_failure() {
            let _ = job.events.send(Event::Failed {
                client: false,
                message: format!(
                    "the device failed in an earlier request ({failure}); this server cannot \
                     compute any more: restart it"
                ),
            });
            continue;
        }
        if !job.events.is_closed() {
            return Ok(Some(job));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a GPU's MLX failure stops the server: on the CPU an MLX error belongs to its
    /// request, and a request error never counts.
    #[test]
    fn only_a_device_failure_refuses_later_requests() {
        let c = Control::default();
        c.note(&RuntimeError::Request("bad".into()));
        assert_eq!(c.device_failure(), None);
        c.note(&RuntimeError::Mlx(
            runtime::mlx_rs::error::Exception::custom("illegal memory access"),
        ));
        if runtime::backend::cpu_default() {
            assert_eq!(c.device_failure(), None);
        } else {
            assert!(
                c.device_failure()
                    .unwrap()
                    .contains("illegal memory access")
            );
        }
    }
}
