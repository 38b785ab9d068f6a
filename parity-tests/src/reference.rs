//! The independent Python reference of the parity tests: mlx-lm 0.32.0 on MLX 0.32.2 (CPU).
//!
//! [`python_env`] makes (once, then reuses) a virtualenv in `<target>/mlx-lm-venv` holding the
//! exact pins of `parity-tests/reference/requirements.txt`, plus mlx-optiq installed without its
//! dependencies (`requirements-nodeps.txt`). [`PythonEnv::run_logits`] runs
//! `reference/mlx_lm_logits.py` on a model folder and reads back its logits with
//! [`read_logits`]. [`PythonEnv::make_tiny_model`] runs the fixture generator
//! `reference/make_tiny_model.py`. See `reference/README.md`.
//!
//! Environment:
//! - `MLX_AOT_PYTHON`: the base interpreter used to create the venv (default `python3`).
//! - `MLX_AOT_REFERENCE_VENV`: the venv folder (default `<target>/mlx-lm-venv`, where `<target>` is
//!   `CARGO_TARGET_DIR` or the workspace's `target`).
//!
//! The venv is rebuilt whenever the requirement files, the base interpreter's version or
//! [`HARNESS_VERSION`] change (a stamp file holds the hash of all three). A lock file beside the
//! venv serializes creation across test processes (nextest runs each test in its own process).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result, io};

/// Bump to force every existing venv to be rebuilt (for a change of install steps).
pub const HARNESS_VERSION: &str = "mlx-aot-reference-venv/1";

/// The pinned MLX version of the reference.
pub const MLX_VERSION: &str = "0.32.2";
/// The pinned mlx-lm version of the reference.
pub const MLX_LM_VERSION: &str = "0.32.0";

const STAMP_FILE: &str = ".mlx-aot-requirements.sha256";

/// `parity-tests/reference`: the Python scripts and requirement files.
pub fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reference")
}

/// The workspace's target directory: `CARGO_TARGET_DIR` (relative to the workspace root when
/// relative), else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("parity-tests lives inside the workspace")
        .to_path_buf();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace.join(dir)
            }
        }
        _ => workspace.join("target"),
    }
}

/// A ready virtualenv holding the pinned reference.
#[derive(Clone, Debug)]
pub struct PythonEnv {
    venv: PathBuf,
    python: PathBuf,
}

/// Ensure the reference virtualenv exists and is current; idempotent and safe to call from many
/// threads and processes at once. The first call in a process may take a minute (pip install
/// from PyPI); later calls return at once.
pub fn python_env() -> Result<PythonEnv> {
    static ENV: OnceLock<std::result::Result<PythonEnv, Arc<Error>>> = OnceLock::new();
    ENV.get_or_init(|| {
        let venv = match std::env::var_os("MLX_AOT_REFERENCE_VENV") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => target_dir().join("mlx-lm-venv"),
        };
        ensure_venv(&venv).map_err(Arc::new)
    })
    .clone()
    .map_err(Error::Shared)
}

fn base_python() -> String {
    std::env::var("MLX_AOT_PYTHON")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "python3".to_string())
}

fn run_command(cmd: &mut Command, what: &str) -> Result<Output> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let failed = |detail: String| Error::Command {
        what: what.to_owned(),
        detail,
    };
    let out = cmd.output().map_err(|e| {
        failed(if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "`{program}` not found; install CPython 3.11 (with the venv module) or point \
                 MLX_AOT_PYTHON at an interpreter"
            )
        } else {
            format!("cannot run `{program}`: {e}")
        })
    })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(failed(format!(
            "failed ({}): {program} {}\n--- stderr (tail) ---\n{}\n--- stdout (tail) ---\n{}",
            out.status,
            cmd.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            tail(&out.stderr, 4000),
            tail(&out.stdout, 2000),
        )))
    }
}

