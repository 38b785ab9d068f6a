//! A per-head linear layer `[heads, out, in]` (mlx-lm's `MultiLinear` /
//! `QuantizedMultiLinear` in `models/mla.py`): MLA's absorbed query and output
//! projections, split from `kv_b_proj` by mlx-lm's `sanitize`.

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::linear::QuantizedWeight;

/// `[heads, out, in]` weights, float or affine-quantized along `in`.
#[derive(Debug, Clone)]
pub enum MultiLinear {
    /// Float weight.
    Float {
        /// `[heads, out, in]`.
        weight: Array,
    },
    /// Affine-quantized weight.
    Quantized(QuantizedWeight),
}

impl MultiLinear {
    /// `x @ Wᵀ` per head (`transpose`), or `x @ W`: `matmul`, or `quantized_matmul` with
    /// the same `transpose`.
    pub fn forward(&self, x: &Array, transpose: bool) -> Result<Array> {
        Ok(match self {
            MultiLinear::Float { weight } if transpose => {
                mlx_rs::ops::matmul(x, weight.swap_axes(-1, -2)?)?
            }
            MultiLinear::Float { weight } => mlx_rs::ops::matmul(x, weight)?,
            MultiLinear::Quantized(q) => mlx_rs::ops::quantized_matmul(
                x,
                &q.weight,
                &q.scales,
                &q.biases,
                transpose,
                q.spec.group_size as i32,
                q.spec.bits as i32,
            )?,
        })
    }

    /// The weight arrays.
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            MultiLinear::Float { weight } => vec![weight],
            MultiLinear::Quantized(q) => vec![&q.weight, &q.scales, &q.biases],
        }
    }
}
