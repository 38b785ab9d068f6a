//! The HTTP side: routes, request checks before anything reaches the engine (model,
//! prompt, context limit, sampling values), the queue, and the replies: one JSON object,
//! or server-sent events in OpenAI's chunk shape ending in `data: [DONE]`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use runtime::generate::{self, StopReason};
use runtime::sampling::Sampler;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_stream::wrappers::ReceiverStream;

use super::api::{self, ApiError, Endpoint, Prompt, Request};
use super::engine::{Control, Event, Info, Job};
use super::text::Reply;
use crate::tokenizer::Tokenizer;

/// Largest request body.
const BODY_LIMIT: usize = 16 << 20;

/// What every handler shares.
pub struct AppState {
    /// The id `/v1/models` lists and requests name.
    pub model_id: String,
    /// Other names a request's `model` may give for the same model (the folder as given).
    pub aliases: Vec<String>,
    /// The loaded model's facts.
    pub info: Info,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The engine's queue.
    pub queue: SyncSender<Job>,
    /// The engine's flags (a device failure turns /health to 503).
    pub control: Arc<Control>,
    /// `temperature` when a request gives none.
    pub default_temperature: f32,
    /// `max_tokens` when a request gives none (capped by the context limit).
    pub default_max_tokens: usize,
    /// Set once shutdown began: new requests get 503.
    pub draining: AtomicBool,
    /// When the server started (`created` of the model object).
    pub created: u64,
    next_id: AtomicU64,
}

impl AppState {
    /// The shared state.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model_id: String,
        aliases: Vec<String>,
        info: Info,
        tokenizer: Arc<Tokenizer>,
        queue: SyncSender<Job>,
        control: Arc<Control>,
        default_temperature: f32,
        default_max_tokens: usize,
    ) -> Self {
        AppState {
            model_id,
            aliases,
            info,
            control,
            tokenizer,
            queue,
            default_temperature,
            default_max_tokens,
            draining: AtomicBool::new(false),
            created: now(),
            next_id: AtomicU64::new(0),
        }
    }

    fn request_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{:x}{n:06x}", self.created)
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

async fn health(State(s): State<Arc<AppState>>) -> Response {
    if let Some(failure) = s.control.device_failure() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "device failed", "error": failure})),
        )
            .into_response();
    }
    if s.draining.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "shutting down"})),
        )
            .into_response();
    }
    axum::Json(json!({"status": "ok"})).into_response()
}

fn model_object(s: &AppState) -> Value {
    json!({"id": s.model_id, "object": "model", "created": s.created, "owned_by": "mlx-aot"})
}

async fn models(State(s): State<Arc<AppState>>) -> Response {
    axum::Json(json!({"object": "list", "data": [model_object(&s)]})).into_response()
}

async fn model(State(s): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match check_model(&s, Some(&id)) {
        Ok(()) => axum::Json(model_object(&s)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn not_found() -> Response {
    ApiError::status(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "no such endpoint: this server has /v1/chat/completions, /v1/completions, /v1/models and /health",
    )
    .into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::status(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method not allowed on this endpoint",
    )
    .into_response()
}

async fn chat(State(s): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    respond(s, body, Endpoint::Chat).await
}

async fn completions(
    State(s): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(s, body, Endpoint::Completion).await
}

async fn respond(
    s: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Response {
    match handle(s, body, endpoint).await {
        Ok(r) => r,
        Err(e) => {
            tracing::info!("{} {}", e.status.as_u16(), e.message);
            e.into_response()
        }
    }
}

fn check_model(s: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        None => Ok(()),
        Some(m) if m == s.model_id || s.aliases.iter().any(|a| a == m) => Ok(()),
        Some(m) => Err(ApiError {
            code: Some("model_not_found"),
            param: Some("model".into()),
            ..ApiError::status(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!(
                    "the model `{m}` does not exist here; this server serves `{}`",
                    s.model_id
                ),
            )
        }),
    }
}

/// A request checked and tokenized, ready for the engine.
struct Admitted {
    request: Request,
    prompt: Vec<u32>,
    max_tokens: usize,
    sampler: Sampler,
}

fn admit(s: &AppState, request: Request) -> Result<Admitted, ApiError> {
    check_model(s, request.model.as_deref())?;
    let (prompt, param) = match &request.prompt {
        Prompt::Chat(messages) => {
            let text = s
                .tokenizer
                .render_messages(messages)
                .map_err(|e| ApiError::invalid("messages", format!("{e:#}")))?;
            let ids = s
                .tokenizer
                .encode(&text, false)
                .map_err(|e| ApiError::invalid("messages", format!("{e:#}")))?;
            (ids, "messages")
        }
        Prompt::Text(text) => (
            s.tokenizer
                .encode(text, true)
                .map_err(|e| ApiError::invalid("prompt", format!("{e:#}")))?,
            "prompt",
        ),
        Prompt::Tokens(ids) => (ids.clone(), "prompt"),
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            param,
            "the prompt tokenizes to no tokens",
        ));
    }
    generate::check_tokens(&prompt, s.info.vocab)
        .map_err(|e| ApiError::invalid(param, e.to_string()))?;
    let limit = s.info.max_context;
    if prompt.len() >= limit {
        return Err(ApiError::invalid(
            param,
            format!(
                "the prompt has {} tokens; this server's context limit is {limit} tokens \
                 (prompt + max_tokens, from the memory plan)",
                prompt.len()
            ),
        ));
    }
    let max_tokens = match request.max_tokens {
        Some(n) if prompt.len() + n > limit => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!(
                    "the prompt ({} tokens) plus max_tokens ({n}) is {} tokens, over this \
                     server's context limit of {limit} tokens (from the memory plan)",
                    prompt.len(),
                    prompt.len() + n
                ),
            ));
        }
        Some(n) => n,
        None => s.default_max_tokens.min(limit - prompt.len()),
    };
    let temperature = request.temperature.unwrap_or(s.default_temperature);
    // Without a seed every request draws anew.
    let seed = request.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let sampler = Sampler::new(temperature, request.top_p, request.top_k, seed)
        .map_err(|e| ApiError::request(e.to_string()))?;
    Ok(Admitted {
        request,
        prompt,
        max_tokens,
        sampler,
    })
}

