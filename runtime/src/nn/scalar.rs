//! Weak scalars: a Python float constant takes the array's dtype before the op
//! (gemma4.md §10 rule 2). MLX's Python binding converts the double to a C float, then to
//! the array dtype (round to nearest even); this does the same on the host.

use half::{bf16, f16};
use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};

/// A 0-d array holding `value` in `dtype`, converted as MLX's Python binding does.
pub fn scalar(value: f64, dtype: Dtype) -> Result<Array> {
    let v = value as f32;
    Ok(match dtype {
        Dtype::Float32 => Array::from_f32(v),
        Dtype::Bfloat16 => Array::from_slice(&[bf16::from_f32(v)], &[]),
        Dtype::Float16 => Array::from_slice(&[f16::from_f32(v)], &[]),
        other => {
            return Err(Error::Unsupported(format!(
                "a float constant on a {other:?} array"
            )));
        }
    })
}

/// `x * value` with a weak scalar.
pub fn mul(x: &Array, value: f64) -> Result<Array> {
    Ok(mlx_rs::ops::multiply(x, scalar(value, x.dtype())?)?)
}

/// `value * x` with a weak scalar (the scalar is the left operand, as in `0.5 * x`).
pub fn rmul(value: f64, x: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::multiply(scalar(value, x.dtype())?, x)?)
}

/// `x / value` with a weak scalar.
pub fn div(x: &Array, value: f64) -> Result<Array> {
    Ok(mlx_rs::ops::divide(x, scalar(value, x.dtype())?)?)
}

/// `value + x` with a weak scalar.
pub fn radd(value: f64, x: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::add(scalar(value, x.dtype())?, x)?)
}

/// `x ** value` with a weak scalar.
pub fn pow(x: &Array, value: f64) -> Result<Array> {
    Ok(mlx_rs::ops::power(x, scalar(value, x.dtype())?)?)
}