fn tail(bytes: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim_end();
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

fn read_text(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(io(path))
}

fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn ensure_venv(venv: &Path) -> Result<PythonEnv> {
    let refdir = reference_dir();
    let requirements = refdir.join("requirements.txt");
    let nodeps = refdir.join("requirements-nodeps.txt");
    let base = base_python();

    let version = run_command(
        Command::new(&base).args(["-c", "import sys; print(sys.version)"]),
        "checking the base Python interpreter",
    )?;
    let mut hasher = Sha256::new();
    for part in [
        HARNESS_VERSION.as_bytes(),
        read_text(&requirements)?.as_bytes(),
        read_text(&nodeps)?.as_bytes(),
        &version.stdout,
    ] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();

    let parent = venv
        .parent()
        .ok_or_else(|| Error::Reference(format!("venv path {} has no parent", venv.display())))?;
    fs::create_dir_all(parent).map_err(io(parent))?;
    let lock_path = parent.join(format!(
        "{}.lock",
        venv.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "venv".into())
    ));
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    // Held until `lock` drops at the end of this function: one process installs, the others wait
    // and then find the stamp.
    lock.lock().map_err(io(&lock_path))?;

    let python = venv_python(venv);
    let stamp = venv.join(STAMP_FILE);
    if python.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == digest) {
        return Ok(PythonEnv {
            venv: venv.to_path_buf(),
            python,
        });
    }

    if venv.exists() {
        fs::remove_dir_all(venv).map_err(io(venv))?;
    }
    run_command(
        Command::new(&base).arg("-m").arg("venv").arg(venv),
        "creating the reference virtualenv (on Debian/Ubuntu this needs the python3-venv package)",
    )?;
    let pip = |args: &[&str], file: &Path, what: &str| {
        run_command(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                ])
                .args(args)
                .arg("-r")
                .arg(file),
            what,
        )
    };
    pip(
        &[],
        &requirements,
        "pip install -r reference/requirements.txt (needs network access to PyPI)",
    )?;
    pip(
        &["--no-deps"],
        &nodeps,
        "pip install --no-deps -r reference/requirements-nodeps.txt (needs network access to PyPI)",
    )?;
    let check = run_command(
        Command::new(&python).args([
            "-c",
            "import mlx.core as mx, mlx_lm, importlib.util as u; \
             print(mx.__version__, mlx_lm.__version__, u.find_spec('optiq') is not None)",
        ]),
        "importing mlx and mlx-lm in the new virtualenv",
    )?;
    let got = String::from_utf8_lossy(&check.stdout).trim().to_string();
    let want = format!("{MLX_VERSION} {MLX_LM_VERSION} True");
    if got != want {
        return Err(Error::Reference(format!(
            "the reference virtualenv {} reports `{got}`, expected `{want}` \
             (mlx, mlx-lm, mlx-optiq present)",
            venv.display()
        )));
    }

    let tmp = venv.join(format!("{STAMP_FILE}.tmp"));
    fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(digest.as_bytes()))
        .and_then(|_| fs::rename(&tmp, &stamp))
        .map_err(io(&stamp))?;
    Ok(PythonEnv {
        venv: venv.to_path_buf(),
        python,
    })
}

/// How the script treats the caches (`--kv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvMode {
    /// mlx-lm's caches as `make_cache` makes them (bf16 KVCache / RotatingKVCache).
    Float,
    /// The folder's `kv_config.json` applied with mlx-optiq's conversion policy and its quantized
    /// caches (bit-exact reference for quantized caches).
    Config,
    /// The same policy, but converted caches stay float and hold dequantize(quantize(K/V)): an
    /// independent, not bit-exact, computation of what `Config` computes.
    Dequant,
}

impl KvMode {
    fn as_arg(self) -> &'static str {
        match self {
            KvMode::Float => "float",
            KvMode::Config => "config",
            KvMode::Dequant => "dequant",
        }
    }
}

/// One run of `mlx_lm_logits.py`.
#[derive(Clone, Debug)]
pub struct LogitsRequest {
    /// The model folder (config.json, model*.safetensors, optional kv_config.json).
    pub model: PathBuf,
    /// Token rows (the batch); all of one length T.
    pub tokens: Vec<Vec<u32>>,
    /// Tokens in the first forward (1..=T).
    pub prefill: usize,
    pub kv: KvMode,
    /// Tokens per forward after the prefill; 1 (the default) = single-token decode steps.
    pub chunk: usize,
    /// Where to keep the output file; `None` writes a scratch file and deletes it after reading.
    pub out: Option<PathBuf>,
    /// Run with `mx.disable_compile()` (mlx-lm's compiled `swiglu` etc. op by op).
    pub no_compile: bool,
}

impl LogitsRequest {
    pub fn new(model: impl Into<PathBuf>, tokens: Vec<Vec<u32>>, prefill: usize) -> Self {
        LogitsRequest {
            model: model.into(),
            tokens,
            prefill,
            kv: KvMode::Float,
            chunk: 1,
            out: None,
            no_compile: false,
        }
    }

    /// Disables MLX's compile in the reference (`mx.disable_compile()`).
    pub fn no_compile(mut self, on: bool) -> Self {
        self.no_compile = on;
        self
    }

    pub fn kv(mut self, kv: KvMode) -> Self {
        self.kv = kv;
        self
    }

    pub fn chunk(mut self, chunk: usize) -> Self {
        self.chunk = chunk;
        self
    }

