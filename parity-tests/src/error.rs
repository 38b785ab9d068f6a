//! What can go wrong in the gate and the Python reference harness, typed: the runtime's
//! own errors keep their type (with where in the gate they happened), a mismatch keeps
//! its numbers.

use std::path::PathBuf;
use std::sync::Arc;

/// A gate or reference failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime failed at a point of the gate or of setting a model up.
    #[error("{context}: {source}")]
    Runtime {
        /// Where: model, weights, seed, phase, side.
        context: String,
        /// The runtime's error.
        #[source]
        source: runtime::error::Error,
    },
    /// Generated and monolith logits differ: the parity failure itself.
    #[error(
        "{context}: logits differ at row {row} token {token}: generated {generated} vs monolith \
         {monolith} (max |diff| {max_diff})"
    )]
    Mismatch {
        /// Where.
        context: String,
        /// Batch row x position of the first differing logit.
        row: usize,
        /// Its vocabulary index.
        token: usize,
        /// The generated code's value.
        generated: f32,
        /// The monolith's value.
        monolith: f32,
        /// The largest absolute difference over the step.
        max_diff: f32,
    },
    /// The logits of the two sides have different shapes.
    #[error("{context}: logits shapes differ: generated {generated:?} vs monolith {monolith:?}")]
    Shape {
        /// Where.
        context: String,
        /// The generated code's shape.
        generated: Vec<i32>,
        /// The monolith's.
        monolith: Vec<i32>,
    },
    /// The fast-path counter moved otherwise than the guard should have let it.
    #[error("{context}: the fast path ran {moved} times, expected {expected} (guard {verdict})")]
    Guard {
        /// Where.
        context: String,
        /// How often it ran.
        moved: u64,
        /// How often it should have.
        expected: u64,
        /// `should pass` or `should refuse`.
        verdict: &'static str,
    },
    /// Over caches nothing runs on, the two sides did not fail alike.
    #[error(
        "{context}: over caches no implementation runs on, the generated model gave \
         {generated:?} and the monolith {monolith:?} (expected the monolith's error from both)"
    )]
    Refusal {
        /// Where.
        context: String,
        /// What the generated model did.
        generated: String,
        /// What the monolith did.
        monolith: String,
    },
    /// The checked-in module was generated for another plan.
    #[error(
        "{id}: the {weights} model's plan has fingerprint {plan}, the implementation {module}: \
         the checked-in module is stale; run `cargo xtask generate --all`"
    )]
    Stale {
        /// Implementation id.
        id: String,
        /// Which weights.
        weights: String,
        /// The loaded plan's fingerprint.
        plan: String,
        /// The module's.
        module: String,
    },
    /// No step of a model took the fast path: nothing compared could have failed.
    #[error("{id}: no step took the fast path, so nothing compared could have failed")]
    NoFastPath {
        /// Implementation id.
        id: String,
    },
    /// A file could not be read, written or created.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A command (the Python reference, pip, venv) could not run or failed.
    #[error("{what}: {detail}")]
    Command {
        /// What it was for.
        what: String,
        /// Why it failed: the status and the tails of its output.
        detail: String,
    },
    /// A logits file the reference wrote is not what the harness reads.
    #[error("{path}: {detail}")]
    LogitsFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The reference harness was asked something it cannot do, or found its environment
    /// otherwise than it needs.
    #[error("{0}")]
    Reference(String),
    /// The reference environment's set-up failed earlier in this process (kept once,
    /// returned to every caller).
    #[error(transparent)]
    Shared(Arc<Error>),
}

/// The gate's and the harness's results.
pub type Result<T> = std::result::Result<T, Error>;

/// Adds where a runtime error happened.
pub(crate) trait Context<T> {
    /// The runtime error, with `context`.
    fn at(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<runtime::error::Error>> Context<T> for std::result::Result<T, E> {
    fn at(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Runtime {
            context: context(),
            source: e.into(),
        })
    }
}

/// An I/O error on `path`.
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
