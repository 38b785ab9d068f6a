//! The checked-in generated forward passes of mlx-aot and their registry.
//!
//! Every module of [`models`] is written by `cargo xtask generate` from a folder of
//! `generated/models/` (config.json, kv_config.json); [`implementations`] lists them for
//! `runtime::registry::Registry`. Of `src/`, only this file is written by hand.

// Generated files are printed by prettyplease and must stay byte-identical to what the
// generator writes (`cargo xtask generate --all --check`), so rustfmt leaves them alone.
// The `@generated` marker alone does not do it: this toolchain's rustfmt formats
// generated files by default (`format_generated_files = true`).
#[rustfmt::skip]
pub mod models;
#[rustfmt::skip]
mod registry;

pub use registry::{IMPLEMENTATIONS, implementations};

/// A registry holding every generated implementation.
pub fn registry() -> runtime::Result<runtime::registry::Registry> {
    runtime::registry::Registry::new(implementations())
}
