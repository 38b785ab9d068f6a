//! GeGLU: `down(gelu_approx(gate(x)) * up(x))` with mlx's tanh approximation.

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::linear::Linear;
use crate::nn::scalar;

/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`, in that grouping, with
/// weak scalars and `power(x, 3)` (gemma4.md §3.8).
pub fn gelu_approx(x: &Array) -> Result<Array> {
    let cube = scalar::pow(x, 3.0)?;
    let inner = mlx_rs::ops::add(x, scalar::rmul(0.044715, &cube)?)?;
    let t = mlx_rs::ops::tanh(scalar::rmul((2.0 / std::f64::consts::PI).sqrt(), &inner)?)?;
    let half = scalar::rmul(0.5, x)?;
    Ok(mlx_rs::ops::multiply(&half, scalar::radd(1.0, &t)?)?)
}

/// `gelu_approx(gate) * x` (mlx-lm's compiled `geglu`).
pub fn geglu(gate: &Array, x: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::multiply(gelu_approx(gate)?, x)?)
}

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
