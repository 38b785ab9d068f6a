//! Smoke test of the MLX ops Gemma 4 needs, through mlx-rs on the drop-in mlx-sys.
//!
//! - Every op is evaluated twice from scratch and must be bit-identical.
//! - Exact relations are checked where one exists (see `smoke_ops::check_exact`).
//! - A sha256 over every result's bytes is printed, and two child processes (this same
//!   test binary, re-run in "print the hash only" mode) must print the same hash as this
//!   process.

mod smoke_ops;

use std::process::Command;
use std::sync::OnceLock;

/// Set in a child process: the `child_prints_hash` test prints the hash and nothing else.
const CHILD_ENV: &str = "MLX_AOT_SMOKE_CHILD";
const HASH_PREFIX: &str = "MLX_AOT_SMOKE_HASH=";

/// The in-process outcome, computed once: MLX work in this binary stays on one thread at
/// a time (tests run on parallel threads).
fn outcome() -> &'static smoke_ops::Outcome {
    static OUTCOME: OnceLock<smoke_ops::Outcome> = OnceLock::new();
    OUTCOME.get_or_init(smoke_ops::run)
}

#[test]
fn ops_are_bit_identical_and_exact() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let outcome = outcome();
    for check in &outcome.checks {
        println!("ok: {check}");
    }
    let total: usize = outcome.items.iter().map(|(_, _, _, b)| b.len()).sum();
    println!(
        "{} results, {total} bytes, sha256 {}",
        outcome.items.len(),
        outcome.hash
    );
}

/// Only does something in a child process started by `two_processes_print_the_same_hash`.
#[test]
fn child_prints_hash() {
    if std::env::var_os(CHILD_ENV).is_some() {
        println!("{HASH_PREFIX}{}", outcome().hash);
    }
}

#[test]
fn two_processes_print_the_same_hash() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    // This process's outcome first: MLX's CPU backend compiles kernels into a shared
    // on-disk cache without an atomic write, so a child loading a kernel while this
    // process still writes it reads a short file ("file too short" on a cold cache).
    let own = outcome().hash.clone();
    let exe = std::env::current_exe().expect("path of this test binary");
    let child_hash = || {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "child_prints_hash",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .expect("run the test binary as a child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // libtest may print "test child_prints_hash ... " on the same line.
        stdout
            .split_once(HASH_PREFIX)
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("child printed no hash:\n{stdout}"))
            .to_owned()
    };
    let (a, b) = (child_hash(), child_hash());
    println!("child 1: {a}\nchild 2: {b}\nthis process: {own}");
    assert_eq!(a, b, "two child processes printed different hashes");
    assert_eq!(a, own, "child processes and this process differ");
}
