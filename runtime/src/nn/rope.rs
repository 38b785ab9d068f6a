//! Rotary position embeddings: the default type and Gemma 4's proportional type
//! (gemma4.md §3.6). Both rotate halves (`traditional = false`).

use mlx_rs::{Array, Dtype};

use crate::config::RopeParams;
use crate::error::Result;

/// A layer type's RoPE, ready to apply.
#[derive(Debug, Clone)]
pub enum Rope {
    /// `fast::rope(x, dims, base = theta)`.
    Default {
        /// Rotated dims (the head dim).
        dims: i32,
        /// rope_theta as the C float MLX receives.
        base: f32,
    },
    /// `fast::rope(x, dims, base = none, freqs)` with a period table.
    Proportional {
        /// The head dim.
        dims: i32,
        /// `dims / 2` periods: finite for the rotated pairs, `+inf` for the rest.
        freqs: Array,
    },
}

impl Rope {
    /// Builds the RoPE of a layer type with head dim `dims`. The proportional period
    /// table is computed with device ops in f32, as the reference does (never on the host
    /// in f64, where `pow` lands some entries 1 ulp off).
    pub fn new(params: &RopeParams, dims: usize) -> Result<Self> {
        let d = dims as i32;
        Ok(match *params {
            RopeParams::Default { theta } => Rope::Default {
                dims: d,
                base: theta as f32,
            },
            RopeParams::Proportional {
                theta,
                partial_rotary_factor,
                factor,
            } => {
                let rotated = (dims as f64 * partial_rotary_factor) as i32;
                let exponents = Array::arange::<f64, f32>(0.0, rotated as f64, 2.0)?;
                let exponents = super::scalar::div(&exponents, d as f64)?;
                let periods =
                    mlx_rs::ops::power(super::scalar::scalar(theta, Dtype::Float32)?, &exponents)?;
                let periods = super::scalar::rmul(factor.unwrap_or(1.0), &periods)?;
                let infinite =
                    Array::full::<f32>(&[(d - rotated) / 2], Array::from_f32(f32::INFINITY))?;
                let freqs = mlx_rs::ops::concatenate(&[periods, infinite], 0)?;
                freqs.eval()?;
                Rope::Proportional { dims: d, freqs }
            }
        })
    }

    /// Rotates `x` (`[B, heads, L, D]`) for positions starting at `offset`.
    pub fn apply(&self, x: &Array, offset: i32) -> Result<Array> {
        Ok(match self {
            Rope::Default { dims, base } => {
                mlx_rs::fast::rope(x, *dims, false, *base, 1.0, offset, None)?
            }
            Rope::Proportional { dims, freqs } => {
                mlx_rs::fast::rope(x, *dims, false, None, 1.0, offset, freqs)?
            }
        })
    }
}
