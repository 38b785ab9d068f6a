//! `mlx-aot serve`: an OpenAI-compatible HTTP server over one model folder.
//!
//! The engine thread ([`engine`]) owns the model; the HTTP side ([`http`], on tokio and
//! axum) checks requests ([`api`]), tokenizes them, queues them, and turns the engine's
//! tokens into text ([`text`]), whole or as server-sent events.

mod api;
mod engine;
mod http;
mod text;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use runtime::generate::DEFAULT_PREFILL_CHUNK;
use runtime::options::ExecOptions;
use runtime::registry::ImplChoice;

use crate::model_dir::{self, KvChoice};
use crate::tokenizer::Tokenizer;
use engine::{Batching, Control, Engine, Setup};
use http::AppState;

/// `mlx-aot serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model folder (config.json, weights, tokenizer.json). Default: the embedded
    /// default model.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    host: String,
    /// Port to listen on; 0 picks a free one (the address is printed).
    #[arg(long, default_value_t = 8080, value_name = "PORT")]
    port: u16,
    /// Most requests decoding at once; more wait in the queue.
    #[arg(long, default_value_t = 8, value_name = "N")]
    max_batch: usize,
    /// Whether running requests share one forward (models whose caches can all hold
    /// rows of different lengths): auto is on, except on CUDA where a cache is not a
    /// growing float one (quantized caches failed inside MLX 0.32.2's CUDA graph there,
    /// Gemma 4's float rings batched at a fifth of one stream's rate).
    #[arg(long, value_enum, default_value_t = Batching::Auto)]
    batching: Batching,
    /// Most requests waiting for a place; past it requests get 429 with Retry-After.
    #[arg(long, default_value_t = 64, value_name = "N")]
    queue: usize,
    /// The model id /v1/models lists and requests name. Default: the folder's name.
    #[arg(long, value_name = "ID")]
    served_model_name: Option<String>,
    /// KV caches: float, config (the folder's kv_config.json) or BITS.
    #[arg(long, value_name = "float|config|BITS")]
    kv: Option<KvChoice>,
    /// Implementation: auto, monolith, generated, or a registered implementation id.
    #[arg(long = "impl", default_value = "auto", value_parser = model_dir::parse_impl, value_name = "auto|monolith|generated")]
    implementation: ImplChoice,
    /// Prompt tokens per prefill forward.
    #[arg(long, default_value_t = DEFAULT_PREFILL_CHUNK, value_name = "N")]
    prefill_chunk: usize,
    /// `temperature` of a request that gives none (0: greedy).
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    temperature: f32,
    /// `max_tokens` of a request that gives none (capped by the context limit).
    #[arg(long, default_value_t = 2048, value_name = "N")]
    default_max_tokens: usize,
    /// Seconds in-flight requests may take to finish after SIGTERM or Ctrl-C before they
    /// are cancelled.
    #[arg(long, default_value_t = 10, value_name = "S")]
    shutdown_timeout: u64,
    /// Skip the warm-up before listening.
    #[arg(long)]
    no_warm_up: bool,
}

pub fn main(a: Args) -> Result<()> {
    if a.max_batch == 0 {
        bail!("--max-batch must be at least 1");
    }
    if a.queue == 0 {
        bail!("--queue must be at least 1");
    }
    if a.prefill_chunk == 0 {
        bail!("--prefill-chunk must be at least 1");
    }
    if a.default_max_tokens == 0 {
        bail!("--default-max-tokens must be at least 1");
    }
    if !(a.temperature.is_finite() && (0.0..=2.0).contains(&a.temperature)) {
        bail!("--temperature must be in [0, 2], got {}", a.temperature);
    }
    let host: std::net::IpAddr = a
        .host
        .parse()
        .with_context(|| format!("--host {}: not an IP address", a.host))?;
    let exec = ExecOptions::from_env()?;
    let dir = match &a.model {
        Some(m) => m.clone(),
        None => crate::synth::default_model()?,
    };
    // The folder's tokenizer first: a broken one fails before the weights load.
    let tokenizer = Arc::new(Tokenizer::open(&dir)?);
    let model_id = match &a.served_model_name {
        Some(n) if n.trim().is_empty() => bail!("--served-model-name is empty"),
        Some(n) => n.clone(),
        None => folder_name(&dir),
    };
    let mut aliases = vec![dir.display().to_string()];
    if let Some(m) = &a.model {
        aliases.push(m.display().to_string());
    }
    let (engine, info) = Engine::start(Setup {
        dir,
        tokenizer: tokenizer.clone(),
        kv: a.kv,
        implementation: a.implementation.clone(),
        exec,
        max_batch: a.max_batch,
        batching: a.batching,
        queue: a.queue,
        prefill_chunk: a.prefill_chunk,
        warm_up: !a.no_warm_up,
    })?;
    let state = Arc::new(AppState::new(
        model_id,
        aliases,
        info,
        tokenizer,
        engine.sender(),
        engine.control.clone(),
        a.temperature,
        a.default_max_tokens,
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(serve(
        SocketAddr::new(host, a.port),
        state.clone(),
        engine.control.clone(),
        Duration::from_secs(a.shutdown_timeout),
        a.max_batch,
    ));
    drop(state);
    engine.stop();
    // Connections still open past the bound are dropped with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// The last component of `dir` (the folder's name), else the path itself.
fn folder_name(dir: &std::path::Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty())
        .map_or_else(|| dir.display().to_string(), str::to_owned)
}

async fn serve(
    addr: SocketAddr,
    state: Arc<AppState>,
    control: Arc<Control>,
    bound: Duration,
    max_batch: usize,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--host/--port: cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    eprintln!(
        "mlx-aot serve: listening on http://{local} (model `{}`, {}, fingerprint {}, max batch \
         {max_batch} {}, context limit {} tokens{})",
        state.model_id,
        state.info.implementation,
        state.info.fingerprint,
        if state.info.batched {
            "(batched)"
        } else {
            "(one forward per request)"
        },
        state.info.max_context,
        state
            .info
            .warm_up
            .map_or(String::new(), |s| format!(", warm-up {s:.1} s"))
    );
    let app = http::router(state.clone());
    let shutdown = async move {
        wait_for_signal().await;
        eprintln!(
            "mlx-aot serve: shutting down (in-flight requests have {} s to finish)",
            bound.as_secs()
        );
        state.draining.store(true, Ordering::SeqCst);
        tokio::spawn(async move {
            tokio::time::sleep(bound).await;
            control.cancel_all.store(true, Ordering::SeqCst);
        });
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving HTTP")?;
    eprintln!("mlx-aot serve: stopped");
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
