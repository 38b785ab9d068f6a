//! The OpenAI request bodies `serve` accepts, read from JSON by hand so that every
//! refusal names the field and what was expected, and the error object OpenAI clients
//! parse. Fields this server does not know are ignored, as OpenAI clients expect.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::tokenizer::ChatMessage;

/// An error answered with OpenAI's error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// OpenAI's `type`.
    pub kind: &'static str,
    /// OpenAI's `code`.
    pub code: Option<&'static str>,
    /// Seconds to wait before retrying (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.into()),
            kind: "invalid_request_error",
            code: None,
            retry_after: None,
        }
    }

    /// A 400 about the request as a whole.
    pub fn request(message: impl Into<String>) -> Self {
        ApiError {
            param: None,
            ..Self::invalid("", message)
        }
    }

    /// Any status, no field.
    pub fn status(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            ..Self::request(message)
        }
    }

    /// A 500: the server's fault.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::status(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// A 503 with `Retry-After`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(1),
            ..Self::status(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
        }
    }

    /// The error object alone (`{"error": {...}}`), also sent inside a stream.
    pub fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

/// Which endpoint a body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`: `messages`.
    Chat,
    /// `/v1/completions`: `prompt`.
    Completion,
}

/// What the request asks to continue.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// A conversation, rendered through the chat template.
    Chat(Vec<ChatMessage>),
    /// Text, tokenized with the tokenizer's special tokens (BOS).
    Text(String),
    /// Token ids as given.
    Tokens(Vec<u32>),
}

/// A parsed completion or chat completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `model`, if given.
    pub model: Option<String>,
    /// `messages` or `prompt`.
    pub prompt: Prompt,
    /// `max_completion_tokens`, else `max_tokens`.
    pub max_tokens: Option<usize>,
    /// `temperature` (`None`: the server's default).
    pub temperature: Option<f32>,
    /// `top_p` (1 when absent).
    pub top_p: f32,
    /// `top_k` (0 when absent: every token).
    pub top_k: usize,
    /// `seed`.
    pub seed: Option<u64>,
    /// `stop` strings.
    pub stop: Vec<String>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

/// Most `stop` strings a request may give.
pub const MAX_STOP: usize = 16;

/// Reads `body` for `endpoint`.
pub fn parse(body: &[u8], endpoint: Endpoint) -> Result<Request, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::request(format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(o) = value else {
        return Err(ApiError::request(format!(
            "the request body must be a JSON object, got {}",
            kind_of(&value)
        )));
    };
    let model = opt(&o, "model", |v| v.as_str().map(str::to_owned), "a string")?;
    let prompt = match endpoint {
        Endpoint::Chat => Prompt::Chat(messages(&o)?),
        Endpoint::Completion => prompt(&o)?,
    };
    let max_tokens = match opt(&o, "max_completion_tokens", count, "an integer >= 1")? {
        Some(n) => Some(n),
        None => opt(&o, "max_tokens", count, "an integer >= 1")?,
    };
    let temperature = opt(
        &o,
        "temperature",
        |v| number(v).filter(|t| (0.0..=2.0).contains(t)),
        "a number in [0, 2]",
    )?
    .map(|t| t as f32);
    let top_p = opt(
        &o,
        "top_p",
        |v| number(v).filter(|p| *p > 0.0 && *p <= 1.0),
        "a number in (0, 1]",
    )?
    .map_or(1.0, |p| p as f32);
    // -1 is how several servers spell "no top-k".
    let top_k = opt(
        &o,
        "top_k",
        |v| v.as_i64().filter(|k| *k >= -1).map(|k| k.max(0) as usize),
        "an integer >= 0 (0 or -1: no top-k)",
    )?
    .unwrap_or(0);
    let seed = opt(&o, "seed", |v| v.as_i64().map(|s| s as u64), "an integer")?;
    let stop = stop(&o)?;
    let stream = opt(&o, "stream", Value::as_bool, "a boolean")?.unwrap_or(false);
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => opt(so, "include_usage", Value::as_bool, "a boolean")
            .map_err(|e| ApiError {
                param: Some("stream_options.include_usage".into()),
                ..e
            })?
            .unwrap_or(false),
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("`stream_options` must be an object, got {}", kind_of(v)),
            ));
        }
    };
    if let Some(n) = opt(&o, "n", Value::as_i64, "an integer")?
        && n != 1
    {
        return Err(ApiError::invalid(
            "n",
            format!("`n` must be 1 (one choice per request), got {n}"),
        ));
    }
    unsupported(&o, endpoint)?;
    Ok(Request {
        model,
        prompt,
        max_tokens,
        temperature,
        top_p,
        top_k,
        seed,
        stop,
        stream,
        include_usage,
    })
}

