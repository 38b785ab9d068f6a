//! The model implementation registry (filled by the binary; see `generated`).

/// The id of the monolith implementation.
pub const MONOLITH_ID: &str = "gemma4-monolith";
