//! SwiGLU: `down(silu(gate(x)) * up(x))`, with `silu(gate) * up` through one compiled
//! function (shapeless, so the same function at every sequence length), as mlx-lm's
//! `@partial(mx.compile, shapeless=True) swiglu` computes it; eager on request.
//!
//! The switch: [`crate::options::ExecOptions::compiled_swiglu`] off runs the eager ops
//! (`gate * sigmoid(gate)`, then `* up`). The reference's counterpart is MLX's own
//! compile switch (`mx.disable_compile()`).

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::compiled::call;
use crate::nn::composition::Composition;
use crate::nn::fused::{FusedProjection, products};
use crate::nn::linear::Linear;
use crate::options::{ExecOptions, Numerics};

/// `silu(gate) * up` with `silu(x) = x * sigmoid(x)`, op by op.
pub fn swiglu_eager(gate: &Array, up: &Array) -> Result<Array> {
    let silu = mlx_rs::ops::multiply(gate, mlx_rs::ops::sigmoid(gate)?)?;
    Ok(mlx_rs::ops::multiply(&silu, up)?)
}

/// `silu(gate) * up`: the compiled function when `compiled`, else eager.
pub fn swiglu(gate: &Array, up: &Array, compiled: bool) -> Result<Array> {
    if !compiled {
        return swiglu_eager(gate, up);
    }
    call(("swiglu", 0), &[gate, up], |a| swiglu_eager(&a[0], &a[1]))
}

/// The dense SwiGLU MLP.
#[derive(Debug, Clone)]
pub struct SwiGlu {
    /// gate_proj.
    pub gate: Linear,
    /// up_proj.
    pub up: Linear,
    /// down_proj.
    pub down: Linear,
    /// gate_proj and up_proj as one matmul (quantized weights; `gate` and `up` are then
    /// views of it).
    pub gate_up: Option<FusedProjection>,
}

impl SwiGlu {
    /// `down(swiglu(gate(x), up(x)))` on MLX's kernels, the activation compiled when
    /// `compiled`.
    pub fn forward(&self, x: &Array, compiled: bool) -> Result<Array> {
        let options = ExecOptions {
            numerics: Some(Numerics::Mlx),
            compiled_swiglu: compiled,
            ..ExecOptions::default()
        };
        self.forward_with(x, Composition::Reference, &options)
    }

    /// [`SwiGlu::forward`] as `options` run it (`compiled_swiglu`, the numerics), with
    /// gate and up from the fused matmul where `composition` picks it.
    pub fn forward_with(
        &self,
        x: &Array,
        composition: Composition,
        options: &ExecOptions,
    ) -> Result<Array> {
        // Under the `fast` profile, gate, up and the activation are one kernel for a few
        // rows whatever the composition (see `Mlp::forward_with`).
        if let Some(f) = &self.gate_up
            && f.parts() == 2
            && let Some(a) = crate::kernels::fast::quantized_matvec(
                x,
                f.weight(),
                crate::kernels::fast::Epilogue::Swiglu,
                options,
            )?
        {
            return self.down.forward_with(&a, options);
        }
        let [g, u] = products(
            [&self.gate, &self.up],
            self.gate_up.as_ref(),
            x,
            composition,
            options,
        )?;
        let a = swiglu(&g, &u, options.compiled_swiglu)?;
        self.down.forward_with(&a, options)
    }

    /// Fuses gate and up (see [`FusedProjection::fuse`]); a no-op for float weights.
    pub fn fuse(&mut self) -> Result<()> {
        self.gate_up = FusedProjection::fuse_in_place(&mut [&mut self.gate, &mut self.up])?;
        Ok(())
    }
}