/// Known fields whose non-default values this server cannot honour: refused rather than
/// silently ignored.
fn unsupported(o: &Map<String, Value>, endpoint: Endpoint) -> Result<(), ApiError> {
    let truthy = |key: &str| match o.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
        Some(_) => true,
    };
    let mut keys = vec![
        "logprobs",
        "top_logprobs",
        "frequency_penalty",
        "presence_penalty",
        "tools",
        "logit_bias",
    ];
    if endpoint == Endpoint::Completion {
        keys.extend(["echo", "suffix"]);
    }
    if let Some(key) = keys.into_iter().find(|k| truthy(k)) {
        return Err(ApiError::invalid(
            key,
            format!("`{key}` is not supported by this server"),
        ));
    }
    // Plain text is all this server writes.
    if let Some(f) = o.get("response_format").filter(|f| !f.is_null())
        && f.get("type").and_then(Value::as_str) != Some("text")
    {
        return Err(ApiError::invalid(
            "response_format",
            format!(
                "`response_format` {} is not supported by this server (text only)",
                shown(f)
            ),
        ));
    }
    if let Some(b) = o.get("best_of").and_then(Value::as_i64)
        && b != 1
    {
        return Err(ApiError::invalid(
            "best_of",
            format!("`best_of` must be 1, got {b}"),
        ));
    }
    Ok(())
}

/// `key` read by `read` when present and not null; `expected` names what it must be.
fn opt<T>(
    o: &Map<String, Value>,
    key: &str,
    read: impl Fn(&Value) -> Option<T>,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => read(v).map(Some).ok_or_else(|| {
            ApiError::invalid(key, format!("`{key}` must be {expected}, got {}", shown(v)))
        }),
    }
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

fn count(v: &Value) -> Option<usize> {
    v.as_u64().filter(|n| *n >= 1).map(|n| n as usize)
}

/// A value as it appears in an error: short JSON.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn stop(o: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let expected = "`stop` must be a non-empty string or an array of them";
    let stops = match o.get("stop") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::invalid("stop", expected))?,
        Some(v) => {
            return Err(ApiError::invalid(
                "stop",
                format!("{expected}, got {}", kind_of(v)),
            ));
        }
    };
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop", expected));
    }
    if stops.len() > MAX_STOP {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOP} stop strings, got {}", stops.len()),
        ));
    }
    Ok(stops)
}

fn messages(o: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match o.get("messages") {
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                "messages",
                "`messages` is required: an array of {role, content} objects",
            ));
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "messages",
                format!("`messages` must be an array, got {}", kind_of(v)),
            ));
        }
    };
    if items.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect()
}