async fn handle(
    s: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    if s.draining.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    let body = body.map_err(|e| {
        ApiError::status(
            e.status(),
            "invalid_request_error",
            format!("the request body: {}", e.body_text()),
        )
    })?;
    let request = api::parse(&body, endpoint)?;
    let admitted = {
        let s = s.clone();
        // Rendering and tokenizing are CPU work: off the async workers.
        tokio::task::spawn_blocking(move || admit(&s, request))
            .await
            .map_err(|e| ApiError::internal(format!("checking the request: {e}")))??
    };
    let (events_tx, mut events) = unbounded_channel();
    let started = Instant::now();
    let prompt_tokens = admitted.prompt.len();
    let job = Job {
        prompt: admitted.prompt,
        max_tokens: admitted.max_tokens,
        sampler: admitted.sampler,
        events: events_tx,
    };
    s.queue.try_send(job).map_err(|e| match e {
        TrySendError::Full(_) => ApiError {
            code: Some("rate_limit_exceeded"),
            retry_after: Some(1),
            ..ApiError::status(
                StatusCode::TOO_MANY_REQUESTS,
                "requests",
                "the server's queue is full; retry later",
            )
        },
        TrySendError::Disconnected(_) => ApiError::unavailable("the engine has stopped"),
    })?;
    // The first event decides the status: admitted (prefilled) or refused.
    match events.recv().await {
        Some(Event::Started) => {}
        Some(Event::Failed { client, message }) => {
            return Err(if client {
                ApiError::request(message)
            } else {
                ApiError::internal(message)
            });
        }
        Some(other) => {
            return Err(ApiError::internal(format!(
                "unexpected engine event {other:?}"
            )));
        }
        None => return Err(ApiError::unavailable("the engine has stopped")),
    }
    let reply = ReplyMeta {
        id: s.request_id(match endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        }),
        created: now(),
        endpoint,
        prompt_tokens,
        started,
        state: s.clone(),
    };
    if admitted.request.stream {
        Ok(stream(reply, admitted.request, events))
    } else {
        whole(reply, admitted.request, events).await
    }
}

/// What every reply to a request carries.
struct ReplyMeta {
    id: String,
    created: u64,
    endpoint: Endpoint,
    prompt_tokens: usize,
    started: Instant,
    state: Arc<AppState>,
}

/// How a reply ended.
enum Ending {
    Finished(&'static str),
    Failed(ApiError),
}

impl ReplyMeta {
    fn usage(&self, completion: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }

    fn object(&self, stream: bool) -> &'static str {
        match (self.endpoint, stream) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, stream: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(stream),
            "created": self.created,
            "model": self.state.model_id,
            "system_fingerprint": format!("mlx-aot-{}", self.state.info.fingerprint),
            "choices": choices,
        })
    }

    /// A streamed chunk carrying `text` (and the role, first) or the finish reason.
    fn chunk(&self, text: Option<&str>, first: bool, finish: Option<&str>) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let delta = match (first, text) {
                    (true, t) => json!({"role": "assistant", "content": t.unwrap_or("")}),
                    (false, Some(t)) => json!({"content": t}),
                    (false, None) => json!({}),
                };
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Completion => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
        };
        self.envelope(true, json!([choice]))
    }

    fn log(&self, tokens: usize, ending: &str) {
        tracing::info!(
            "{} {} prompt {} + {} tokens, {ending}, {:.1} ms",
            self.id,
            self.object(false),
            self.prompt_tokens,
            tokens,
            self.started.elapsed().as_secs_f64() * 1e3
        );
    }
}

fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens => "length",
        StopReason::StopToken | StopReason::Caller => "stop",
    }
}

/// What the next engine event gave a reply.
enum Step {
    /// Text to send (non-empty).
    Text(String),
    /// The reply is over.
    End(Ending),
}

/// A reply fed by the engine's events for it. Once it has returned [`Step::End`] the
/// caller drops it, and with it the events' receiver, which tells the engine to free the
/// row (a stop string ends the reply before the engine knows).
struct Driver<'a> {
    events: UnboundedReceiver<Event>,
    reply: Reply<'a>,
    /// An ending that came with the last text.
    pending: Option<Ending>,
}

impl<'a> Driver<'a> {
    fn new(events: UnboundedReceiver<Event>, tokenizer: &'a Tokenizer, stops: Vec<String>) -> Self {
        Driver {
            events,
            reply: Reply::new(tokenizer, stops),
            pending: None,
        }
    }

    /// Tokens received so far.
    fn tokens(&self) -> usize {
        self.reply.tokens
    }

    async fn next(&mut self) -> Step {
        if let Some(e) = self.pending.take() {
            return Step::End(e);
        }
        loop {
            let (piece, end) = match self.events.recv().await {
                Some(Event::Token(t)) => (self.reply.push(t), None),
                Some(Event::Finished(stop)) => (self.reply.finish(), Some(finish_reason(stop))),
                Some(Event::Failed { message, .. }) => {
                    return Step::End(Ending::Failed(ApiError::internal(message)));
                }
                Some(Event::Started) | None => {
                    return Step::End(Ending::Failed(ApiError::internal(
                        "the engine dropped the request",
                    )));
                }
            };
            let piece = match piece {
                Ok(p) => p,
                Err(e) => {
                    return Step::End(Ending::Failed(ApiError::internal(format!("{e:#}"))));
                }
            };
            let ending = if piece.stopped {
                Some(Ending::Finished("stop"))
            } else {
                end.map(Ending::Finished)
            };
            if piece.text.is_empty() {
                match ending {
                    Some(e) => return Step::End(e),
                    None => continue,
                }
            }
            self.pending = ending;
            return Step::Text(piece.text);
        }
    }
}

async fn whole(
    meta: ReplyMeta,
    request: Request,
    events: UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let tokenizer = meta.state.tokenizer.clone();
    let mut driver = Driver::new(events, &tokenizer, request.stop);
    let mut text = String::new();
    let reason = loop {
        match driver.next().await {
            Step::Text(t) => text.push_str(&t),
            Step::End(Ending::Finished(r)) => break r,
            Step::End(Ending::Failed(e)) => {
                meta.log(driver.tokens(), &format!("failed: {}", e.message));
                return Err(e);
            }
        }
    };
    let tokens = driver.tokens();
    drop(driver);
    meta.log(tokens, reason);
    let choice = match meta.endpoint {
        Endpoint::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": null,
            "finish_reason": reason,
        }),
        Endpoint::Completion => json!({
            "index": 0,
            "text": text,
            "logprobs": null,
            "finish_reason": reason,
        }),
    };
    let mut body = meta.envelope(false, json!([choice]));
    body["usage"] = meta.usage(tokens);
    Ok(axum::Json(body).into_response())
}

fn stream(meta: ReplyMeta, request: Request, events: UnboundedReceiver<Event>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<SseEvent, Infallible>>(64);
    tokio::spawn(async move {
        let tokenizer = meta.state.tokenizer.clone();
        let mut driver = Driver::new(events, &tokenizer, request.stop);
        // A chat stream opens with the assistant's role; a completion stream with text.
        let mut out: Vec<String> = match meta.endpoint {
            Endpoint::Chat => vec![meta.chunk(None, true, None).to_string()],
            Endpoint::Completion => Vec::new(),
        };
        loop {
            for data in out.drain(..) {
                // The client left: dropping the driver frees the row.
                if tx.send(Ok(SseEvent::default().data(data))).await.is_err() {
                    meta.log(driver.tokens(), "client left");
                    return;
                }
            }
            match driver.next().await {
                Step::Text(t) => out.push(meta.chunk(Some(&t), false, None).to_string()),
                Step::End(Ending::Finished(reason)) => {
                    meta.log(driver.tokens(), reason);
                    out.push(meta.chunk(None, false, Some(reason)).to_string());
                    if request.include_usage {
                        let mut usage = meta.envelope(true, json!([]));
                        usage["usage"] = meta.usage(driver.tokens());
                        out.push(usage.to_string());
                    }
                    break;
                }
                Step::End(Ending::Failed(e)) => {
                    meta.log(driver.tokens(), &format!("failed: {}", e.message));
                    out.push(e.body().to_string());
                    break;
                }
            }
        }
        drop(driver);
        out.push("[DONE]".into());
        for data in out {
            if tx.send(Ok(SseEvent::default().data(data))).await.is_err() {
                return;
            }
        }
    });
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}
