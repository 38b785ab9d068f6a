//! `cargo xtask` as a user runs it: help, a check of the checked-in files, and errors that
//! name the problem and exit non-zero.

use std::process::{Command, Output};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("xtask runs")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn help_lists_generate_and_its_options() {
    let o = xtask(&["--help"]);
    assert!(o.status.success());
    assert!(text(&o).contains("generate"));
    let o = xtask(&["generate", "--help"]);
    assert!(o.status.success());
    for option in ["--all", "--check", "--model-dir", "--name", "gemma4-e4b"] {
        assert!(text(&o).contains(option), "help lacks {option}");
    }
}

#[test]
fn the_checked_in_generated_files_pass_the_check() {
    let o = xtask(&["generate", "--all", "--check"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("gemma4-e4b: fingerprint "));
    let o = xtask(&["generate", "gemma4-e4b", "--check"]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn bad_requests_fail_with_a_message() {
    let o = xtask(&["generate", "gemma4-nope", "--check"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("unknown model \"gemma4-nope\""),
        "{}",
        text(&o)
    );
    let o = xtask(&["generate", "--check"]);
    assert!(!o.status.success(), "no model given");
    let o = xtask(&["generate", "--name", "x", "--check"]);
    assert!(!o.status.success(), "--name without --model-dir");
}

#[test]
fn fuzz_names_its_targets_which_are_the_fuzz_crates_binaries() {
    let o = xtask(&["fuzz", "nope"]);
    assert!(!o.status.success());
    let out = text(&o);
    assert!(out.contains("unknown fuzz target \"nope\""), "{out}");
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/Cargo.toml"),
    )
    .unwrap();
    let bins: Vec<&str> = manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("name = ")))
        .map(|n| n.trim_matches('"'))
        .collect();
    assert_eq!(bins.len(), 3, "{bins:?}");
    for bin in bins {
        assert!(
            out.contains(&format!("\"{bin}\"")),
            "{bin} missing from: {out}"
        );
    }
}
