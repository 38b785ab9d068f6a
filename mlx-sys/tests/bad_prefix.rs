//! A wrong `MLX_PREFIX` fails the build of mlx-sys with one clear message saying what was
//! expected: (a) a folder that does not exist, (b) a folder laid out like an MLX prefix
//! whose `include/mlx/version.h` says 0.32.4.
//!
//! Each case runs `cargo build -p mlx-sys` in a separate target folder
//! (`<target>/bad-prefix-check`), so the main build is never invalidated. Only the build
//! dependencies of mlx-sys get compiled there (once, then cached); both cases fail in the
//! build script's first step, before any C++ is compiled.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `<target>/bad-prefix-check`, next to the folder this test binary was built in
/// (`<target>/<profile>/deps/bad_prefix-<hash>`), so it follows `CARGO_TARGET_DIR`.
fn check_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of this test binary");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<exe>");
    target.join("bad-prefix-check")
}

/// Runs `cargo build -p mlx-sys` with `MLX_PREFIX=prefix`; returns (success, stderr).
fn build_with_prefix(prefix: &Path) -> (bool, String) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "mlx-sys",
            "--color",
            "never",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(check_dir())
        .env("MLX_PREFIX", prefix)
        .env_remove("MLX_PYTHON")
        .output()
        .expect("run cargo");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Both cases in one test: they share the separate target folder, and cargo would only
/// make the second wait for the first's lock.
#[test]
fn wrong_mlx_prefix_fails_the_build_with_a_clear_message() {
    // (a) A folder that does not exist.
    let missing = check_dir().join("no-such-mlx-prefix");
    let _ = fs::remove_dir_all(&missing);
    let (ok, stderr) = build_with_prefix(&missing);
    assert!(!ok, "build with a missing MLX_PREFIX succeeded:\n{stderr}");
    let shown = missing.display().to_string();
    for expected in [
        format!(
            "MLX_PREFIX = {shown} is not an MLX 0.32.2 installation: missing {shown}/include/mlx/mlx.h"
        ),
        "Expected the `mlx` folder of an official MLX 0.32.2 wheel".to_owned(),
    ] {
        assert!(
            stderr.contains(&expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }

    // (b) A folder that looks like an MLX prefix, but of MLX 0.32.4.
    let fake = check_dir().join("fake-mlx-0.32.4");
    let _ = fs::remove_dir_all(&fake);
    let lib = if cfg!(target_vendor = "apple") {
        "libmlx.dylib"
    } else {
        "libmlx.so"
    };
    for dir in ["include/mlx", "lib", "share/cmake/MLX"] {
        fs::create_dir_all(fake.join(dir)).expect("create the fake prefix");
    }
    fs::write(fake.join("include/mlx/mlx.h"), "#pragma once\n").expect("write mlx.h");
    fs::write(
        fake.join("include/mlx/version.h"),
        "#pragma once\n\n#define MLX_VERSION_MAJOR 0\n#define MLX_VERSION_MINOR 32\n\
         #define MLX_VERSION_PATCH 4\n",
    )
    .expect("write version.h");
    fs::write(fake.join("lib").join(lib), "").expect("write the library");
    let (ok, stderr) = build_with_prefix(&fake);
    assert!(
        !ok,
        "build with an MLX 0.32.4 MLX_PREFIX succeeded:\n{stderr}"
    );
    let shown = fake.display().to_string();
    for expected in [
        format!("MLX_PREFIX = {shown} holds MLX 0.32.4"),
        "but mlx-c 0.7.0 needs MLX 0.32.2 exactly".to_owned(),
        "Point MLX_PREFIX at the `mlx` folder of an MLX 0.32.2 wheel".to_owned(),
    ] {
        assert!(
            stderr.contains(&expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    // Cargo reports the message as an error line of its own ("error: mlx-sys@0.7.0: ..."),
    // not only inside the build script's output dump.
    let reported = stderr
        .lines()
        .any(|l| l.starts_with("error: ") && l.contains(&format!("MLX_PREFIX = {shown} holds")));
    assert!(reported, "not reported as an error:\n{stderr}");
}
