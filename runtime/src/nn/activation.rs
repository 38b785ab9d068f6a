//! Gemma 4's activations, compiled where the reference compiles them.
//!
//! mlx-lm 0.32 runs `gelu_approx`, `geglu` (`gelu_approx(gate) * x`) and
//! `logit_softcap` (`tanh(x / cap) * cap`) through `mx.compile(shapeless=True)`. Compiled,
//! each is one fused kernel instead of up to ten, and it rounds as the reference's fused
//! kernel does on every backend (on the CPU the fused and the op-by-op forms agree; on
//! CUDA they need not). The op-by-op forms stay available: `compiled = false`
//! ([`crate::options::ExecOptions::compiled_activations`]) selects them, as
//! `mx.disable_compile()` does for the reference.

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::compiled::call;
use crate::nn::scalar;

/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`, in that grouping, with
/// weak scalars and `power(x, 3)` (gemma4.md §3.8), op by op.
pub fn gelu_approx_eager(x: &Array) -> Result<Array> {
    let cube = scalar::pow(x, 3.0)?;
    let inner = mlx_rs::ops::add(x, scalar::rmul(0.044715, &cube)?)?;
    let t = mlx_rs::ops::tanh(scalar::rmul((2.0 / std::f64::consts::PI).sqrt(), &inner)?)?;
    let half = scalar::rmul(0.5, x)?;
    Ok(mlx_rs::ops::multiply(&half, scalar::radd(1.0, &t)?)?)
}

/// `gelu_approx(gate) * x`, op by op.
pub fn geglu_eager(gate: &Array, x: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::multiply(gelu_approx_eager(gate)?, x)?)
}

/// `tanh(x / cap) * cap`, op by op.
pub fn logit_softcap_eager(x: &Array, cap: f64) -> Result<Array> {
    let t = mlx_rs::ops::tanh(scalar::div(x, cap)?)?;
    scalar::mul(&t, cap)
}

/// mlx's `gelu_approx`, compiled when `compiled`.
pub fn gelu_approx(x: &Array, compiled: bool) -> Result<Array> {
    if !compiled {
        return gelu_approx_eager(x);
    }
    call(("gelu_approx", 0), &[x], |a| gelu_approx_eager(&a[0]))
}

/// mlx-lm's `geglu`: `gelu_approx(gate) * x`, compiled when `compiled`.
pub fn geglu(gate: &Array, x: &Array, compiled: bool) -> Result<Array> {
    if !compiled {
        return geglu_eager(gate, x);
    }
    call(("geglu", 0), &[gate, x], |a| geglu_eager(&a[0], &a[1]))
}

/// mlx-lm's `logit_softcap(cap, x)`, compiled when `compiled`.
pub fn logit_softcap(x: &Array, cap: f64, compiled: bool) -> Result<Array> {
    if !compiled {
        return logit_softcap_eager(x, cap);
    }
    // The cap is a constant of the compiled function: one function per cap.
    call(("logit_softcap", cap.to_bits()), &[x], move |a| {
        logit_softcap_eager(&a[0], cap)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(a: &Array) -> Vec<u32> {
        let f = a.as_dtype(mlx_rs::Dtype::Float32).unwrap();
        f.eval().unwrap();
        f.as_slice::<f32>().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn compiled_and_eager_agree_on_the_cpu_for_every_activation() {
        let x = mlx_rs::random::normal::<f32>(&[3, 257], None, Some(4.0), None)
            .unwrap()
            .as_dtype(mlx_rs::Dtype::Bfloat16)
            .unwrap();
        let y = mlx_rs::random::normal::<f32>(&[3, 257], None, None, None)
            .unwrap()
            .as_dtype(mlx_rs::Dtype::Bfloat16)
            .unwrap();
        let compiled = [
            gelu_approx(&x, true).unwrap(),
            geglu(&x, &y, true).unwrap(),
            logit_softcap(&x, 30.0, true).unwrap(),
            // A second shape through the same shapeless functions.
            gelu_approx(&x.reshape(&[257, 3]).unwrap(), true).unwrap(),
        ];
        let eager = [
            gelu_approx_eager(&x).unwrap(),
            geglu_eager(&x, &y).unwrap(),
            logit_softcap_eager(&x, 30.0).unwrap(),
            gelu_approx_eager(&x.reshape(&[257, 3]).unwrap()).unwrap(),
        ];
        for (i, (c, e)) in compiled.iter().zip(&eager).enumerate() {
            assert_eq!(c.shape(), e.shape(), "activation {i}");
            assert_eq!(bits(c), bits(e), "activation {i}");
        }
        // The softcap is keyed by its cap: another cap is another function.
        let other = logit_softcap(&x, 10.0, true).unwrap();
        assert_eq!(bits(&other), bits(&logit_softcap_eager(&x, 10.0).unwrap()));
        assert_ne!(bits(&other), bits(&compiled[2]));
    }
}