fn message(i: usize, m: &Value) -> Result<ChatMessage, ApiError> {
    let at = format!("messages[{i}]");
    let Value::Object(m) = m else {
        return Err(ApiError::invalid(
            at.clone(),
            format!("`{at}` must be an object, got {}", kind_of(m)),
        ));
    };
    let role = match m.get("role") {
        Some(Value::String(r)) if !r.is_empty() => r.clone(),
        _ => {
            return Err(ApiError::invalid(
                format!("{at}.role"),
                format!("`{at}.role` must be a non-empty string (system, user, assistant, ...)"),
            ));
        }
    };
    let content = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        // An assistant turn that only called tools has no content.
        None | Some(Value::Null) if role == "assistant" => String::new(),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| text_part(&at, j, p))
            .collect::<Result<Vec<_>, _>>()?
            .concat(),
        Some(v) => {
            return Err(ApiError::invalid(
                format!("{at}.content"),
                format!(
                    "`{at}.content` must be a string or an array of text parts, got {}",
                    kind_of(v)
                ),
            ));
        }
        None => {
            return Err(ApiError::invalid(
                format!("{at}.content"),
                format!("`{at}.content` is required"),
            ));
        }
    };
    Ok(ChatMessage { role, content })
}

fn text_part(at: &str, j: usize, p: &Value) -> Result<String, ApiError> {
    let param = format!("{at}.content[{j}]");
    let kind = p.get("type").and_then(Value::as_str);
    match (kind, p.get("text").and_then(Value::as_str)) {
        (Some("text"), Some(t)) => Ok(t.to_owned()),
        (Some("text"), None) => Err(ApiError::invalid(
            param.clone(),
            format!("`{param}.text` must be a string"),
        )),
        (Some(other), _) => Err(ApiError::invalid(
            param.clone(),
            format!("`{param}`: content parts of type `{other}` are not supported (text only)"),
        )),
        (None, _) => Err(ApiError::invalid(
            param.clone(),
            format!("`{param}` must be an object with `type` and `text`"),
        )),
    }
}

fn prompt(o: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let expected = "`prompt` must be a string, an array of one string, or an array of token ids";
    match o.get("prompt") {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(items)) => match items.as_slice() {
            [Value::String(s)] => Ok(Prompt::Text(s.clone())),
            [Value::Array(ids)] => token_ids(ids),
            [] => Err(ApiError::invalid("prompt", "`prompt` is empty")),
            [first, ..] if first.is_number() => token_ids(items),
            [_, _, ..] => Err(ApiError::invalid(
                "prompt",
                "`prompt` holds several prompts; this server answers one prompt per request",
            )),
            _ => Err(ApiError::invalid("prompt", expected)),
        },
        None | Some(Value::Null) => Err(ApiError::invalid("prompt", "`prompt` is required")),
        Some(v) => Err(ApiError::invalid(
            "prompt",
            format!("{expected}, got {}", kind_of(v)),
        )),
    }
}

