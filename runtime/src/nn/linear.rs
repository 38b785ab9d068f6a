//! A bias-free linear layer, float or affine-quantized (mlx `nn.Linear` /
//! `nn.QuantizedLinear`).

use mlx_rs::Array;

use crate::error::Result;
use crate::quantization::QuantSpec;

/// Packed affine-quantized weight: `weight` u32, `scales` and `biases` per group.
#[derive(Debug, Clone)]
pub struct QuantizedWeight {
    /// Packed values, `[.., out, in * bits / 32]` u32.
    pub weight: Array,
    /// Per-group scales, `[.., out, in / group]`.
    pub scales: Array,
    /// Per-group biases, `[.., out, in / group]`.
    pub biases: Array,
    /// Bits and group size.
    pub spec: QuantSpec,
}

impl QuantizedWeight {
    /// `quantized_matmul(x, W, transpose = true)`: `x Wᵀ` on the packed weight.
    pub fn matmul_t(&self, x: &Array) -> Result<Array> {
        Ok(mlx_rs::ops::quantized_matmul(
            x,
            &self.weight,
            &self.scales,
            &self.biases,
            true,
            self.spec.group_size as i32,
            self.spec.bits as i32,
        )?)
    }

    /// Bytes of the packed weight, scales and biases.
    pub fn nbytes(&self) -> usize {
        self.weight.nbytes() + self.scales.nbytes() + self.biases.nbytes()
    }
}

/// `y = x Wᵀ`.
#[derive(Debug, Clone)]
pub enum Linear {
    /// Float weight `[out, in]`.
    Float {
        /// The weight.
        weight: Array,
    },
    /// Affine-quantized weight.
    Quantized(QuantizedWeight),
}

impl Linear {
    /// Applies the layer: `x @ W.T`, or `quantized_matmul(x, W, transpose = true)`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Linear::Float { weight } => mlx_rs::ops::matmul(x, weight.t())?,
            Linear::Quantized(q) => q.matmul_t(x)?,
        })
    }

    /// Output features.
    pub fn out_dims(&self) -> i32 {
        match self {
            Linear::Float { weight } => weight.dim(-2),
            Linear::Quantized(q) => q.weight.dim(-2),
        }
    }

    /// Input features.
    pub fn in_dims(&self) -> i32 {
        match self {
            Linear::Float { weight } => weight.dim(-1),
            Linear::Quantized(q) => q.scales.dim(-1) * q.spec.group_size as i32,
        }
    }

    /// Bytes held by the weight arrays.
    pub fn nbytes(&self) -> usize {
        match self {
            Linear::Float { weight } => weight.nbytes(),
            Linear::Quantized(q) => q.nbytes(),
        }
    }
}
