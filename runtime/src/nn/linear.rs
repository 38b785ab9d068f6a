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

    /// [`Self::matmul_t`] as `options` run it: under the `fast` profile, a weight of at
    /// least [`FAST_PLAIN_BYTES`] through the matrix-vector kernel of ours where it
    /// applies. Smaller weights stay MLX's `quantized_matmul`: there ours is no faster on
    /// the device and costs ~5 µs more host time to build a call (BENCHMARKS.md, "qmv
    /// v2").
    pub fn matmul_t_with(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        if self.nbytes() >= FAST_PLAIN_BYTES
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

    /// [`Self::matmul_t_with`] for an LM head (the same rule; a head is always past it).
    pub fn head_matmul_t(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        self.matmul_t_with(x, options)
    }
}

/// The weight size (packed values, scales and biases) from which
/// [`QuantizedWeight::matmul_t_with`] takes the kernel of ours: on the H200 ours wins
/// from gemma4-e4b's 5.9 MB full-attention output projection up (its 14.7 MB MLP down
/// in 14 µs against MLX's 20) and loses below (the 4.4 MB sliding q/k/v, 9.2 µs
/// against 8.4).
pub const FAST_PLAIN_BYTES: usize = 5 << 20;

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

    /// [`Self::forward`] as `options` run it ([`QuantizedWeight::matmul_t_with`]): the
    /// shared blocks' projections, so the monolith and the generated code route alike.
    pub fn forward_with(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        match self {
            Linear::Float { weight } => Ok(mlx_rs::ops::matmul(x, weight.t())?),
            Linear::Quantized(q) => q.matmul_t_with(x, options),
        }
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