fn token_ids(items: &[Value]) -> Result<Prompt, ApiError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_u64()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(|| {
                    ApiError::invalid(
                        format!("prompt[{i}]"),
                        format!("token ids must be non-negative integers, got {}", shown(v)),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Prompt::Tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<Request, ApiError> {
        parse(body.as_bytes(), Endpoint::Chat)
    }

    fn param_of(body: &str) -> Option<String> {
        chat(body).unwrap_err().param
    }

    #[test]
    fn a_minimal_chat_request_reads_with_defaults() {
        let r =
            chat(r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"extra":1}"#).unwrap();
        assert_eq!(r.model.as_deref(), Some("m"));
        assert_eq!(
            r.prompt,
            Prompt::Chat(vec![ChatMessage {
                role: "user".into(),
                content: "hi".into()
            }])
        );
        assert_eq!(
            (r.max_tokens, r.temperature, r.top_p, r.top_k),
            (None, None, 1.0, 0)
        );
        assert!(!r.stream && r.stop.is_empty());
    }

    #[test]
    fn every_field_reads() {
        let r = chat(
            r#"{"messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                {"role":"assistant","content":null},{"role":"user","content":"x"}],
                "max_tokens":5,"max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":-1,
                "seed":-3,"stop":["x","yy"],"stream":true,"stream_options":{"include_usage":true},"n":1,
                "logprobs":false,"frequency_penalty":0,"logit_bias":{},"response_format":{"type":"text"}}"#,
        )
        .unwrap();
        let Prompt::Chat(m) = &r.prompt else { panic!() };
        assert_eq!(m[0].content, "ab");
        assert_eq!(m[1].content, "");
        assert_eq!(r.max_tokens, Some(7));
        assert_eq!((r.temperature, r.top_p, r.top_k), (Some(0.5), 0.9, 0));
        assert_eq!(r.seed, Some((-3i64) as u64));
        assert_eq!(r.stop, vec!["x", "yy"]);
        assert!(r.stream && r.include_usage);
    }

    #[test]
    fn bad_fields_are_named() {
        let m = r#""messages":[{"role":"user","content":"hi"}]"#;
        let cases = [
            (format!("{{{m},\"temperature\":\"hot\"}}"), "temperature"),
            (format!("{{{m},\"temperature\":3}}"), "temperature"),
            (format!("{{{m},\"top_p\":0}}"), "top_p"),
            (format!("{{{m},\"top_k\":1.5}}"), "top_k"),
            (format!("{{{m},\"max_tokens\":0}}"), "max_tokens"),
            (format!("{{{m},\"max_tokens\":-4}}"), "max_tokens"),
            (format!("{{{m},\"n\":2}}"), "n"),
            (format!("{{{m},\"stop\":[1]}}"), "stop"),
            (format!("{{{m},\"stop\":\"\"}}"), "stop"),
            (format!("{{{m},\"stream\":\"yes\"}}"), "stream"),
            (format!("{{{m},\"logprobs\":true}}"), "logprobs"),
            (format!("{{{m},\"logit_bias\":{{\"5\":10}}}}"), "logit_bias"),
            (
                format!("{{{m},\"response_format\":{{\"type\":\"json_object\"}}}}"),
                "response_format",
            ),
            (format!("{{{m},\"model\":7}}"), "model"),
            (
                format!("{{{m},\"stream_options\":{{\"include_usage\":1}}}}"),
                "stream_options.include_usage",
            ),
            (r#"{"messages":[]}"#.into(), "messages"),
            (r#"{"messages":"hi"}"#.into(), "messages"),
            (r#"{}"#.into(), "messages"),
            (
                r#"{"messages":[{"content":"hi"}]}"#.into(),
                "messages[0].role",
            ),
            (
                r#"{"messages":[{"role":"user"}]}"#.into(),
                "messages[0].content",
            ),
            (
                r#"{"messages":[{"role":"user","content":5}]}"#.into(),
                "messages[0].content",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#.into(),
                "messages[0].content[0]",
            ),
        ];
        for (body, param) in cases {
            assert_eq!(param_of(&body).as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn malformed_bodies_are_refused_whole() {
        for body in ["", "{", "[1]", "\"x\"", "null"] {
            let e = chat(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param, None, "{body}");
        }
    }

    #[test]
    fn completion_prompts_read_in_each_shape() {
        let p = |b: &str| parse(b.as_bytes(), Endpoint::Completion).map(|r| r.prompt);
        assert_eq!(p(r#"{"prompt":"ab"}"#).unwrap(), Prompt::Text("ab".into()));
        assert_eq!(
            p(r#"{"prompt":["ab"]}"#).unwrap(),
            Prompt::Text("ab".into())
        );
        assert_eq!(
            p(r#"{"prompt":[1,2]}"#).unwrap(),
            Prompt::Tokens(vec![1, 2])
        );
        assert_eq!(p(r#"{"prompt":[[3]]}"#).unwrap(), Prompt::Tokens(vec![3]));
        for bad in [
            r#"{"prompt":["a","b"]}"#,
            r#"{"prompt":[-1]}"#,
            r#"{"prompt":5}"#,
            r#"{}"#,
            r#"{"prompt":[]}"#,
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
        let e = parse(br#"{"prompt":"a","echo":true}"#, Endpoint::Completion).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("echo"));
    }

    #[test]
    fn the_error_object_has_openais_shape() {
        let e = ApiError::invalid("top_p", "bad");
        assert_eq!(
            e.body(),
            json!({"error": {"message": "bad", "type": "invalid_request_error", "param": "top_p", "code": null}})
        );
    }
}
