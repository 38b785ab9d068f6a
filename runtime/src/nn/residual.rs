//! The end of a layer with a layer scalar, `(h + delta) * scalar`, as one compiled kernel.
//!
//! The reference adds the block's output to the residual stream, then multiplies the sum
//! by the layer's scalar: two ops (three with the scalar's broadcast). Compiled, the
//! add feeds the multiply inside one kernel; an add feeding a multiply leaves no
//! multiply-add for the kernel compiler to contract into an FMA, so the bytes are the
//! two ops' (`scripts/decode-probe.py` on the CPU and on CUDA, where a multiply feeding
//! an add does change them; the parity gate on whole models).

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::compiled::call;

/// `(h + delta) * scalar`, op by op as the reference runs it.
pub fn scaled_residual_eager(h: &Array, delta: &Array, scalar: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::multiply(mlx_rs::ops::add(h, delta)?, scalar)?)
}

/// `(h + delta) * scalar` as one compiled (shapeless) function.
pub fn scaled_residual(h: &Array, delta: &Array, scalar: &Array) -> Result<Array> {
    call(("scaled_residual", 0), &[h, delta, scalar], |a| {
        scaled_residual_eager(&a[0], &a[1], &a[2])
    })
}
