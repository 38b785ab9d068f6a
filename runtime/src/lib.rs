//! mlx-aot's engine: the families (config, plan, weights, monolith each), caches,
//! execution options, the registry of generated implementations, generation.
//!
//! A family's monolith walks a [`plan::ModelPlan`] at run time and is the reference
//! every generated model must match bit for bit; [`family`] is what a family provides
//! and [`families`] the one list of them.

pub mod backend;
pub mod batch;
pub mod cache;
pub mod config;
pub mod error;
pub mod families;
pub mod family;
pub mod fingerprint;
pub mod generate;
pub mod graph;
pub mod guard;
pub mod json;
pub mod kernels;
pub mod kv_layout;
pub mod kv_policy;
pub mod memory;
pub mod model;
pub mod nn;
pub mod options;
pub mod plan;
pub mod quantization;
pub mod registry;
pub mod sampling;
pub mod sequence;
pub mod signature;
pub mod specialized;
pub mod stream;
pub mod submitter;
pub mod synth;
pub mod weights;

pub use error::{Error, Result};
pub use mlx_rs;
