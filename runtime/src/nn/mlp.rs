//! The dense GeGLU MLP: `down(geglu(gate(x), up(x)))` (see [`crate::nn::activation`]).

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::activation::geglu;
use crate::nn::linear::Linear;

/// The dense GeGLU MLP.
#[derive(Debug, Clone)]
pub struct Mlp {
    /// gate_proj.
    pub gate: Linear,
    /// up_proj.
    pub up: Linear,
    /// down_proj.
    pub down: Linear,
}

impl Mlp {
    /// `down(geglu(gate(x), up(x)))`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let g = self.gate.forward(x)?;
        let u = self.up.forward(x)?;
        self.down.forward(&geglu(&g, &u)?)
    }
}
