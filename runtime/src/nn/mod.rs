//! Building blocks of the forward passes, each one MLX op or a fixed composition of ops
//! in the reference's order. The monolith and generated code call the same blocks, so
//! bit-exactness follows from structure.

pub mod activation;
pub mod attention;
pub mod compiled;
pub mod composition;
pub mod embedding;
pub mod fused;
pub mod linear;
pub mod mask;
pub mod mlp;
pub mod moe;
pub mod multi_linear;
pub mod norm;
pub mod residual;
pub mod rope;
pub mod scalar;
pub mod scaled;
pub mod split;
pub mod swiglu;

pub use attention::{sdpa, sdpa_quantized, sdpa_with};
pub use composition::Composition;
pub use embedding::Embedding;
pub use linear::Linear;
pub use mask::AttnMask;
pub use norm::rms_norm;
pub use rope::{Rope, RopeOffset};
