//! The runtime's error type: every failure names the file, key, tensor or cache it is about.

use std::path::PathBuf;

/// Errors of the runtime library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config file (config.json, kv_config.json) is missing a key or holds a bad value.
    #[error("{file}: `{key}`: {message}")]
    Config {
        /// The file (or a description of the source) being read.
        file: String,
        /// The key, as a JSON path (`text_config.layer_types[3]`).
        key: String,
        /// What was expected.
        message: String,
    },
    /// A weight file or tensor is missing, malformed or of the wrong shape.
    #[error("{file}: tensor `{tensor}`: {message}")]
    Weights {
        /// The safetensors file (or folder) involved.
        file: String,
        /// The tensor name.
        tensor: String,
        /// What was expected.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The model needs something this engine does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A cache was used in a way its kind does not allow.
    #[error("cache {cache}: {message}")]
    Cache {
        /// The cache index.
        cache: usize,
        /// What went wrong.
        message: String,
    },
    /// A request was refused before any work started (bad input, over the memory plan).
    #[error("{0}")]
    Request(String),
    /// A model implementation could not be selected.
    #[error("{0}")]
    Selection(String),
    /// An MLX operation failed.
    #[error("mlx: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
}

/// Result with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A config error for `key` in `file`.
    pub fn config(
        file: impl Into<String>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Config {
            file: file.into(),
            key: key.into(),
            message: message.into(),
        }
    }

    /// A weights error for `tensor` in `file`.
    pub fn weights(
        file: impl Into<String>,
        tensor: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Weights {
            file: file.into(),
            tensor: tensor.into(),
            message: message.into(),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
