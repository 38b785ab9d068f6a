//! End-to-end tests of `mlx-aot serve` on a llama-3.2-1b twin: plain HTTP over a
//! `TcpStream` (every byte of the replies checked: status, OpenAI's JSON shapes, the
//! server-sent events up to `data: [DONE]`), the official `openai` Python client, many
//! concurrent streams, every kind of bad input, a client that leaves mid-stream, a full
//! queue, and shutdown on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_mlx-aot");

/// The twin folder, synthesized once per test process.
fn model() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| twin("llama-3.2-1b", "llama-twin"))
}

/// Synthesizes the 4-bit twin of `preset` into a folder called `name`.
fn twin(preset: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mlx-aot-serve-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(BIN)
        .args([
            "synth", "--preset", preset, "--twin", "--bits", "4", "--out",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// A running server; killed when dropped.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        Self::start_on(model(), extra)
    }

    fn start_on(dir: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--port", "0", "--model"])
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap().to_owned();
                    let _ = tx.send(addr);
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(a) => a,
            Err(_) => panic!("the server did not start:\n{}", log.lock().unwrap()),
        };
        Server { child, addr, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn request(&self, method: &str, path: &str, body: Option<&str>) -> Reply {
        request(&self.addr, method, path, body)
    }

    fn post(&self, path: &str, body: &Value) -> Reply {
        self.request("POST", path, Some(&body.to_string()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP reply.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of a server-sent-events body, checked to end in `[DONE]`.
    fn events(&self) -> Vec<Value> {
        assert_eq!(self.status, 200, "{}", self.body);
        assert!(
            self.header("content-type")
                .unwrap_or("")
                .starts_with("text/event-stream"),
            "{:?}",
            self.headers
        );
        let data: Vec<&str> = self
            .body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .filter_map(|e| {
                // Keep-alive comments (`:`) carry no data.
                e.lines().find_map(|l| l.strip_prefix("data: "))
            })
            .collect();
        assert_eq!(data.last(), Some(&"[DONE]"), "{}", self.body);
        data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect()
    }
}

fn request(addr: &str, method: &str, path: &str, body: Option<&str>) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let text = String::from_utf8(raw.to_vec()).expect("a UTF-8 reply");
    let (head, rest) = text.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// A chunked body, reassembled (and checked to end with the zero chunk).
fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body =
        json!({"model": "llama-twin", "messages": [{"role": "user", "content": content}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The text of a streamed chat reply, with its finish reason.
fn streamed_text(events: &[Value]) -> (String, String) {
    let mut text = String::new();
    let mut finish = None;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["object"], "chat.completion.chunk", "{e}");
        let choices = e["choices"].as_array().unwrap();
        if choices.is_empty() {
            continue; // the usage chunk
        }
        let c = &choices[0];
        if i == 0 {
            assert_eq!(c["delta"]["role"], "assistant", "{e}");
        }
        if let Some(t) = c["delta"]["content"].as_str() {
            assert!(finish.is_none(), "text after the finish chunk: {e}");
            text.push_str(t);
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    (text, finish.expect("a chunk with finish_reason"))
}

/// One server most tests share.
fn shared() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let s = Server::start(&["--max-batch", "4", "--served-model-name", "llama-twin"]);
        // A static is never dropped: end the server when the test process exits.
        SHARED_PID.store(s.child.id(), std::sync::atomic::Ordering::SeqCst);
        // SAFETY: `atexit` of the C library this process runs on, given a function that
        // lives as long as the process.
        unsafe {
            atexit(kill_shared);
        }
        s
    })
}

/// The shared server's process id, for [`kill_shared`].
static SHARED_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

unsafe extern "C" {
    fn atexit(f: extern "C" fn()) -> i32;
}

/// Kills the shared server (registered with `atexit`).
extern "C" fn kill_shared() {
    let pid = SHARED_PID.load(std::sync::atomic::Ordering::SeqCst);
    if pid != 0 {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
}

#[test]
fn health_and_models() {
    let s = shared();
    let h = s.request("GET", "/health", None);
    assert_eq!((h.status, h.json()), (200, json!({"status": "ok"})));
    let m = s.request("GET", "/v1/models", None).json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "llama-twin");
    assert_eq!(m["data"][0]["object"], "model");
    assert_eq!(s.request("GET", "/v1/models/llama-twin", None).status, 200);
    assert_eq!(s.request("GET", "/v1/models/other", None).status, 404);
}

#[test]
fn a_chat_completion_equals_mlx_aot_run_and_counts_its_tokens() {
    let s = shared();
    let r = s.post(
        "/v1/chat/completions",
        &chat("t7 t9 t11", json!({"max_tokens": 12})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], "llama-twin");
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let text = choice["message"]["content"].as_str().unwrap();
    let usage = &v["usage"];
    let (p, c) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), p + c);
    assert!((1..=12).contains(&c), "{usage}");
    assert_eq!(
        choice["finish_reason"],
        if c == 12 { "length" } else { "stop" }
    );

    // The same greedy tokens as `mlx-aot run --chat` of the same prompt.
    let out = Command::new(BIN)
        .args([
            "run",
            "--chat",
            "--prompt",
            "t7 t9 t11",
            "--max-tokens",
            "12",
            "--model",
        ])
        .arg(model())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = String::from_utf8(out.stdout).unwrap();
    let run_text = run
        .rsplit_once('\n')
        .unwrap()
        .0
        .rsplit_once('\n')
        .map_or("", |(t, _)| t);
    assert_eq!(text, run_text, "server vs run:\n{run}");
    let figures = run.lines().last().unwrap();
    assert!(figures.contains(&format!("prompt {p} tokens")), "{figures}");
}

#[test]
fn a_streamed_chat_completion_has_openais_chunks_and_equals_the_whole_reply() {
    let s = shared();
    let whole = s
        .post(
            "/v1/chat/completions",
            &chat("t20 t21", json!({"max_tokens": 10})),
        )
        .json();
    let stream = s.post(
        "/v1/chat/completions",
        &chat(
            "t20 t21",
            json!({"max_tokens": 10, "stream": true, "stream_options": {"include_usage": true}}),
        ),
    );
    let events = stream.events();
    let (text, finish) = streamed_text(&events);
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(
        finish,
        whole["choices"][0]["finish_reason"].as_str().unwrap()
    );
    let ids: std::collections::HashSet<&str> =
        events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "one id per stream");
    let usage = &events.last().unwrap()["usage"];
    assert_eq!(usage, &whole["usage"], "{usage}");
}

#[test]
fn completions_whole_and_streamed() {
    let s = shared();
    let body = json!({"model": "llama-twin", "prompt": "t5 t6 t7", "max_tokens": 8});
    let whole = s.post("/v1/completions", &body).json();
    assert_eq!(whole["object"], "text_completion");
    let text = whole["choices"][0]["text"].as_str().unwrap().to_owned();
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = s.post("/v1/completions", &streamed).events();
    let joined: String = events
        .iter()
        .map(|e| e["choices"][0]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(joined, text);
    assert_eq!(
        events.last().unwrap()["choices"][0]["finish_reason"],
        whole["choices"][0]["finish_reason"]
    );
    // Token ids as the prompt.
    let ids = s
        .post(
            "/v1/completions",
            &json!({"prompt": [2, 5, 6, 7], "max_tokens": 8}),
        )
        .json();
    assert_eq!(ids["choices"][0]["text"], whole["choices"][0]["text"]);
}

#[test]
fn a_stop_string_ends_the_reply_before_it_even_across_tokens() {
    let s = shared();
    let body = json!({"prompt": "t5 t6 t7", "max_tokens": 8});
    let whole = s.post("/v1/completions", &body).json();
    let text = whole["choices"][0]["text"].as_str().unwrap().to_owned();
    let words: Vec<&str> = text.split(' ').filter(|w| !w.is_empty()).collect();
    assert!(words.len() >= 3, "need a few words to cut: {text:?}");
    // A stop string spanning the end of word 1, the space, and the start of word 2.
    let w1 = words[1];
    let w2 = words[2];
    let stop = format!("{} {}", &w1[w1.len() - 1..], &w2[..1]);
    let cut = text.find(&stop).unwrap();
    for stream in [false, true] {
        let mut b = body.clone();
        b["stop"] = json!([stop.clone(), "never-appears"]);
        b["stream"] = json!(stream);
        let r = s.post("/v1/completions", &b);
        let (got, finish) = if stream {
            let events = r.events();
            let t: String = events
                .iter()
                .map(|e| e["choices"][0]["text"].as_str().unwrap_or(""))
                .collect();
            (
                t,
                events.last().unwrap()["choices"][0]["finish_reason"].clone(),
            )
        } else {
            let v = r.json();
            (
                v["choices"][0]["text"].as_str().unwrap().to_owned(),
                v["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(got, text[..cut], "stream {stream}");
        assert_eq!(finish, "stop");
    }
}

#[test]
fn bad_input_gets_a_4xx_with_openais_error_object() {
    let s = shared();
    let m = r#""messages":[{"role":"user","content":"t5"}]"#;
    let cases: Vec<(String, u16, Option<&str>)> = vec![
        ("{not json".into(), 400, None),
        ("[]".into(), 400, None),
        (r#"{"messages":[]}"#.into(), 400, Some("messages")),
        (r#"{"messages":"t5"}"#.into(), 400, Some("messages")),
        (
            r#"{"messages":[{"role":"user"}]}"#.into(),
            400,
            Some("messages[0].content"),
        ),
        (
            format!("{{{m},\"temperature\":-1}}"),
            400,
            Some("temperature"),
        ),
        (
            format!("{{{m},\"temperature\":\"warm\"}}"),
            400,
            Some("temperature"),
        ),
        (format!("{{{m},\"top_p\":1.5}}"), 400, Some("top_p")),
        (format!("{{{m},\"top_k\":-7}}"), 400, Some("top_k")),
        (format!("{{{m},\"max_tokens\":0}}"), 400, Some("max_tokens")),
        (
            format!("{{{m},\"max_tokens\":\"ten\"}}"),
            400,
            Some("max_tokens"),
        ),
        (format!("{{{m},\"n\":3}}"), 400, Some("n")),
        (format!("{{{m},\"stop\":{{}}}}"), 400, Some("stop")),
        (format!("{{{m},\"model\":\"gpt-4o\"}}"), 404, Some("model")),
        (
            format!("{{{m},\"max_tokens\":100000000}}"),
            400,
            Some("max_tokens"),
        ),
    ];
    for (body, status, param) in cases {
        let r = s.request("POST", "/v1/chat/completions", Some(&body));
        assert_eq!(r.status, status, "{body}: {}", r.body);
        let e = r.json();
        let err = &e["error"];
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{e}"
        );
        assert!(err["type"].is_string(), "{e}");
        assert_eq!(err["param"].as_str(), param, "{body}: {e}");
    }
    // The context limit is named.
    let r = s.request(
        "POST",
        "/v1/chat/completions",
        Some(&format!("{{{m},\"max_tokens\":100000000}}")),
    );
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("context limit of"),
        "{}",
        r.body
    );
    let r = s.request("POST", "/v1/completions", Some(r#"{"prompt":[999999]}"#));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(s.request("GET", "/v1/nothing", None).status, 404);
    assert_eq!(s.request("GET", "/v1/chat/completions", None).status, 405);
    // Still serving.
    assert_eq!(s.request("GET", "/health", None).status, 200);
}

#[test]
fn sixteen_concurrent_streams_all_finish_well_formed_and_equal_their_solo_replies() {
    let s = Server::start(&["--max-batch", "8", "--queue", "32"]);
    let prompt = |i: usize| format!("t{} t{}", 10 + i, 40 + 3 * i);
    let body =
        |i: usize, stream: bool| json!({"prompt": prompt(i), "max_tokens": 16, "stream": stream});
    // Each alone first (greedy).
    let solo: Vec<String> = (0..16)
        .map(|i| {
            s.post("/v1/completions", &body(i, false)).json()["choices"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let addr = s.addr.clone();
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let addr = addr.clone();
            let b = body(i, true).to_string();
            std::thread::spawn(move || request(&addr, "POST", "/v1/completions", Some(&b)))
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t.join().unwrap();
        let events = r.events();
        let text: String = events
            .iter()
            .map(|e| e["choices"][0]["text"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(text, solo[i], "stream {i}");
        assert!(events.last().unwrap()["choices"][0]["finish_reason"].is_string());
    }
}

/// A Gemma 4 model with float KV (plain caches and sliding-window rings) batches its
/// requests. Concurrent streams whose prompts and replies fit the twin's 16-token window
/// equal their replies alone, token for token; streams decoding past the window finish
/// well-formed, their first token (from their own prefill) equal to alone. Past a wrap
/// the batch's ring holds a row's keys in another rotation than the row's own ring
/// (one write index serves every row), so attention sums them in another order and the
/// tokens may differ (README, "Is a request's output under batching the same as alone?").
#[test]
fn a_gemma4_model_with_rings_batches_concurrent_requests() {
    let dir = twin("gemma4-e4b-float", "gemma4-twin");
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let window = config
        .pointer("/text_config/sliding_window")
        .or(config.get("sliding_window"))
        .and_then(Value::as_u64)
        .expect("the twin's sliding_window") as usize;
    let s = Server::start_on(&dir, &["--max-batch", "4"]);
    // (prompt length, max_tokens): four within the window, three past it.
    let short = 8;
    let cases: Vec<(usize, usize)> = [1, 3, 5, window - short]
        .into_iter()
        .map(|n| (n, short))
        .chain([(2, 24), (6, 24), (10, 24)])
        .collect();
    let body = |i: usize, stream: bool| {
        let (n, max) = cases[i];
        let ids: Vec<usize> = (0..n).map(|j| 5 + 7 * i + j).collect();
        json!({"prompt": ids, "max_tokens": max, "stream": stream})
    };
    let solo: Vec<String> = (0..cases.len())
        .map(|i| {
            let r = s.post("/v1/completions", &body(i, false));
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()["choices"][0]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    // The short ones together, then the long ones together.
    for group in [0..4, 4..cases.len()] {
        let threads: Vec<_> = group
            .clone()
            .map(|i| {
                let addr = s.addr.clone();
                let b = body(i, true).to_string();
                std::thread::spawn(move || request(&addr, "POST", "/v1/completions", Some(&b)))
            })
            .collect();
        for (i, t) in group.zip(threads) {
            let events = t.join().unwrap().events();
            assert!(events.last().unwrap()["choices"][0]["finish_reason"].is_string());
            let text: String = events
                .iter()
                .map(|e| e["choices"][0]["text"].as_str().unwrap_or(""))
                .collect();
            let (n, max) = cases[i];
            if n + max <= window {
                assert_eq!(text, solo[i], "stream {i} (within the window)");
            } else {
                let first = |t: &str| t.split_whitespace().next().map(str::to_owned);
                assert_eq!(first(&text), first(&solo[i]), "stream {i}: its first token");
            }
        }
    }
    assert!(s.log().contains("(batched)"), "{}", s.log());
}

/// A model whose caches cannot be batched (the MLA family's latent caches) serves
/// concurrent requests each on its own forward, every one as it is alone.
#[test]
fn an_mla_model_serves_concurrent_requests_each_on_its_own_forward() {
    let dir = twin("deepseek-v3.2", "deepseek-twin");
    let s = Server::start_on(&dir, &["--max-batch", "4"]);
    let body = |i: usize, stream: bool| json!({"prompt": format!("t{} t{}", 3 + i, 90 + i), "max_tokens": 6, "stream": stream});
    let solo: Vec<String> = (0..4)
        .map(|i| {
            let r = s.post("/v1/completions", &body(i, false));
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()["choices"][0]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let addr = s.addr.clone();
            let b = body(i, true).to_string();
            std::thread::spawn(move || request(&addr, "POST", "/v1/completions", Some(&b)))
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let events = t.join().unwrap().events();
        let text: String = events
            .iter()
            .map(|e| e["choices"][0]["text"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(text, solo[i], "stream {i}");
    }
    assert!(s.log().contains("one forward per request"), "{}", s.log());
}

#[test]
fn a_client_that_leaves_mid_stream_frees_its_row() {
    let s = Server::start(&["--max-batch", "1", "--queue", "4"]);
    let body = json!({"prompt": "t5 t6", "max_tokens": 4000, "stream": true}).to_string();
    let mut c = send(&s.addr, "/v1/completions", &body);
    let mut first = [0u8; 256];
    let n = c.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    drop(c);
    // With one place, the next request only runs once the abandoned row is gone.
    let started = Instant::now();
    let r = s.post("/v1/completions", &json!({"prompt": "t5", "max_tokens": 3}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "the abandoned request kept its place"
    );
    let log = s.log();
    assert!(log.contains("client left"), "{log}");
}

/// Writes a POST of `body` to `path` on a new connection, without reading.
fn send(addr: &str, path: &str, body: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    c
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let s = Server::start(&["--max-batch", "1", "--queue", "1"]);
    let long = json!({"prompt": "t5 t6", "max_tokens": 4000, "stream": true}).to_string();
    // The first runs (its headers arrive once it has started) and keeps the one place.
    let mut running = send(&s.addr, "/v1/completions", &long);
    let mut first = [0u8; 64];
    let _ = running.read(&mut first).unwrap();
    // Of two more, one waits in the queue of one and the other is refused at once.
    let others: Vec<_> = (0..2)
        .map(|_| {
            let mut c = send(&s.addr, "/v1/completions", &long);
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut raw = Vec::new();
                let _ = c.read_to_end(&mut raw);
                raw
            })
        })
        .collect();
    let replies: Vec<Vec<u8>> = others.into_iter().map(|t| t.join().unwrap()).collect();
    let refused: Vec<Reply> = replies
        .iter()
        .filter(|r| r.starts_with(b"HTTP/1.1 429"))
        .map(|r| parse_reply(r))
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "{:?}",
        replies
            .iter()
            .map(|r| String::from_utf8_lossy(r))
            .collect::<Vec<_>>()
    );
    let r = &refused[0];
    assert_eq!(r.header("retry-after"), Some("1"), "{:?}", r.headers);
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    drop(running);
}

#[test]
fn sigterm_stops_accepting_finishes_in_flight_work_and_exits_0() {
    let mut s = Server::start(&["--max-batch", "2", "--shutdown-timeout", "5"]);
    let addr = s.addr.clone();
    let in_flight = std::thread::spawn(move || {
        request(
            &addr,
            "POST",
            "/v1/completions",
            Some(&json!({"prompt": "t5 t6", "max_tokens": 4000, "stream": true}).to_string()),
        )
    });
    std::thread::sleep(Duration::from_secs(2));
    let pid = s.child.id().to_string();
    // The shell's kill: a fresh machine may lack procps.
    let kill = format!("kill -TERM {pid}");
    assert!(
        Command::new("sh")
            .args(["-c", &kill])
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no exit after SIGTERM:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}:\n{}", s.log());
    // The stream was cancelled at the bound, and still ended well-formed.
    let r = in_flight.join().unwrap();
    let events = r.events();
    let last = events.last().unwrap();
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{last}"
    );
    let log = s.log();
    assert!(
        log.contains("shutting down") && log.contains("stopped"),
        "{log}"
    );
}

#[test]
fn the_official_openai_client_chats_streams_and_sees_errors() {
    let env = parity_tests::reference::python_env().expect("the Python reference venv");
    let s = shared();
    let script = r#"
import sys, openai
client = openai.OpenAI(base_url=f"http://{sys.argv[1]}/v1", api_key="none")
models = [m.id for m in client.models.list()]
assert models == ["llama-twin"], models
r = client.chat.completions.create(model="llama-twin", messages=[{"role": "user", "content": "t7 t9"}], max_tokens=6)
whole = r.choices[0].message.content
assert r.usage.completion_tokens >= 1 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
parts = []
for chunk in client.chat.completions.create(model="llama-twin", messages=[{"role": "user", "content": "t7 t9"}], max_tokens=6, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
assert "".join(parts) == whole, (parts, whole)
c = client.completions.create(model="llama-twin", prompt="t5 t6", max_tokens=4, temperature=0.7, top_p=0.9, seed=3)
assert c.choices[0].finish_reason in ("stop", "length")
try:
    client.chat.completions.create(model="llama-twin", messages=[], max_tokens=2)
    raise SystemExit("no error for empty messages")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "messages" in str(e), e
try:
    client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    raise SystemExit("no error for an unknown model")
except openai.NotFoundError as e:
    assert e.status_code == 404, e
print("ok", repr(whole))
"#;
    let out = Command::new(env.python())
        .args(["-c", script, &s.addr])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok"));
}
