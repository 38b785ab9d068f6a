//! ModelPlan -> Rust source: the ahead-of-time specializer of mlx-aot.
//!
//! A model's inputs ([`source`]) resolve into a `runtime::plan::ModelPlan`; the emitter
//! ([`emit`], with [`stage`], [`layer`] and [`forward`]) turns the plan into one Rust module through
//! `quote`, `syn` and `prettyplease`; [`registry`] lists every model; [`project`] knows
//! where all of it lives in the repository and [`write`] applies (or checks) the result.
//! The output is a pure function of the inputs: byte-identical run after run.

pub mod doc;
pub mod emit;
pub mod error;
pub mod family;
pub mod forward;
pub mod header;
pub mod ident;
pub mod layer;
pub mod print;
pub mod project;
pub mod registry;
pub mod source;
pub mod stage;
pub mod variant;
pub mod write;

pub use emit::{ModuleSpec, model_module};
pub use error::{Error, Result};
pub use ident::ModelName;
pub use project::{Generation, Selection};
pub use source::{ModelSource, SourceTexts};