    pub fn out(mut self, out: impl Into<PathBuf>) -> Self {
        self.out = Some(out.into());
        self
    }
}

/// The logits the reference wrote: f32 `[B, T, vocab]`, row-major, plus the file's metadata.
#[derive(Clone, Debug)]
pub struct LogitsFile {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
    pub metadata: BTreeMap<String, String>,
}

impl LogitsFile {
    pub fn batch(&self) -> usize {
        self.shape[0]
    }

    pub fn positions(&self) -> usize {
        self.shape[1]
    }

    pub fn vocab(&self) -> usize {
        self.shape[2]
    }

    /// The logits of batch row `b` at position `t`.
    pub fn row(&self, b: usize, t: usize) -> &[f32] {
        let v = self.vocab();
        let start = (b * self.positions() + t) * v;
        &self.data[start..start + v]
    }

    /// The model's own logits dtype before the final cast (`bfloat16` for bf16 models).
    pub fn logits_dtype(&self) -> Option<&str> {
        self.metadata.get("logits_dtype").map(String::as_str)
    }

    /// The per-forward cache trace the script records (`start`, `length`, `converted_before`,
    /// `caches_after[{class, offset, buffer, idx, max_size, signature}]`).
    pub fn trace(&self) -> Result<serde_json::Value> {
        let raw = self
            .metadata
            .get("trace")
            .ok_or_else(|| Error::Reference("the logits file has no `trace` metadata".into()))?;
        serde_json::from_str(raw)
            .map_err(|e| Error::Reference(format!("bad `trace` metadata: {e}")))
    }

    /// The cache signatures (`kv:rotating-quant:4:32`, ...) after the forward number `forward`.
    pub fn cache_signatures(&self, forward: usize) -> Result<Vec<String>> {
        let trace = self.trace()?;
        let caches = trace
            .get(forward)
            .and_then(|f| f.get("caches_after"))
            .and_then(|c| c.as_array())
            .ok_or_else(|| Error::Reference(format!("the trace has no forward {forward}")))?;
        Ok(caches
            .iter()
            .map(|c| c["signature"].as_str().unwrap_or_default().to_string())
            .collect())
    }
}

/// Read a logits file written by `mlx_lm_logits.py` (tensor `logits`, f32, rank 3).
pub fn read_logits(path: impl AsRef<Path>) -> Result<LogitsFile> {
    let path = path.as_ref();
    let bad = |detail: String| Error::LogitsFile {
        path: path.to_owned(),
        detail,
    };
    let bytes = fs::read(path).map_err(io(path))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e:?}")))?;
    let metadata: BTreeMap<String, String> = meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let tensors = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e:?}")))?;
    let view = tensors
        .tensor("logits")
        .map_err(|e| bad(format!("no tensor `logits`: {e:?}")))?;
    if view.dtype() != safetensors::Dtype::F32 {
        return Err(bad(format!("`logits` is {:?}, expected F32", view.dtype())));
    }
    let shape = view.shape().to_vec();
    if shape.len() != 3 {
        return Err(bad(format!(
            "`logits` has shape {shape:?}, expected [B, T, vocab]"
        )));
    }
    let data: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if data.len() != shape.iter().product::<usize>() {
        return Err(bad(format!(
            "`logits` holds {} values for shape {shape:?}",
            data.len()
        )));
    }
    Ok(LogitsFile {
        shape,
        data,
        metadata,
    })
}

fn scratch_path(stem: &str) -> Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = target_dir().join("mlx-lm-reference-scratch");
    fs::create_dir_all(&dir).map_err(io(&dir))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(dir.join(format!("{stem}-{}-{n}.safetensors", std::process::id())))
}

impl PythonEnv {
    /// The venv's interpreter.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// The venv folder.
    pub fn venv(&self) -> &Path {
        &self.venv
    }

