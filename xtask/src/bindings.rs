//! `cargo xtask bindings`: the checked-in Rust bindings of the pinned mlx-c
//! (`mlx-sys/src/bindings.rs`), regenerated with bindgen, or checked for freshness.
//!
//! Building mlx-aot runs no bindgen, so it needs no libclang; only this command does. The
//! file records the sha256 of everything it was made from (the mlx-c headers, the compat
//! header, bindgen's version and the options below), so `--check` finds stale bindings
//! without libclang, and where libclang is present it also regenerates them and compares
//! the bytes.

#[path = "../../mlx-sys/build/fail.rs"]
#[allow(dead_code)] // `Fail::exit` serves the build script only.
mod fail;
#[path = "../../mlx-sys/build/mlx_c.rs"]
#[allow(dead_code)] // `sources` serves the build script only.
mod mlx_c;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};

use crate::generate::repo_root;

/// The arguments of `cargo xtask bindings`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Write nothing; exit non-zero when `mlx-sys/src/bindings.rs` is stale.
    #[arg(long)]
    check: bool,
}

/// bindgen's version, part of the recorded inputs (another bindgen writes other bytes).
const BINDGEN_VERSION: &str = "0.72.1";
/// Names the options of [`generate`]; change it whenever they change.
const OPTIONS: &str = "rust-target 1.73.0; allowlist mlx_.* _mlx_.*; blocklist float16_t \
                       bfloat16_t FILE _IO_.* __off(64)?_t malloc realloc; include mlx_sys_half.h";
/// The line of the file's header that records the inputs' digest.
const DIGEST_PREFIX: &str = "// inputs sha256: ";

/// Runs `cargo xtask bindings [--check]`.
pub fn run(args: &Args) -> Result<ExitCode> {
    let root = repo_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let work = target.join("xtask-bindings");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let mlx_c_root = mlx_c::unpack(&work).map_err(|e| anyhow!(e.0))?;
    let headers = mlx_c::headers(&mlx_c_root).map_err(|e| anyhow!(e.0))?;
    let compat = root.join("mlx-sys/compat");
    let digest = inputs_digest(&mlx_c_root, &headers, &compat)?;
    let file = root.join("mlx-sys/src/bindings.rs");
    let shown = file.strip_prefix(&root).unwrap_or(&file).display();

    if args.check {
        let current =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let recorded = current
            .lines()
            .find_map(|l| l.strip_prefix(DIGEST_PREFIX))
            .map(str::trim);
        if recorded != Some(digest.as_str()) {
            eprintln!(
                "{shown} is stale: it was made from inputs with sha256 {}, the pinned mlx-c \
                 headers and options now give {digest}; run `cargo xtask bindings`",
                recorded.unwrap_or("(none recorded)")
            );
            return Ok(ExitCode::FAILURE);
        }
        if let Err(why) = clang_sys::load() {
            println!(
                "{shown}: inputs unchanged (sha256 {digest}); libclang not found ({why}), so \
                 the bindings were not regenerated to compare bytes"
            );
            return Ok(ExitCode::SUCCESS);
        }
        let fresh = generate(&mlx_c_root, &headers, &compat, &digest)?;
        if fresh != current {
            eprintln!(
                "{shown} differs from what bindgen {BINDGEN_VERSION} makes of its recorded \
                 inputs; run `cargo xtask bindings`"
            );
            return Ok(ExitCode::FAILURE);
        }
        println!("{shown}: up to date (inputs sha256 {digest}, regenerated and compared)");
        return Ok(ExitCode::SUCCESS);
    }

    clang_sys::load().map_err(|why| {
        anyhow!(
            "bindgen needs libclang to read the mlx-c headers: {why} (Debian/Ubuntu: apt-get \
             install libclang-dev, or set LIBCLANG_PATH)"
        )
    })?;
    let fresh = generate(&mlx_c_root, &headers, &compat, &digest)?;
    let unchanged = fs::read_to_string(&file).is_ok_and(|old| old == fresh);
    if unchanged {
        println!("{shown}: up to date");
    } else {
        runtime::synth::write_atomic(&file, fresh.as_bytes())
            .with_context(|| format!("writing {}", file.display()))?;
        println!("{shown}: written (inputs sha256 {digest})");
    }
    Ok(ExitCode::SUCCESS)
}

/// sha256 over the headers (relative name and bytes, sorted), the compat headers, bindgen's
/// version and the options.
fn inputs_digest(mlx_c_root: &Path, headers: &[PathBuf], compat: &Path) -> Result<String> {
    let mut hasher = Sha256::new();
    let mut feed = |name: &str, bytes: &[u8]| {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    feed("bindgen", BINDGEN_VERSION.as_bytes());
    feed("options", OPTIONS.as_bytes());
    for header in headers {
        let name = header.strip_prefix(mlx_c_root).unwrap_or(header);
        let bytes = fs::read(header).with_context(|| format!("reading {}", header.display()))?;
        feed(&name.to_string_lossy(), &bytes);
    }
    let half = compat.join("mlx_sys_half.h");
    let bytes = fs::read(&half).with_context(|| format!("reading {}", half.display()))?;
    feed("compat/mlx_sys_half.h", &bytes);
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Runs bindgen over the public mlx-c headers; returns the file's text with its header.
fn generate(mlx_c_root: &Path, headers: &[PathBuf], compat: &Path, digest: &str) -> Result<String> {
    let mut builder = bindgen::Builder::default()
        .rust_target(
            "1.73.0"
                .parse()
                .map_err(|e| anyhow!("bindgen rust target: {e}"))?,
        )
        .clang_arg(format!("-I{}", mlx_c_root.display()))
        .clang_arg("-include")
        .clang_arg(compat.join("mlx_sys_half.h").to_string_lossy().into_owned())
        // mlx-c's own items; what they use comes along (fixed-width integers map to Rust's),
        // and nothing of the C library does, so the file does not depend on the libc.
        .allowlist_function("_?mlx_.*")
        .allowlist_type("_?mlx_.*")
        .allowlist_var("_?mlx_.*")
        // lib.rs declares these for every target: the half types as mlx-rs reads them, FILE
        // as an opaque type.
        .blocklist_type("float16_t")
        .blocklist_type("bfloat16_t")
        .blocklist_type("FILE")
        .blocklist_type("_IO_.*")
        .blocklist_type("__off(64)?_t")
        .blocklist_function("malloc")
        .blocklist_function("realloc");
    for header in headers {
        builder = builder.header(header.to_string_lossy());
    }
    let bindings = builder
        .generate()
        .map_err(|e| anyhow!("bindgen could not read the mlx-c headers: {e}"))?;
    let body = bindings.to_string();
    if body.trim().is_empty() {
        bail!("bindgen produced no bindings from {}", mlx_c_root.display());
    }
    Ok(format!(
        "// Rust bindings of mlx-c 0.7.0 (the C API of MLX 0.32.2), made by bindgen \
         {BINDGEN_VERSION}.\n\
         // Generated by `cargo xtask bindings`; do not edit. `cargo xtask bindings --check` \
         (run by CI)\n\
         // says whether this file is fresh.\n\
         {DIGEST_PREFIX}{digest}\n\n{body}"
    ))
}
