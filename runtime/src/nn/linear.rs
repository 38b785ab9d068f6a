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

    /// [`Self::matmul_t`] as `options` run it: under the `fast` profile, where
    /// [`Self::takes_fast_plain`], through the matrix-vector kernel of ours where it
    /// applies; otherwise MLX's `quantized_matmul`.
    pub fn matmul_t_with(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        if self.takes_fast_plain() {
            self.fast_or_mlx(x, options)
        } else {
            self.matmul_t(x)
        }
    }

    /// Whether a plain product on this weight goes to the kernel of ours (under `fast`):
    /// for inputs at least [`FAST_PLAIN_MIN_INPUT`] wide. The rule reads only the input
    /// width, which the parts of a fused projection share with the whole, so a part
    /// computed on its own (the monolith's separate q, k and v) takes the same kernel,
    /// and the same bytes, as the fused product (the generated single-token step's).
    pub fn takes_fast_plain(&self) -> bool {
        self.scales.dim(-1) * self.spec.group_size as i32 >= FAST_PLAIN_MIN_INPUT
    }

    /// `x Wᵀ` for an LM head, as `options` run it: under the `fast` profile through the
    /// kernel of ours whatever the width (a head is hundreds of MB: ours reads it at
    /// ~1.6 TB/s against MLX's ~0.9), else MLX's `quantized_matmul`.
    pub fn head_matmul_t(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        self.fast_or_mlx(x, options)
    }

    /// `x Wᵀ` through the kernel of ours where `options` and the shapes let it run,
    /// else MLX's `quantized_matmul`.
    fn fast_or_mlx(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        let plain = crate::kernels::fast::Epilogue::Plain;
        match crate::kernels::fast::quantized_matvec(x, self, plain, options)? {
            Some(y) => Ok(y),
            None => self.matmul_t(x),
        }
    }
}

/// The input width from which [`QuantizedWeight::takes_fast_plain`] picks the kernel of
/// ours for a plain product. On the H200 (BENCHMARKS.md, "qmv v2") ours wins at
/// gemma4-e4b's 4,096-wide full-attention output projection (10.4 µs a call against
/// MLX's 11.5) and its 10,240-wide MLP down (13.9 against 19.4), and does not at the
/// 2,560-wide q/k/v (14.9 against 14.0 full, 10.9 against 9.6 sliding) or the 2,048-wide
/// sliding output (9.1 against 8.5), where its ~5 µs more host build per call is not
/// repaid. The LM head always takes ours ([`QuantizedWeight::head_matmul_t`]).
pub const FAST_PLAIN_MIN_INPUT: i32 = 4096;

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
