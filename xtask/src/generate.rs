//! `cargo xtask generate`: plans the whole generation first (any error leaves every file
//! untouched), then writes what changed atomically, or with `--check` only reports it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::ArgGroup;
use generator::Selection;
use generator::project::{self, PRESETS};

/// The arguments of `cargo xtask generate`.
#[derive(clap::Args, Debug)]
#[command(
    group(ArgGroup::new("what").required(true).args(["model", "all", "model_dir"])),
    after_help = format!(
        "Models are the folders of generated/models/ (shipped presets: {}).",
        PRESETS.join(", ")
    )
)]
pub struct Args {
    /// A model of generated/models/ (e.g. gemma4-e4b).
    model: Option<String>,
    /// Every model of generated/models/.
    #[arg(long)]
    all: bool,
    /// Write nothing; exit non-zero and list the files that would change.
    #[arg(long)]
    check: bool,
    /// A downloaded checkpoint (config.json, kv_config.json if any, safetensors): its
    /// inputs are copied to generated/models/NAME/ and its module generated.
    #[arg(long, value_name = "DIR", requires = "name")]
    model_dir: Option<PathBuf>,
    /// The name of the model given by --model-dir (lowercase, digits, dashes).
    #[arg(long, value_name = "NAME", requires = "model_dir")]
    name: Option<String>,
}

/// The repository root (this crate's parent folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repository root")
        .to_owned()
}

/// Runs `cargo xtask generate`.
pub fn run(args: &Args) -> Result<ExitCode> {
    let selection = match (&args.model, args.all, &args.model_dir, &args.name) {
        (Some(model), false, None, None) => Selection::One(model.clone()),
        (None, true, None, None) => Selection::All,
        (None, false, Some(dir), Some(name)) => Selection::Checkpoint {
            dir: dir.clone(),
            name: name.clone(),
        },
        _ => anyhow::bail!("give one of MODEL, --all, or --model-dir DIR --name NAME"),
    };
    let root = repo_root();
    let generation = project::plan(&root, &selection)?;
    for model in &generation.models {
        println!(
            "{}: fingerprint {}, {} layers, {} caches",
            model.name.as_str(),
            model.fingerprint(),
            model.plan.layers.len(),
            model.plan.num_caches()
        );
    }
    if args.check {
        let stale = generation.files.stale(&root)?;
        if stale.is_empty() {
            println!("up to date: {} files", generation.files.files().len());
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("stale generated files:");
        for path in &stale {
            eprintln!("  {path}");
        }
        eprintln!("run `{}` to regenerate them", fix_command(&selection));
        return Ok(ExitCode::FAILURE);
    }
    let changed = generation.files.apply(&root)?;
    if changed.is_empty() {
        println!("unchanged: {} files", generation.files.files().len());
    }
    for path in &changed {
        let verb = if generation.files.is_absent(path) {
            "removed"
        } else {
            "wrote"
        };
        println!("{verb} {path}");
    }
    Ok(ExitCode::SUCCESS)
}

fn fix_command(selection: &Selection) -> String {
    match selection {
        Selection::One(model) => format!("cargo xtask generate {model}"),
        Selection::All => project::REGENERATE_ALL.to_owned(),
        Selection::Checkpoint { dir, name } => format!(
            "cargo xtask generate --model-dir {} --name {name}",
            dir.display()
        ),
    }
}
