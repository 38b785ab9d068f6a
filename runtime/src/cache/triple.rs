//! `QuantTriple`: an affine-quantized K or V buffer (packed u32, scales, biases).

use mlx_rs::Array;

use crate::error::Result;
use crate::quantization::QuantSpec;

/// `(packed [B, H, S, D*bits/32] u32, scales [B, H, S, D/gs], biases [B, H, S, D/gs])`.
#[derive(Debug, Clone)]
pub struct QuantTriple {
    /// Packed values.
    pub packed: Array,
    /// Per-group scales (K's dtype).
    pub scales: Array,
    /// Per-group biases (K's dtype).
    pub biases: Array,
}

impl QuantTriple {
    /// `mx.quantize(x, group_size, bits)` along the last axis.
    pub fn quantize(x: &Array, spec: QuantSpec) -> Result<Self> {
        let (packed, scales, biases) =
            mlx_rs::ops::quantize(x, spec.group_size as i32, spec.bits as i32)?;
        Ok(QuantTriple {
            packed,
            scales,
            biases,
        })
    }

    /// Zeros of `rows` rows, shaped for `dim`-wide vectors.
    pub fn zeros(
        batch: i32,
        heads: i32,
        rows: i32,
        dim: i32,
        spec: QuantSpec,
        dtype: mlx_rs::Dtype,
    ) -> Result<Self> {
        let packed_cols = dim * spec.bits as i32 / 32;
        let groups = dim / spec.group_size as i32;
        Ok(QuantTriple {
            packed: super::zeros(batch, heads, rows, packed_cols, mlx_rs::Dtype::Uint32)?,
            scales: super::zeros(batch, heads, rows, groups, dtype)?,
            biases: super::zeros(batch, heads, rows, groups, dtype)?,
        })
    }

    /// Applies `f` to each component.
    pub fn map(&self, mut f: impl FnMut(&Array) -> Result<Array>) -> Result<Self> {
        Ok(QuantTriple {
            packed: f(&self.packed)?,
            scales: f(&self.scales)?,
            biases: f(&self.biases)?,
        })
    }

    /// Component-wise `f(self_i, other_i)`.
    pub fn zip(
        &self,
        other: &Self,
        mut f: impl FnMut(&Array, &Array) -> Result<Array>,
    ) -> Result<Self> {
        Ok(QuantTriple {
            packed: f(&self.packed, &other.packed)?,
            scales: f(&self.scales, &other.scales)?,
            biases: f(&self.biases, &other.biases)?,
        })
    }

    /// Each component with a broadcast axis inserted at `axis` (a view).
    pub fn expand_dims(&self, axis: i32) -> Result<Self> {
        self.map(|a| Ok(a.expand_dims(axis)?))
    }

    /// Rows in the sequence axis.
    pub fn len(&self) -> i32 {
        self.packed.dim(2)
    }

    /// Whether the buffer has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held.
    pub fn nbytes(&self) -> usize {
        self.packed.nbytes() + self.scales.nbytes() + self.biases.nbytes()
    }
}
