//! Whole generations: the checked-in files are fresh, output is byte-identical run after
//! run, `--model-dir` makes a model reproducible from the repository, and a failing
//! generation names the field and leaves every file untouched.

mod common;

use std::path::{Path, PathBuf};

use generator::project::{self, PRESETS, Selection};
use generator::write::FileSet;
use runtime::model::gemma4::synth;
use runtime::synth::SynthOptions;
use serde_json::{Value, json};

/// The rust-analyzer sourcegen pattern: regenerate everything in memory, compare.
#[test]
fn checked_in_generated_files_are_fresh() {
    let root = common::repo_root();
    let generation = project::plan(&root, &Selection::All).expect("every model generates");
    let stale = generation.files.stale(&root).expect("compare");
    assert!(
        stale.is_empty(),
        "stale generated files:\n  {}\nrun `{}` and commit the result",
        stale.join("\n  "),
        project::REGENERATE_ALL
    );
    let names: Vec<&str> = generation.models.iter().map(|m| m.name.as_str()).collect();
    for preset in PRESETS {
        assert!(names.contains(&preset), "{preset} is not generated");
    }
}

#[test]
fn output_is_byte_identical_run_after_run() {
    let root = common::repo_root();
    let a = project::plan(&root, &Selection::All).unwrap();
    let b = project::plan(&root, &Selection::All).unwrap();
    assert_eq!(a.files, b.files);
    let one = project::plan(&root, &Selection::One("gemma4-e4b".into())).unwrap();
    let path = "generated/src/models/gemma4_e4b.rs";
    assert_eq!(one.files.get(path), a.files.get(path));
}

/// Every generated function is distinct: a stage or layer function whose body equals
/// another's (its own name in its error messages aside) should have been one function.
#[test]
fn no_two_generated_functions_have_the_same_body() {
    use quote::ToTokens;
    let root = common::repo_root();
    let generation = project::plan(&root, &Selection::All).expect("every model generates");
    for model in &generation.models {
        let path = project::module_path(&model.name);
        let text = generation.files.get(&path).expect("the module is planned");
        let file = syn::parse_file(text).expect("the module parses");
        let mut seen: Vec<(String, String)> = Vec::new();
        let mut functions = 0;
        for item in &file.items {
            let syn::Item::Fn(f) = item else { continue };
            functions += 1;
            let name = f.sig.ident.to_string();
            let body = f
                .block
                .to_token_stream()
                .to_string()
                .replace(&format!("\"{name}\""), "\"_\"");
            if let Some((other, _)) = seen.iter().find(|(_, b)| *b == body) {
                panic!("{path}: {name} has the same body as {other}");
            }
            seen.push((name, body));
        }
        assert!(functions >= 4, "{path}: only {functions} functions found");
    }
}

