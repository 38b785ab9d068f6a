//! RMSNorm: `fast::rms_norm` with the stored weight used as is (Gemma 4 stores no `w - 1`).

use mlx_rs::Array;

use crate::error::Result;

/// `fast::rms_norm(x, weight, eps)`; `weight = None` is the weightless `v_norm`.
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    Ok(mlx_rs::fast::rms_norm(x, weight, eps)?)
}
