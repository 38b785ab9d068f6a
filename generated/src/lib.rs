//! Generated forward passes (see `cargo xtask generate`).
