//! SwiGLU: `down(silu(gate(x)) * up(x))`, with `silu(gate) * up` through one compiled
//! function (shapeless, so the same function at every sequence length), as mlx-lm's
//! `@partial(mx.compile, shapeless=True) swiglu` computes it; eager on request.
//!
//! The switch: `MLX_AOT_COMPILED_SWIGLU=0` runs the eager ops (`gate * sigmoid(gate)`,
//! then `* up`), and [`set_compiled_swiglu`] overrides it for this thread. The
//! reference's counterpart is MLX's own compile switch (`mx.disable_compile()`).

use std::cell::{Cell, RefCell};

use mlx_rs::Array;
use mlx_rs::error::Exception;

use crate::error::{Error, Result};
use crate::nn::linear::Linear;

type Compiled = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

thread_local! {
    static SWITCH: Cell<Option<bool>> = const { Cell::new(None) };
    static COMPILED: RefCell<Option<Compiled>> = const { RefCell::new(None) };
}

/// Forces the compiled SwiGLU on or off for this thread; `None` restores the default
/// (on, unless `MLX_AOT_COMPILED_SWIGLU=0`).
pub fn set_compiled_swiglu(on: Option<bool>) {
    SWITCH.with(|s| s.set(on));
}

/// Whether SwiGLU runs through its compiled function.
pub fn compiled_swiglu() -> bool {
    SWITCH
        .with(|s| s.get())
        .unwrap_or_else(|| std::env::var("MLX_AOT_COMPILED_SWIGLU").map_or(true, |v| v != "0"))
}

/// `silu(gate) * up` with `silu(x) = x * sigmoid(x)`, op by op.
pub fn swiglu_eager(gate: &Array, up: &Array) -> Result<Array> {
    let silu = mlx_rs::ops::multiply(gate, mlx_rs::ops::sigmoid(gate)?)?;
    Ok(mlx_rs::ops::multiply(&silu, up)?)
}

/// `silu(gate) * up`: the compiled function when [`compiled_swiglu`], else eager.
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    if !compiled_swiglu() {
        return swiglu_eager(gate, up);
    }
    COMPILED.with(|c| {
        let mut c = c.borrow_mut();
        let f = c.get_or_insert_with(|| {
            let f = |a: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                swiglu_eager(&a[0], &a[1])
                    .map(|y| vec![y])
                    .map_err(|e| Exception::custom(e.to_string()))
            };
            Box::new(mlx_rs::transforms::compile::compile(f, true))
        });
        let mut out = f(&[gate.clone(), up.clone()])?;
        out.pop()
            .ok_or_else(|| Error::Unsupported("the compiled swiglu returned nothing".into()))
    })
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
}

impl SwiGlu {
    /// `down(swiglu(gate(x), up(x)))`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let g = self.gate.forward(x)?;
        let u = self.up.forward(x)?;
        self.down.forward(&swiglu(&g, &u)?)
    }
}
