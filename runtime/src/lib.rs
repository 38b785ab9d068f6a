//! mlx-aot's engine: config, plan, weights, caches, the Gemma 4 monolith, generation.
//!
//! The monolith (`model::gemma4`) walks a [`plan::ModelPlan`] at run time and is the
//! reference every generated model must match bit for bit.

pub mod config;
pub mod error;
pub mod fingerprint;
pub mod json;
pub mod kv_layout;
pub mod plan;
pub mod quantization;
pub mod signature;

pub use error::{Error, Result};
pub use mlx_rs;
