//! A bias-free linear layer, float or affine-quantized (mlx `nn.Linear` /
//! `nn.QuantizedLinear`).

use mlx_rs::Array;

use crate::error::Result;
use crate::options::ExecOptions;
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

    /// [`Self::matmul_t`] for an LM head: under the `fast` profile, a weight of at least
    /// [`FAST_HEAD_BYTES`] through the matrix-vector kernel of ours where it applies
    /// (H200: gemma4-e4b's 378 MB head in 263 µs against MLX's 440; the smaller
    /// projections stay MLX's, whose device times ours only matches while costing more
    /// host time to build, BENCHMARKS.md "qmv epilogues").
    pub fn head_matmul_t(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        if self.nbytes() >= FAST_HEAD_BYTES
            && let Some(y) = crate::kernels::fast::quantized_matvec(
                x,
                self,
                crate::kernels::fast::Epilogue::Plain,
                options,
            )?
        {
            return Ok(y);
        }
        self.matmul_t(x)
    }
}

/// The size from which [`QuantizedWeight::head_matmul_t`] takes the kernel of ours.
pub const FAST_HEAD_BYTES: usize = 32 << 20;

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

    /// [`Self::forward`] as an LM head ([`QuantizedWeight::head_matmul_t`]).
    pub fn head_forward(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        match self {
            Linear::Float { weight } => Ok(mlx_rs::ops::matmul(x, weight.t())?),
            Linear::Quantized(q) => q.head_matmul_t(x, options),
        }
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
