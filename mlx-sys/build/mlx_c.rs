//! The mlx-c 0.7.0 sources, taken from the upstream `mlx-sys` 0.7.0 package that cargo
//! downloads from the registry (never committed here), checked by sha256.

use std::env;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::fail::{Fail, or_fail};

const PACKAGE: &str = "mlx-sys-0.7.0";
/// sha256 of `mlx-sys-0.7.0.crate` as published on crates.io.
const PACKAGE_SHA256: &str = "da965f83ce211b80f9b681d9bbd6fa625fe6bb2e659ba7bc55dd95eea8d3b028";

/// Unpacks `src/mlx-c` of the upstream package into `OUT_DIR` and returns its folder.
pub fn unpack(out_dir: &Path) -> Result<PathBuf, Fail> {
    let root = out_dir.join("mlx-c-0.7.0");
    if root.join("CMakeLists.txt").is_file() {
        return Ok(root);
    }
    let package = match find_in_cargo_cache() {
        Some(p) => p,
        None => {
            fetch_with_cargo(out_dir)?;
            find_in_cargo_cache().ok_or_else(|| {
                Fail(format!(
                    "cargo fetched the upstream mlx-sys 0.7.0 but {PACKAGE}.crate is not in \
                     {}/registry/cache",
                    cargo_home().display()
                ))
            })?
        }
    };
    let bytes = or_fail(fs::read(&package), |e| {
        format!("reading {}: {e}", package.display())
    })?;
    let digest = hex(&Sha256::digest(&bytes));
    if digest != PACKAGE_SHA256 {
        return Err(Fail(format!(
            "{} has sha256 {digest}, expected {PACKAGE_SHA256} (the published {PACKAGE}.crate); \
             delete the file so cargo downloads it again",
            package.display()
        )));
    }
    let staging = out_dir.join("mlx-c-0.7.0.partial");
    let _ = fs::remove_dir_all(&staging);
    extract_mlx_c(&bytes, &staging)?;
    let _ = fs::remove_dir_all(&root);
    or_fail(fs::rename(&staging, &root), |e| {
        format!("moving mlx-c into {}: {e}", root.display())
    })?;
    Ok(root)
}

/// The translation units upstream's CMakeLists.txt compiles (commented entries skipped).
pub fn sources(root: &Path) -> Result<Vec<PathBuf>, Fail> {
    let cmake = root.join("CMakeLists.txt");
    let text = or_fail(fs::read_to_string(&cmake), |e| {
        format!("reading {}: {e}", cmake.display())
    })?;
    let sources: Vec<PathBuf> = text
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("${CMAKE_CURRENT_LIST_DIR}/"))
        .filter(|l| l.ends_with(".cpp"))
        .map(|l| root.join(l))
        .collect();
    if sources.is_empty() {
        return Err(Fail(format!(
            "no mlx-c sources listed in {}",
            cmake.display()
        )));
    }
    Ok(sources)
}

/// The public headers, `mlx/c/*.h`, sorted.
pub fn headers(root: &Path) -> Result<Vec<PathBuf>, Fail> {
    let dir = root.join("mlx/c");
    let mut headers: Vec<PathBuf> = or_fail(fs::read_dir(&dir), |e| {
        format!("reading {}: {e}", dir.display())
    })?
    .filter_map(|entry| entry.ok().map(|e| e.path()))
    .filter(|p| p.extension().is_some_and(|x| x == "h"))
    .collect();
    headers.sort();
    Ok(headers)
}

fn cargo_home() -> PathBuf {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = env::var_os("HOME")
                .or_else(|| env::var_os("USERPROFILE"))
                .unwrap_or_default();
            PathBuf::from(home).join(".cargo")
        })
}

fn find_in_cargo_cache() -> Option<PathBuf> {
    let cache = cargo_home().join("registry/cache");
    fs::read_dir(cache)
        .ok()?
        .filter_map(|entry| {
            entry
                .ok()
                .map(|e| e.path().join(format!("{PACKAGE}.crate")))
        })
        .find(|p| p.is_file())
}

/// The workspace patches `mlx-sys`, so cargo never downloads the upstream package for it;
/// a throwaway manifest asks for it explicitly.
fn fetch_with_cargo(out_dir: &Path) -> Result<(), Fail> {
    let dir = out_dir.join("fetch-upstream-mlx-sys");
    let manifest = "[package]\nname = \"fetch-upstream-mlx-sys\"\nversion = \"0.0.0\"\n\
                    edition = \"2021\"\n\n[lib]\npath = \"lib.rs\"\n\n[dependencies]\n\
                    mlx-sys = \"=0.7.0\"\n\n[workspace]\n";
    let write = fs::create_dir_all(&dir)
        .and_then(|_| fs::write(dir.join("Cargo.toml"), manifest))
        .and_then(|_| fs::write(dir.join("lib.rs"), ""));
    or_fail(write, |e| format!("writing {}: {e}", dir.display()))?;
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .arg("fetch")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        other => Err(Fail(format!(
            "`cargo fetch` of the upstream mlx-sys 0.7.0 package (the source of mlx-c 0.7.0) \
             failed: {other:?}; check access to crates.io"
        ))),
    }
}

fn extract_mlx_c(package: &[u8], dest: &Path) -> Result<(), Fail> {
    let prefix = format!("{PACKAGE}/src/mlx-c/");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(package));
    let entries = or_fail(archive.entries(), |e| {
        format!("reading {PACKAGE}.crate: {e}")
    })?;
    let mut count = 0usize;
    for entry in entries {
        let mut entry = or_fail(entry, |e| format!("reading {PACKAGE}.crate: {e}"))?;
        let path = or_fail(entry.path(), |e| format!("reading {PACKAGE}.crate: {e}"))?;
        let Some(rel) = path
            .to_str()
            .and_then(|p| p.strip_prefix(&prefix))
            .map(PathBuf::from)
        else {
            continue;
        };
        if !entry.header().entry_type().is_file() || rel.components().any(|c| c.as_os_str() == "..")
        {
            continue;
        }
        let target = dest.join(&rel);
        let mut data = Vec::new();
        or_fail(entry.read_to_end(&mut data), |e| {
            format!("reading {}: {e}", rel.display())
        })?;
        let write = fs::create_dir_all(target.parent().expect("file has a parent"))
            .and_then(|_| fs::write(&target, data));
        or_fail(write, |e| format!("writing {}: {e}", target.display()))?;
        count += 1;
    }
    if count == 0 {
        return Err(Fail(format!("{PACKAGE}.crate holds no src/mlx-c")));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