/// A scratch repository with some presets' inputs copied in.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(tag: &str, presets: &[&str]) -> Self {
        let root = std::env::temp_dir().join(format!("mlx-aot-gen-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for preset in presets {
            let from = common::repo_root().join(project::MODELS_DIR).join(preset);
            let to = root.join(project::MODELS_DIR).join(preset);
            std::fs::create_dir_all(&to).unwrap();
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
            }
        }
        Scratch { root }
    }

    fn model_file(&self, model: &str, file: &str) -> PathBuf {
        self.root.join(project::MODELS_DIR).join(model).join(file)
    }

    fn edit_config(&self, model: &str, edit: impl FnOnce(&mut Value)) {
        let path = self.model_file(model, "config.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    }

    /// Every file under the root with its bytes, in path order.
    fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else {
                    out.push((path.clone(), std::fs::read(&path).unwrap()));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out.sort();
        out
    }

    fn plan(&self, selection: Selection) -> generator::Result<project::Generation> {
        project::plan(&self.root, &selection)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn apply(files: &FileSet, root: &Path) -> Vec<String> {
    files.apply(root).expect("apply")
}

#[test]
fn apply_then_check_is_clean_and_check_sees_every_change() {
    let s = Scratch::new("apply", &["gemma4-e4b", "gemma4-31b"]);
    let all = s.plan(Selection::All).unwrap();
    let written = apply(&all.files, &s.root);
    assert_eq!(
        written,
        [
            "generated/src/models/gemma4_31b.rs",
            "generated/src/models/gemma4_e4b.rs",
            "generated/src/models/mod.rs",
            "generated/src/registry.rs",
        ]
    );
    assert!(
        s.plan(Selection::All)
            .unwrap()
            .files
            .stale(&s.root)
            .unwrap()
            .is_empty()
    );
    assert!(
        apply(&all.files, &s.root).is_empty(),
        "a second run writes nothing"
    );

    // A hand edit, a deleted module and an orphan module are all stale.
    let e4b = s.root.join("generated/src/models/gemma4_e4b.rs");
    std::fs::write(&e4b, "// edited\n").unwrap();
    std::fs::remove_file(s.root.join("generated/src/models/gemma4_31b.rs")).unwrap();
    std::fs::write(s.root.join("generated/src/models/gone.rs"), "").unwrap();
    let again = s.plan(Selection::All).unwrap();
    assert_eq!(
        again.files.stale(&s.root).unwrap(),
        [
            "generated/src/models/gemma4_31b.rs",
            "generated/src/models/gemma4_e4b.rs",
            "generated/src/models/gone.rs",
        ]
    );
    apply(&again.files, &s.root);
    assert!(!s.root.join("generated/src/models/gone.rs").exists());
    assert!(again.files.stale(&s.root).unwrap().is_empty());
}

#[test]
fn one_model_also_writes_the_index_and_missing_modules() {
    let s = Scratch::new("one", &["gemma4-e4b", "gemma4-31b"]);
    let one = s.plan(Selection::One("gemma4-e4b".into())).unwrap();
    let written = apply(&one.files, &s.root);
    assert!(written.contains(&"generated/src/models/gemma4_31b.rs".to_owned()));
    let again = s.plan(Selection::One("gemma4-e4b".into())).unwrap();
    let paths: Vec<&str> = again
        .files
        .files()
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "generated/src/models/gemma4_e4b.rs",
            "generated/src/models/mod.rs",
            "generated/src/registry.rs",
        ]
    );
}

/// Generation fails with `message`; nothing under the scratch root changed.
fn fails_untouched(s: &Scratch, selection: Selection, message: &[&str]) {
    let before = s.snapshot();
    let err = s
        .plan(selection)
        .map(|_| ())
        .expect_err("generation must fail")
        .to_string();
    for part in message {
        assert!(
            err.contains(part),
            "error {err:?} does not mention {part:?}"
        );
    }
    assert_eq!(before, s.snapshot(), "a failed generation changed files");
}

#[test]
fn unknown_layer_type_names_the_field() {
    let s = Scratch::new("layer-types", &["gemma4-e4b", "gemma4-31b"]);
    apply(&s.plan(Selection::All).unwrap().files, &s.root);
    s.edit_config("gemma4-31b", |c| {
        c["layer_types"][2] = json!("global_attention")
    });
    fails_untouched(
        &s,
        Selection::All,
        &[
            "generated/models/gemma4-31b/config.json",
            "layer_types[2]",
            "global_attention",
        ],
    );
    fails_untouched(&s, Selection::One("gemma4-31b".into()), &["layer_types[2]"]);
}

#[test]
fn moe_without_top_k_names_the_field() {
    let s = Scratch::new("top-k", &["gemma4-26b-a4b"]);
    s.edit_config("gemma4-26b-a4b", |c| {
        c.as_object_mut().unwrap().remove("top_k_experts");
    });
    fails_untouched(&s, Selection::All, &["top_k_experts", "enable_moe_block"]);
}

#[test]
fn malformed_inputs_are_one_clear_error() {
    let s = Scratch::new("malformed", &["gemma4-e4b"]);
    std::fs::write(
        s.model_file("gemma4-e4b", "kv_config.json"),
        "[{\"layer_idx\": 30, \"bits\": 4}]",
    )
    .unwrap();
    fails_untouched(
        &s,
        Selection::All,
        &["kv_config.json", "layer_idx", "cache 30"],
    );
    std::fs::write(s.model_file("gemma4-e4b", "config.json"), "{ not json").unwrap();
    fails_untouched(
        &s,
        Selection::All,
        &["generated/models/gemma4-e4b/config.json"],
    );
    fails_untouched(
        &s,
        Selection::One("gemma4-nope".into()),
        &["unknown model \"gemma4-nope\"", "known: gemma4-e4b"],
    );
    fails_untouched(
        &s,
        Selection::Checkpoint {
            dir: s.root.join("nowhere"),
            name: "Bad_Name".into(),
        },
        &["invalid model name \"Bad_Name\""],
    );
}

#[test]
fn a_checkpoint_becomes_a_model_reproducible_from_the_repository() {
    let s = Scratch::new("checkpoint", &["gemma4-e4b"]);
    // A small E4B-shaped checkpoint whose layer 1 has no layer scalar.
    let e4b = common::preset("gemma4-e4b");
    let twin = synth::twin(
        e4b.config
            .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
            .expect("gemma4"),
    );
    let opts = SynthOptions {
        seed: 3,
        quant: None,
    };
    let (mut tensors, _) = synth::random_tensors(&twin, opts).unwrap();
    tensors
        .remove("layers.1.layer_scalar")
        .expect("a scalar to drop");
    let dir = s.root.join("download");
    synth::write_folder(&dir, &twin, &tensors, None).unwrap();
    let kv = std::fs::read_to_string(s.model_file("gemma4-e4b", "kv_config.json")).unwrap();
    std::fs::write(dir.join("kv_config.json"), &kv).unwrap();

    let selection = Selection::Checkpoint {
        dir: dir.clone(),
        name: "my-e4b".into(),
    };
    let generation = s.plan(selection.clone()).unwrap();
    let model = &generation.models[0];
    assert!(!model.plan.layers[1].flags.layer_scalar && model.plan.layers[0].flags.layer_scalar);
    assert_ne!(model.fingerprint(), e4b.fingerprint());
    let written = apply(&generation.files, &s.root);
    for path in [
        "generated/models/my-e4b/config.json",
        "generated/models/my-e4b/kv_config.json",
        "generated/models/my-e4b/weight_facts.json",
        "generated/src/models/my_e4b.rs",
        "generated/src/models/mod.rs",
        "generated/src/registry.rs",
    ] {
        assert!(
            written.contains(&path.to_owned()),
            "{path} not written: {written:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(s.model_file("my-e4b", "kv_config.json")).unwrap(),
        kv
    );
    let module = generation
        .files
        .get("generated/src/models/my_e4b.rs")
        .unwrap();
    assert!(module.starts_with(
        "// @generated by `cargo xtask generate my-e4b`. Do not edit; regenerate.\n\
         // source: generated/models/my-e4b (config.json, kv_config.json, weight_facts.json)\n"
    ));
    assert!(module.contains("pub type MyE4b = Specialized<Gemma4>;"));
    assert!(
        module.contains("fn donor_sliding_q4g64_ple("),
        "layer 1's variant has no scalar"
    );

    // Regenerating from the repository alone gives the same files.
    for again in [Selection::One("my-e4b".into()), Selection::All] {
        let stale = s.plan(again).unwrap().files.stale(&s.root).unwrap();
        assert!(
            stale.is_empty(),
            "not reproducible from the repository: {stale:?}"
        );
    }
    assert!(
        s.plan(selection)
            .unwrap()
            .files
            .stale(&s.root)
            .unwrap()
            .is_empty()
    );

    // The checkpoint loses its kv_config: the copy in the repository goes too.
    std::fs::remove_file(dir.join("kv_config.json")).unwrap();
    let float = s
        .plan(Selection::Checkpoint {
            dir,
            name: "my-e4b".into(),
        })
        .unwrap();
    apply(&float.files, &s.root);
    assert!(!s.model_file("my-e4b", "kv_config.json").exists());
    assert!(
        s.plan(Selection::All)
            .unwrap()
            .files
            .stale(&s.root)
            .unwrap()
            .is_empty()
    );
}
