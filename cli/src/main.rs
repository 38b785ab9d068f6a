//! The `mlx-aot` binary: run, logits, synth, inspect, plan, bench, serve.
//!
//! Every failure ends as one line on stderr (`error: ...`) and a non-zero exit; a panic
//! hook turns the unexpected into one line too.

/// Appends one line to a `String` (writing to a `String` cannot fail).
macro_rules! outln {
    ($out:expr) => {
        $out.push('\n')
    };
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

mod bench;
mod figures;
mod gpu_busy;
mod inspect;
mod logits;
mod model_dir;
mod pipeline_arg;
mod plan;
mod presets;
mod run;
mod serve;
mod synth;
mod tokenizer;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mlx-aot: an ahead-of-time specializer and runtime for LLMs on MLX.
#[derive(Debug, Parser)]
#[command(name = "mlx-aot", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text from a prompt, streaming it, and print one line of figures.
    Run(run::Args),
    /// Write the logits of every position of a token sequence (teacher forced).
    Logits(logits::Args),
    /// Write a synthetic model folder (random weights, a small tokenizer).
    Synth(synth::Args),
    /// Show a model folder's config, per-layer plan, fingerprint and implementation.
    Inspect(inspect::Args),
    /// The memory plan of a model at a context length.
    Plan(plan::Args),
    /// Measure the monolith, the generated path and mlx-lm side by side.
    Bench(bench::Args),
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(serve::Args),
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error: {}{at}", one_line(&message));
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    // The server logs its requests; the other commands only warnings.
    init_tracing(if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    });
    let result = match cli.command {
        Command::Run(a) => run::main(a),
        Command::Logits(a) => logits::main(a),
        Command::Synth(a) => synth::main(a),
        Command::Inspect(a) => inspect::main(a),
        Command::Plan(a) => plan::main(a),
        Command::Bench(a) => bench::main(a),
        Command::Serve(a) => serve::main(a),
    };
    runtime::stream::release_at_exit();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A broken pipe (`mlx-aot run ... | head`) is not worth a message.
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", one_line(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default: `default`).
fn init_tracing(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Help and version print as clap prints them; usage errors become one line.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // The first paragraph of clap's message (a missing argument is named on the
            // line after the first).
            let text = e.render().to_string();
            let paragraph: Vec<&str> = text
                .lines()
                .skip_while(|l| l.trim().is_empty())
                .take_while(|l| !l.trim().is_empty())
                .collect();
            let message = one_line(&paragraph.join(" "));
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            let message = if message.is_empty() {
                "invalid arguments"
            } else {
                message
            };
            eprintln!("error: {message} (see --help)");
            ExitCode::from(2)
        }
    }
}

/// Writes `text` to stdout and flushes it; a closed pipe is an error the caller returns
/// (and `main` ends quietly on).
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Collapses a message onto one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
