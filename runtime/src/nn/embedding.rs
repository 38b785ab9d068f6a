//! Token embeddings, float or affine-quantized (mlx `nn.Embedding` /
//! `nn.QuantizedEmbedding`), with `as_linear` for the tied head.

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::linear::QuantizedWeight;
use crate::options::ExecOptions;

/// A `[vocab, dims]` table.
#[derive(Debug, Clone)]
pub enum Embedding {
    /// Float table.
    Float {
        /// `[vocab, dims]`.
        weight: Array,
    },
    /// Affine-quantized table (rows packed like a linear weight).
    Quantized(QuantizedWeight),
}

impl Embedding {
    /// `table[ids]`: a `take` along axis 0; quantized tables gather the packed rows,
    /// scales and biases, then dequantize.
    pub fn lookup(&self, ids: &Array) -> Result<Array> {
        Ok(match self {
            Embedding::Float { weight } => weight.take_axis(ids, 0)?,
            Embedding::Quantized(q) => mlx_rs::ops::dequantize(
                q.weight.take_axis(ids, 0)?,
                q.scales.take_axis(ids, 0)?,
                &q.biases.take_axis(ids, 0)?,
                q.spec.group_size as i32,
                q.spec.bits as i32,
            )?,
        })
    }

    /// `x @ table.T` (the tied head).
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Embedding::Float { weight } => mlx_rs::ops::matmul(x, weight.t())?,
            Embedding::Quantized(q) => q.matmul_t(x)?,
        })
    }

    /// [`Self::as_linear`] as an LM head ([`QuantizedWeight::head_matmul_t`]).
    pub fn as_head(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        match self {
            Embedding::Float { weight } => Ok(mlx_rs::ops::matmul(x, weight.t())?),
            Embedding::Quantized(q) => q.head_matmul_t(x, options),
        }
    }

    /// Rows of the table.
    pub fn vocab(&self) -> i32 {
        match self {
            Embedding::Float { weight } => weight.dim(0),
            Embedding::Quantized(q) => q.weight.dim(0),
        }
    }

    /// Bytes held by the table arrays.
    pub fn nbytes(&self) -> usize {
        match self {
            Embedding::Float { weight } => weight.nbytes(),
            Embedding::Quantized(q) => q.nbytes(),
        }
    }
}
