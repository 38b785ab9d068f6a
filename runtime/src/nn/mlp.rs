//! The dense GeGLU MLP: `down(geglu(gate(x), up(x)))` (see [`crate::nn::activation`]).

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::activation::geglu;
use crate::nn::composition::Composition;
use crate::nn::fused::{FusedProjection, products};
use crate::nn::linear::Linear;
use crate::options::ExecOptions;

/// The dense GeGLU MLP.
#[derive(Debug, Clone)]
pub struct Mlp {
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

impl Mlp {
    /// `down(geglu(gate(x), up(x)))`, the activation as `options` say.
    pub fn forward(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        self.forward_with(x, Composition::Reference, options)
    }

    /// [`Mlp::forward`], with gate and up from the fused matmul where `composition`
    /// picks it, and the activation as one fused CUDA kernel where it runs them.
    pub fn forward_with(
        &self,
        x: &Array,
        composition: Composition,
        options: &ExecOptions,
    ) -> Result<Array> {
        // Under the `fast` profile, gate, up and the activation are one kernel for a few
        // rows whatever the composition, so the monolith and the generated code take it
        // alike (gelu(g) * u from f32 sums, no bf16 rounding of g and u in between).
        if let Some(f) = &self.gate_up
            && f.parts() == 2
            && let Some(a) = crate::kernels::fast::quantized_matvec(
                x,
                f.weight(),
                crate::kernels::fast::Epilogue::Geglu,
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
        let compiled = options.compiled_activations;
        let a = if composition.fused_kernels(x, options) {
            let y = crate::kernels::geglu(&g, &u, crate::kernels::Gelu::Geglu)?;
            crate::kernels::compare("MLP geglu", options, std::slice::from_ref(&y), || {
                Ok(vec![geglu(&g, &u, compiled)?])
            })?;
            y
        } else {
            geglu(&g, &u, compiled)?
        };
        self.down.forward_with(&a, options)
    }

    /// Fuses gate and up (see [`FusedProjection::fuse`]); a no-op for float weights.
    pub fn fuse(&mut self) -> Result<()> {
        self.gate_up = FusedProjection::fuse_in_place(&mut [&mut self.gate, &mut self.up])?;
        Ok(())
    }
}
