//! End-to-end tests of the `mlx-aot` binary: synth an e4b twin, then run, logits, inspect
//! and plan on it, mlx-lm loading the same folder, and every bad input ending as one
//! `error:` line on stderr with a non-zero exit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mlx-aot");

/// A folder of this test process under the target's tmp dir; folders of earlier
/// processes that are gone are removed.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mlx-aot-cli");
        std::fs::create_dir_all(&root).unwrap();
        for entry in std::fs::read_dir(&root).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("pid-")
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = root.join(format!("pid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

fn mlx_aot(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the mlx-aot binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// Asserts success and returns stdout.
fn ok(args: &[&str]) -> String {
    let o = mlx_aot(args);
    assert!(
        o.status.success(),
        "mlx-aot {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Asserts a failure with exactly one stderr line `error: ...`, no panic; returns it.
fn fails(args: &[&str]) -> String {
    let o = mlx_aot(args);
    let err = stderr(&o);
    assert!(
        !o.status.success(),
        "mlx-aot {args:?} succeeded; stdout: {}",
        stdout(&o)
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: expected one stderr line, got:\n{err}"
    );
    assert!(lines[0].starts_with("error: "), "{args:?}: {err}");
    assert!(
        !lines[0].starts_with("error: internal error"),
        "{args:?}: {err}"
    );
    lines[0].to_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a utf-8 path")
}

/// `synth --preset gemma4-e4b --twin` once per test process.
fn e4b() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch().join("e4b");
        let out = ok(&[
            "synth",
            "--preset",
            "gemma4-e4b",
            "--twin",
            "--seed",
            "3",
            "--out",
            path(&dir),
        ]);
        assert!(out.contains("wrote"), "{out}");
        dir
    })
}

/// The figures line: `... | fast path N/M forwards` -> (N, M).
fn fast_path(line: &str) -> (u64, u64) {
    let tail = line
        .rsplit("fast path ")
        .next()
        .and_then(|t| t.strip_suffix(" forwards"))
        .unwrap_or_else(|| panic!("no fast path figure in {line:?}"));
    let (n, m) = tail.split_once('/').expect("N/M");
    (n.parse().unwrap(), m.parse().unwrap())
}

#[test]
fn synth_writes_a_loadable_folder_and_rewrites_its_own() {
    let dir = e4b();
    for f in [
        "config.json",
        "kv_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let hidden: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "partial files left: {hidden:?}");

    // A previous synth folder may be rewritten; a float preset removes the old kv config.
    let again = scratch().join("rewrite");
    ok(&[
        "synth",
        "--preset",
        "gemma4-e4b",
        "--twin",
        "--out",
        path(&again),
    ]);
    ok(&[
        "synth",
        "--preset",
        "gemma4-e2b",
        "--twin",
        "--bits",
        "4",
        "--out",
        path(&again),
    ]);
    assert!(!again.join("kv_config.json").exists());
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(again.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["quantization"]["bits"], 4);
    let out = ok(&[
        "run",
        "--model",
        path(&again),
        "--prompt",
        "t5 t6",
        "--max-tokens",
        "3",
    ]);
    assert!(out.contains("gemma4-e2b-generated"), "{out}");

    // A folder holding anything else is refused, and left alone.
    let foreign = scratch().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let err = fails(&[
        "synth",
        "--preset",
        "gemma4-e4b",
        "--twin",
        "--out",
        path(&foreign),
    ]);
    assert!(err.contains("notes.txt"), "{err}");
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 1);
}

#[test]
fn run_streams_text_and_ends_with_one_figures_line() {
    let dir = e4b();
    let o = mlx_aot(&[
        "run",
        "--model",
        path(dir),
        "--prompt",
        "hello",
        "--max-tokens",
        "12",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "nothing on stderr when all is well");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "text, then figures:\n{out}");
    let words: Vec<&str> = lines[0].split_whitespace().collect();
    assert!(!words.is_empty() && words.len() <= 12, "{out}");
    assert!(words.iter().all(|w| w.starts_with('t')), "{out}");
    let figures = lines[1];
    // The warm-up's time comes first, apart from the prefill's.
    assert!(
        figures.starts_with("cold start ") && figures.contains(" s | prompt 2 tokens | prefill "),
        "{figures}"
    );
    for part in ["tok/s", "decode ", "peak ", "gemma4-e4b-generated"] {
        assert!(figures.contains(part), "{part}: {figures}");
    }
    // The prompt's first token fills float caches (the monolith); the kv policy then
    // converts them, and the last prompt token's step and every decode step take the
    // fast path.
    let (fast, forwards) = fast_path(figures);
    assert_eq!(fast, forwards - 1, "{figures}");
    // Two prefill forwards (the first token, then the last one's step). A run that
    // reached --max-tokens did not forward its last token; one that met an eos token
    // forwarded every emitted one.
    let expected = if words.len() == 12 {
        13
    } else {
        words.len() + 2
    };
    assert_eq!(forwards as usize, expected, "{figures}");

    // The chat template wraps the prompt: <bos> <start_of_turn> user t7 <end_of_turn> ...
    // (without a warm-up, so the figures start with the prompt).
    let out = ok(&[
        "run",
        "--model",
        path(dir),
        "--prompt",
        "t7",
        "--chat",
        "--max-tokens",
        "2",
        "--no-warm-up",
    ]);
    assert!(
        out.lines().last().unwrap().starts_with("prompt 7 tokens"),
        "{out}"
    );

    // Seeded sampling repeats; --impl monolith gives the same text as generated.
    let sample = |imp: &str| {
        let out = ok(&[
            "run",
            "--model",
            path(dir),
            "--prompt",
            "t9 t10",
            "--max-tokens",
            "6",
            "--temperature",
            "0.8",
            "--top-p",
            "0.9",
            "--seed",
            "7",
            "--impl",
            imp,
        ]);
        out.lines().next().unwrap().to_owned()
    };
    assert_eq!(sample("generated"), sample("monolith"));
}

#[test]
fn run_output_streams_before_the_process_ends() {
    let dir = e4b();
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--model",
            path(dir),
            "--prompt",
            "hello",
            "--max-tokens",
            "80",
            "--kv",
            "float",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    let still_running = child.try_wait().unwrap().is_none();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let words = rest
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .count();
    // Only meaningful when generation ran long enough to be caught mid-way.
    if words > 40 {
        assert!(
            still_running,
            "the first byte arrived only when the process had ended"
        );
    }
    assert_eq!(first[0], b't');
}

/// The safetensors header of `file`: (dtype, shape) of tensor `logits`, and every name.
fn logits_header(file: &Path) -> (String, Vec<u64>, Vec<String>) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let names = header
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    let t = &header["logits"];
    let shape = t["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    (t["dtype"].as_str().unwrap().to_owned(), shape, names)
}

#[test]
fn logits_of_monolith_and_generated_are_byte_identical() {
    let dir = e4b();
    // 30 tokens: a prefill of 5 (float caches), then 25 decode steps on the quantized
    // caches, across the twin's window of 16.
    let tokens: Vec<String> = (0..30).map(|i| ((i * 37 + 11) % 512).to_string()).collect();
    let tokens = tokens.join(",");
    let walk = |imp: &str, kv: &str| -> (PathBuf, String) {
        let out = scratch().join(format!("logits-{imp}-{kv}.safetensors"));
        let line = ok(&[
            "logits",
            "--model",
            path(dir),
            "--tokens",
            &tokens,
            "--prefill",
            "5",
            "--kv",
            kv,
            "--impl",
            imp,
            "--out",
            path(&out),
        ]);
        (out, line)
    };
    let (m, m_line) = walk("monolith", "config");
    let (g, g_line) = walk("generated", "config");
    assert!(m_line.contains("gemma4-monolith"), "{m_line}");
    assert_eq!(fast_path(m_line.trim()), (0, 26), "{m_line}");
    // The generated implementation really ran: every decode step on the fast path.
    assert!(g_line.contains("gemma4-e4b-generated"), "{g_line}");
    assert_eq!(fast_path(g_line.trim()), (25, 26), "{g_line}");
    let (mb, gb) = (std::fs::read(&m).unwrap(), std::fs::read(&g).unwrap());
    assert!(mb == gb, "the logits files differ");
    let (dtype, shape, names) = logits_header(&m);
    assert_eq!(dtype, "F32");
    assert_eq!(shape, vec![30, 512]);
    assert_eq!(names, vec!["logits".to_owned()]);
    // No temporary file left beside it.
    let partial: Vec<String> = std::fs::read_dir(scratch())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(partial.is_empty(), "{partial:?}");

    // On float caches no generated implementation matches: --impl generated refuses,
    // auto runs the monolith.
    let err = fails(&[
        "logits",
        "--model",
        path(dir),
        "--tokens",
        "1,2,3",
        // Every cache at 8 bits: a layout no generated model was made for.
        "--kv",
        "8",
        "--impl",
        "generated",
        "--out",
        path(&scratch().join("never.safetensors")),
    ]);
    assert!(err.contains("refusing to fall back"), "{err}");
    assert!(!scratch().join("never.safetensors").exists());
    let (_, line) = walk("auto", "8");
    assert!(line.contains("gemma4-monolith"), "{line}");
}

#[test]
fn inspect_shows_the_plan_fingerprint_and_matching_implementation() {
    let dir = e4b();
    let text = ok(&["inspect", "--model", path(dir)]);
    let fingerprint = generated::models::gemma4_e4b::FINGERPRINT;
    assert!(
        text.contains(&format!("fingerprint  {fingerprint}")),
        "{text}"
    );
    assert!(
        text.contains("implementation gemma4-e4b-generated"),
        "{text}"
    );
    assert!(text.contains("sharer of 22"), "{text}");
    assert!(text.contains("kv:rotating-quant:4:64"), "{text}");

    let j: Value = serde_json::from_str(&ok(&["inspect", "--model", path(dir), "--json"])).unwrap();
    assert_eq!(j["fingerprint"], fingerprint);
    assert_eq!(j["implementation"], "gemma4-e4b-generated");
    let layers = j["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 42);
    let sharers = layers.iter().filter(|l| l["kv"] == "sharer").count();
    assert_eq!(sharers, 18);
    assert_eq!(j["caches"].as_array().unwrap().len(), 24);
    assert_eq!(j["config"]["vocab_size"], 512);
    // Sharers read their donor's cache signature.
    for l in layers.iter().filter(|l| l["kv"] == "sharer") {
        let donor = l["donor"].as_u64().unwrap() as usize;
        assert_eq!(l["cache"], layers[donor]["cache"]);
    }

    let j: Value = serde_json::from_str(&ok(&[
        "inspect",
        "--model",
        path(dir),
        "--kv",
        "8",
        "--json",
    ]))
    .unwrap();
    assert_eq!(j["implementation"], Value::Null);
    assert_ne!(j["fingerprint"], fingerprint);
    assert!(ok(&["inspect", "--model", path(dir), "--kv", "8"]).contains("monolith only"));
    // Float caches have their own generated model.
    let j: Value = serde_json::from_str(&ok(&[
        "inspect",
        "--model",
        path(dir),
        "--kv",
        "float",
        "--json",
    ]))
    .unwrap();
    assert_eq!(j["implementation"], "gemma4-e4b-float-generated");
}

fn plan_json(args: &[&str]) -> Value {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.push("--json");
    let v: Value = serde_json::from_str(&ok(&all)).unwrap();
    v["plan"].clone()
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn check_consistent(p: &Value) {
    let kv: u64 = p["caches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| n(&c["bytes"]))
        .sum();
    assert_eq!(n(&p["kv"]), kv);
    for c in p["caches"].as_array().unwrap() {
        assert_eq!(n(&c["bytes"]), n(&c["bytes_per_token"]) * n(&c["rows"]));
    }
    assert_eq!(
        n(&p["total"]),
        n(&p["weights"]) + n(&p["kv"]) + n(&p["transient"]) + n(&p["reserve"])
    );
    assert_eq!(
        p["fits"].as_bool().unwrap(),
        n(&p["total"]) <= n(&p["usable"])
    );
}

#[test]
fn plan_numbers_are_consistent() {
    for preset in [
        "gemma4-e2b",
        "gemma4-e4b",
        "gemma4-12b",
        "gemma4-26b-a4b",
        "gemma4-31b",
    ] {
        let p = plan_json(&["--preset", preset, "--context", "4096", "--memory", "140"]);
        check_consistent(&p);
        assert_eq!(n(&p["usable"]), 140_000_000_000);
        assert!(p["fits"].as_bool().unwrap(), "{preset}");
        // The largest safe context is the boundary.
        let max = n(&p["max_context"]).to_string();
        let at = plan_json(&["--preset", preset, "--context", &max, "--memory", "140"]);
        assert!(at["fits"].as_bool().unwrap(), "{preset}");
        let over = (n(&p["max_context"]) + 1).to_string();
        let past = plan_json(&["--preset", preset, "--context", &over, "--memory", "140"]);
        assert!(!past["fits"].as_bool().unwrap(), "{preset}");
        // bf16 weights weigh more than 4-bit ones.
        let bf16 = plan_json(&[
            "--preset",
            preset,
            "--context",
            "4096",
            "--memory",
            "140",
            "--bits",
            "16",
        ]);
        assert!(n(&bf16["weights"]) > 3 * n(&p["weights"]), "{preset}");
        // Rings are capped at the window: a longer context grows only full caches.
        let long = plan_json(&["--preset", preset, "--context", "131072", "--memory", "140"]);
        check_consistent(&long);
        for (a, b) in p["caches"]
            .as_array()
            .unwrap()
            .iter()
            .zip(long["caches"].as_array().unwrap())
        {
            if a["signature"].as_str().unwrap().contains("rotating") {
                assert_eq!(a["rows"], b["rows"], "{preset}");
            } else {
                assert_eq!(n(&b["rows"]), 131072, "{preset}");
            }
        }
    }

    // A model folder: weight bytes measured from its file.
    let dir = e4b();
    let p = plan_json(&["--model", path(dir), "--context", "64", "--memory", "2"]);
    check_consistent(&p);
    let file = std::fs::metadata(dir.join("model.safetensors"))
        .unwrap()
        .len();
    assert!(n(&p["weights"]) < file && n(&p["weights"]) > file * 9 / 10);
    assert_eq!(p["caches"].as_array().unwrap().len(), 24);
    let text = ok(&[
        "plan",
        "--model",
        path(dir),
        "--context",
        "64",
        "--memory",
        "2",
    ]);
    assert!(text.contains("largest safe context"), "{text}");
    assert!(text.contains(": fits"), "{text}");
    let text = ok(&[
        "plan",
        "--preset",
        "gemma4-31b",
        "--context",
        "4096",
        "--memory",
        "1",
    ]);
    assert!(text.contains("does NOT fit"), "{text}");
    assert!(text.contains("model limit  262144 tokens"), "{text}");
}

#[test]
fn run_refuses_a_context_over_the_memory_plan_before_loading() {
    let dir = e4b();
    let err = fails(&[
        "run",
        "--model",
        path(dir),
        "--prompt",
        "hello",
        "--max-tokens",
        "1000000000000",
    ]);
    assert!(err.contains("largest safe context"), "{err}");
    assert!(err.contains("GB are usable"), "{err}");
}

#[test]
fn bad_input_is_one_error_line_and_a_failure() {
    let dir = e4b();
    let d = path(dir);
    let missing = path(&scratch().join("no-such-folder")).to_owned();
    let empty = scratch().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    // A folder whose tokenizer.json is not a tokenizer.
    let broken = scratch().join("broken-tokenizer");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["config.json", "kv_config.json", "model.safetensors"] {
        let link = broken.join(f);
        if !link.exists() {
            std::os::unix::fs::symlink(dir.join(f), link).unwrap();
        }
    }
    std::fs::write(broken.join("tokenizer.json"), "{ not a tokenizer").unwrap();
    let out = path(&scratch().join("bad.safetensors")).to_owned();

    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "--model", &missing, "--prompt", "hi"],
            "does not exist",
        ),
        (
            vec!["run", "--model", path(&empty), "--prompt", "hi"],
            "no config.json",
        ),
        (
            vec!["run", "--model", path(&broken), "--prompt", "hi"],
            "tokenizer",
        ),
        (vec!["run", "--model", d, "--prompt", ""], "empty"),
        (
            vec!["run", "--model", d, "--prompt", "hi", "--top-p", "2"],
            "top-p",
        ),
        (
            vec!["run", "--model", d, "--prompt", "hi", "--temperature", "-1"],
            "temperature",
        ),
        (
            vec!["run", "--model", d, "--prompt", "hi", "--kv", "3"],
            "KV caches support",
        ),
        (
            vec!["run", "--model", d, "--prompt", "hi", "--kv", "fp8"],
            "--kv",
        ),
        (
            vec!["run", "--model", d, "--prompt", "hi", "--impl", "nope"],
            "not registered",
        ),
        (
            vec![
                "logits", "--model", d, "--tokens", "1,2,9999", "--out", &out,
            ],
            "outside the vocabulary",
        ),
        (
            vec!["logits", "--model", d, "--tokens", "1,x", "--out", &out],
            "not a token id",
        ),
        (
            vec![
                "logits",
                "--model",
                d,
                "--tokens",
                "1,2",
                "--prefill",
                "3",
                "--out",
                &out,
            ],
            "--prefill",
        ),
        (
            vec![
                "logits", "--model", &missing, "--tokens", "1", "--out", &out,
            ],
            "does not exist",
        ),
        (
            vec!["synth", "--preset", "gemma5", "--out", &missing],
            "unknown preset",
        ),
        (
            vec![
                "synth",
                "--preset",
                "gemma4-e4b",
                "--bits",
                "7",
                "--out",
                &missing,
            ],
            "bits",
        ),
        (
            vec!["plan", "--preset", "gemma5", "--context", "10"],
            "unknown preset",
        ),
        (
            vec!["plan", "--preset", "gemma4-e4b", "--context", "0"],
            "--context",
        ),
        (vec!["inspect", "--model", path(&empty)], "no config.json"),
        (vec!["run", "--model", d], "--prompt"),
        (
            vec!["run", "--model", d, "--prompt", "hi", "--bogus"],
            "--bogus",
        ),
        (vec!["frobnicate"], "frobnicate"),
        (
            vec![
                "run",
                "--model",
                d,
                "--prompt",
                "hi",
                "--pipeline",
                "sideways",
            ],
            "sideways",
        ),
        (
            vec!["bench", "--model", d, "--impls", "generated:sideways"],
            "unknown pipeline \"sideways\"",
        ),
    ];
    for (args, needle) in &cases {
        let err = fails(args);
        assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    }
    assert!(
        !Path::new(&missing).exists(),
        "a failed synth wrote its folder"
    );
    assert!(!Path::new(&out).exists());

    // --kv config on a folder without kv_config.json.
    let float_folder = scratch().join("float-e2b");
    ok(&[
        "synth",
        "--preset",
        "gemma4-e2b",
        "--twin",
        "--out",
        path(&float_folder),
    ]);
    let err = fails(&[
        "run",
        "--model",
        path(&float_folder),
        "--prompt",
        "hi",
        "--kv",
        "config",
    ]);
    assert!(err.contains("no kv_config.json"), "{err}");
}

/// Every decode pipeline streams the same text (the threaded one on a second thread).
#[test]
fn every_pipeline_streams_the_same_text() {
    let dir = e4b();
    let text = |pipeline: &str| -> String {
        let out = ok(&[
            "run",
            "--model",
            path(dir),
            "--prompt",
            "hello there",
            "--max-tokens",
            "16",
            "--pipeline",
            pipeline,
        ]);
        out.lines().next().unwrap_or("").to_owned()
    };
    let ahead = text("ahead");
    assert!(!ahead.is_empty());
    for pipeline in ["off", "threaded", "auto"] {
        assert_eq!(text(pipeline), ahead, "--pipeline {pipeline}");
    }
}

/// mlx-lm loads a synth folder (weights and tokenizer), and its greedy generation on
/// float caches is the text `mlx-aot run --kv float` streams.
#[test]
fn mlx_lm_loads_synth_folders_and_generates_the_same_text() {
    let env = parity_tests::reference::python_env().expect("the Python reference environment");
    let quantized = scratch().join("e2b-q4");
    ok(&[
        "synth",
        "--preset",
        "gemma4-e2b",
        "--twin",
        "--bits",
        "4",
        "--seed",
        "5",
        "--out",
        path(&quantized),
    ]);
    let script = r#"
import sys, mlx_lm
model, tok = mlx_lm.load(sys.argv[1])
assert tok.encode("t5 t9 hello") == [2, 5, 9, 3], tok.encode("t5 t9 hello")
assert set(tok.eos_token_ids) == {1, 106}, tok.eos_token_ids
chat = tok.apply_chat_template([{"role": "user", "content": "t7"}], add_generation_prompt=True, tokenize=False)
assert chat == "<bos><start_of_turn>user\nt7<end_of_turn>\n<start_of_turn>model\n", repr(chat)
print(mlx_lm.generate(model, tok, prompt=sys.argv[2], max_tokens=int(sys.argv[3]), verbose=False))
"#;
    for dir in [e4b(), quantized.as_path()] {
        let o = Command::new(env.python())
            .args(["-c", script, path(dir), "hello t12", "8"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "mlx-lm on {}: {}",
            dir.display(),
            stderr(&o)
        );
        let theirs = stdout(&o).trim().to_owned();
        let ours = ok(&[
            "run",
            "--model",
            path(dir),
            "--prompt",
            "hello t12",
            "--max-tokens",
            "8",
            "--kv",
            "float",
        ]);
        assert_eq!(
            ours.lines().next().unwrap().trim(),
            theirs,
            "{}",
            dir.display()
        );
    }
}

#[test]
fn run_without_a_model_uses_the_embedded_default() {
    let cache = scratch().join("xdg-cache");
    let run = || {
        Command::new(BIN)
            .args(["run", "--prompt", "hello", "--max-tokens", "6"])
            .env("XDG_CACHE_HOME", &cache)
            .stdin(Stdio::null())
            .output()
            .expect("the mlx-aot binary runs")
    };
    let first = run();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("synthesizing the default model"),
        "{}",
        stderr(&first)
    );
    let figures = stdout(&first).lines().last().unwrap_or_default().to_owned();
    assert!(figures.contains("gemma4-e4b-generated"), "{figures}");
    // The second run reuses the synthesized folder and generates the same text.
    let second = run();
    assert!(second.status.success());
    assert!(!stderr(&second).contains("synthesizing"));
    let text = |o: &Output| {
        stdout(o)
            .lines()
            .rev()
            .nth(1)
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(text(&first), text(&second));
}

/// The Llama family end to end: a synth twin of llama-3.2-1b (4-bit weights, the
/// preset's per-layer 8/4-bit KV layout) that inspect resolves to its generated model,
/// whose logits equal the monolith's byte for byte with every decode step on the fast
/// path; the qwen3-0.6b twin (float caches) takes the fast path from the first prefill.
#[test]
fn llama_family_synth_inspect_and_logits() {
    let dir = scratch().join("llama-3.2-1b");
    let out = ok(&[
        "synth",
        "--preset",
        "llama-3.2-1b",
        "--twin",
        "--bits",
        "4",
        "--out",
        path(&dir),
    ]);
    assert!(out.contains("16 layers"), "{out}");
    let text = ok(&["inspect", "--model", path(&dir)]);
    let fingerprint = generated::models::llama_3_2_1b::FINGERPRINT;
    assert!(
        text.contains(&format!("fingerprint  {fingerprint}")),
        "{text}"
    );
    assert!(
        text.contains("implementation llama-3.2-1b-generated"),
        "{text}"
    );
    assert!(
        text.contains("kv:quant:8:64") && text.contains("kv:quant:4:64"),
        "{text}"
    );
    let tokens: Vec<String> = (0..24).map(|i| ((i * 37 + 11) % 512).to_string()).collect();
    let tokens = tokens.join(",");
    let walk = |d: &Path, imp: &str| -> (Vec<u8>, String) {
        let out = scratch().join(format!(
            "logits-{}-{imp}.safetensors",
            d.file_name().unwrap().to_string_lossy()
        ));
        let line = ok(&[
            "logits",
            "--model",
            path(d),
            "--tokens",
            &tokens,
            "--prefill",
            "5",
            "--impl",
            imp,
            "--out",
            path(&out),
        ]);
        (std::fs::read(&out).unwrap(), line)
    };
    let (m, m_line) = walk(&dir, "monolith");
    let (g, g_line) = walk(&dir, "generated");
    assert!(m_line.contains("llama-monolith"), "{m_line}");
    assert!(g_line.contains("llama-3.2-1b-generated"), "{g_line}");
    assert_eq!(fast_path(g_line.trim()), (19, 20), "{g_line}");
    assert!(m == g, "llama-3.2-1b: the logits files differ");

    let qwen = scratch().join("qwen3-0.6b");
    ok(&[
        "synth",
        "--preset",
        "qwen3-0.6b",
        "--twin",
        "--out",
        path(&qwen),
    ]);
    let (m, _) = walk(&qwen, "monolith");
    let (g, g_line) = walk(&qwen, "generated");
    assert_eq!(fast_path(g_line.trim()), (20, 20), "{g_line}");
    assert!(m == g, "qwen3-0.6b: the logits files differ");
    let j: Value =
        serde_json::from_str(&ok(&["inspect", "--model", path(&qwen), "--json"])).unwrap();
    assert_eq!(j["implementation"], "qwen3-0.6b-generated");
    assert_eq!(j["config"]["qk_norm"], true);
}
