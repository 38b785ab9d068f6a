//! The generator's error: every failure names the model, file or field it is about.

use std::path::PathBuf;

/// Why a model could not be generated (nothing is written when this is returned).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config, kv layout or weight file is malformed or outside the supported set
    /// (the message names the file and the field).
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// No model folder of that name exists under `generated/models/`.
    #[error("unknown model {name:?}: no folder generated/models/{name}/ (known: {known})")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The model folders that exist.
        known: String,
    },
    /// The model name cannot name a module, a type and an implementation id.
    #[error("invalid model name {name:?}: {why}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The plan holds something the emitter does not generate code for.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The emitted code does not parse: a bug in the generator.
    #[error("the generator emitted invalid Rust for {model}: {message}")]
    Emit {
        /// The model being generated.
        model: String,
        /// The parser's message.
        message: String,
    },
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result with the generator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