    /// Run `reference/<script>` with `args` in the venv; an error carries the script's stderr.
    pub fn run_script<I, S>(&self, script: &str, args: I) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let path = reference_dir().join(script);
        run_command(
            Command::new(&self.python)
                .arg(&path)
                .args(args)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("PYTHONHASHSEED", "0"),
            &format!("reference/{script}"),
        )
    }

    /// Run `mlx_lm_logits.py` and read its output back.
    pub fn run_logits(&self, req: &LogitsRequest) -> Result<LogitsFile> {
        if req.tokens.is_empty() {
            return Err(Error::Reference("run_logits: no token rows".into()));
        }
        let (out, scratch) = match &req.out {
            Some(p) => (p.clone(), false),
            None => (scratch_path("logits")?, true),
        };
        let mut args: Vec<std::ffi::OsString> = vec![
            "--model".into(),
            req.model.clone().into_os_string(),
            "--prefill".into(),
            req.prefill.to_string().into(),
            "--kv".into(),
            req.kv.as_arg().into(),
            "--chunk".into(),
            req.chunk.to_string().into(),
            "--out".into(),
            out.clone().into_os_string(),
        ];
        if req.no_compile {
            args.push("--no-compile".into());
        }
        for row in &req.tokens {
            let joined: Vec<String> = row.iter().map(u32::to_string).collect();
            args.push("--tokens".into());
            args.push(joined.join(",").into());
        }
        self.run_script("mlx_lm_logits.py", &args)?;
        let result = read_logits(&out);
        if scratch {
            let _ = fs::remove_file(&out);
        }
        result
    }

    /// Run `make_tiny_model.py --preset <preset> --out <out> <extra...>` (e.g. `["--bits", "4"]`).
    pub fn make_tiny_model(&self, preset: &str, out: &Path, extra: &[&str]) -> Result<()> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--preset".into(),
            preset.into(),
            "--out".into(),
            out.as_os_str().to_owned(),
        ];
        args.extend(extra.iter().map(Into::into));
        self.run_script("make_tiny_model.py", &args).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = target_dir()
            .join("mlx-lm-reference-scratch")
            .join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn env() -> PythonEnv {
        python_env().unwrap_or_else(|e| panic!("reference venv: {e}"))
    }

    fn rows(b: usize, t: usize, vocab: u32, seed: u32) -> Vec<Vec<u32>> {
        (0..b)
            .map(|r| {
                (0..t)
                    .map(|i| (seed + 31 * r as u32 + 17 * i as u32 + (i * i) as u32) % vocab)
                    .collect()
            })
            .collect()
    }

    fn positions_bitwise_equal(a: &LogitsFile, b: &LogitsFile, range: std::ops::Range<usize>) {
        assert_eq!(a.batch(), b.batch());
        for r in 0..a.batch() {
            for t in range.clone() {
                let (x, y) = (a.row(r, t), b.row(r, t));
                assert!(
                    x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "row {r} position {t} differs"
                );
            }
        }
    }

    #[test]
    fn read_logits_round_trip_and_errors() {
        let dir = scratch_dir("read-logits");
        let values: Vec<f32> = (0..2 * 3 * 4).map(|i| i as f32 * 0.5 - 3.0).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 3, 4], &bytes)
                .unwrap();
        let meta = HashMap::from([("logits_dtype".to_string(), "bfloat16".to_string())]);
        let file = dir.join("ok.safetensors");
        fs::write(
            &file,
            safetensors::serialize([("logits", view)], &Some(meta)).unwrap(),
        )
        .unwrap();
        let got = read_logits(&file).unwrap();
        assert_eq!(got.shape, vec![2, 3, 4]);
        assert_eq!(got.data, values);
        assert_eq!(got.row(1, 2), &values[20..24]);
        assert_eq!(got.logits_dtype(), Some("bfloat16"));

        let other = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![24], &bytes)
            .unwrap();
        let bad = dir.join("bad.safetensors");
        fs::write(&bad, safetensors::serialize([("x", other)], &None).unwrap()).unwrap();
        let detail = |e: Error| match e {
            Error::LogitsFile { path, detail } => {
                assert_eq!(path, bad);
                detail
            }
            other => panic!("expected a logits-file error, got {other:?}"),
        };
        assert!(detail(read_logits(&bad).unwrap_err()).contains("no tensor `logits`"));
        fs::write(&bad, b"garbage").unwrap();
        assert!(detail(read_logits(&bad).unwrap_err()).contains("not a safetensors file"));
        let missing = dir.join("missing");
        match read_logits(&missing).unwrap_err() {
            Error::Io { path, source } => {
                assert_eq!(path, missing);
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
    }

    /// E4B-like tiny (PLE, KV sharing, window 8): a prompt longer than the window, then decode
    /// steps; the prefill rows equal a one-shot forward bit for bit; `--kv config` quantizes every
    /// cache after the prefill with the kv_config's (bits, group) and keeps the prefill rows.
    #[test]
    fn e4b_tiny_prefill_decode_float_and_config() {
        let py = env();
        let dir = scratch_dir("e4b");
        let model = dir.join("e4b");
        py.make_tiny_model("e4b", &model, &[]).unwrap();
        let tokens = rows(1, 20, 128, 3);

        let full = py
            .run_logits(&LogitsRequest::new(&model, tokens.clone(), 20))
            .unwrap();
        let float = py
            .run_logits(&LogitsRequest::new(&model, tokens.clone(), 12))
            .unwrap();
        assert_eq!(float.shape, vec![1, 20, 128]);
        assert!(float.data.iter().all(|v| v.is_finite()));
        assert_eq!(float.logits_dtype(), Some("bfloat16"));
        assert_eq!(float.metadata["mlx_version"], MLX_VERSION);
        assert_eq!(float.metadata["mlx_lm_version"], MLX_LM_VERSION);
        assert_eq!(float.metadata["schedule"], "[12, 1, 1, 1, 1, 1, 1, 1, 1]");
        positions_bitwise_equal(&float, &full, 0..12);
        // 7 caches: sliding donors 0, 1, 3, 4, 6 and full donors 2, 5.
        let sigs = float.cache_signatures(8).unwrap();
        assert_eq!(sigs.len(), 7);
        assert_eq!(sigs[0], "kv:rotating");
        assert_eq!(sigs[2], "kv:plain");

        let config = py
            .run_logits(&LogitsRequest::new(&model, tokens.clone(), 12).kv(KvMode::Config))
            .unwrap();
        assert!(config.data.iter().all(|v| v.is_finite()));
        assert_eq!(config.metadata["mlx_optiq_version"], "0.7.7");
        positions_bitwise_equal(&config, &float, 0..12);
        assert_eq!(config.cache_signatures(0).unwrap()[0], "kv:rotating");
        let after = config.cache_signatures(8).unwrap();
        assert_eq!(
            after,
            [
                "kv:rotating-quant:8:32",
                "kv:rotating-quant:4:32",
                "kv:quant:8:64",
                "kv:rotating-quant:4:32",
                "kv:rotating-quant:8:32",
                "kv:quant:4:64",
                "kv:rotating-quant:4:32",
            ]
        );
        // The ring: the 12 prefill rows are cut to the window (8) by the first decode step, which
        // writes at index 0; eight steps later the write index is 8 (it wraps on the next write).
        let trace = config.trace().unwrap();
        let first = &trace[1]["caches_after"][0];
        assert_eq!(
            (&first["offset"], &first["buffer"], &first["idx"]),
            (&13.into(), &8.into(), &1.into())
        );
        let last = &trace[8]["caches_after"][0];
        assert_eq!(
            (&last["offset"], &last["buffer"], &last["idx"]),
            (&20.into(), &8.into(), &8.into())
        );
        // Decode logits move off the float ones (quantized K/V).
        let diff = (12 * 128..20 * 128)
            .map(|i| (config.data[i] - float.data[i]).abs())
            .fold(0f32, f32::max);
        assert!(diff > 0.0, "quantized caches changed nothing");
    }

    /// 26B-A4B-like tiny, 4-bit weights (MoE E=8 K=2 with the sort path at >= 64 pairs, K=V full
    /// layers): batch 2, chunked continuation, all three kv modes.
    #[test]
    fn moe_tiny_q4_batch_chunked() {
        let py = env();
        let dir = scratch_dir("moe");
        let model = dir.join("26b-a4b-q4");
        py.make_tiny_model("26b-a4b", &model, &["--bits", "4"])
            .unwrap();
        let tokens = rows(2, 40, 128, 5);

        let float = py
            .run_logits(&LogitsRequest::new(&model, tokens.clone(), 34))
            .unwrap();
        assert_eq!(float.shape, vec![2, 40, 128]);
        let chunked = py
            .run_logits(&LogitsRequest::new(&model, tokens.clone(), 34).chunk(4))
            .unwrap();
        assert_eq!(chunked.metadata["schedule"], "[34, 4, 2]");
        positions_bitwise_equal(&chunked, &float, 0..34);
        for kv in [KvMode::Config, KvMode::Dequant] {
            let got = py
                .run_logits(&LogitsRequest::new(&model, tokens.clone(), 34).kv(kv))
                .unwrap();
            assert!(got.data.iter().all(|v| v.is_finite()), "{kv:?}");
            positions_bitwise_equal(&got, &float, 0..34);
        }
    }

    #[test]
    fn script_errors_are_reported() {
        let py = env();
        let dir = scratch_dir("errors");
        let err = py
            .run_logits(&LogitsRequest::new(
                dir.join("nothing"),
                vec![vec![1, 2]],
                1,
            ))
            .unwrap_err();
        assert!(
            matches!(err, Error::Command { .. })
                && err.to_string().contains("config.json does not exist"),
            "{err}"
        );
        let err = py
            .run_logits(&LogitsRequest::new(&dir, vec![vec![1, 2], vec![3]], 1))
            .unwrap_err();
        assert!(err.to_string().contains("different lengths"), "{err}");
    }
}
