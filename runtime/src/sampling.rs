//! Choosing the next token: greedy, or temperature with top-k and nucleus (top-p)
//! filtering, seeded so a run repeats exactly.

use mlx_rs::ops::indexing::TryIndexOp;
use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};

/// How tokens are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// The most likely token.
    Greedy,
    /// Sampling at `temperature` from the `top_k` most likely tokens (all when 0), then
    /// from the smallest set of those whose probability reaches `top_p`.
    TopP {
        /// Softmax temperature (> 0).
        temperature: f32,
        /// Nucleus mass in (0, 1].
        top_p: f32,
        /// Tokens kept by likelihood before the nucleus; 0 keeps all.
        top_k: usize,
        /// Random seed.
        seed: u64,
    },
}

impl Sampler {
    /// Checks the parameters: temperature > 0 and top_p in (0, 1]; no top-k.
    pub fn top_p(temperature: f32, top_p: f32, seed: u64) -> Result<Self> {
        Self::new(temperature, top_p, 0, seed)
    }

    /// Checks the parameters: temperature >= 0 (0 is greedy, whatever the rest), top_p
    /// in (0, 1], top_k any (0 keeps every token).
    pub fn new(temperature: f32, top_p: f32, top_k: usize, seed: u64) -> Result<Self> {
        if temperature == 0.0 {
            return Ok(Sampler::Greedy);
        }
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(Error::Request(format!(
                "temperature must be >= 0, got {temperature}"
            )));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::Request(format!(
                "top-p must be in (0, 1], got {top_p}"
            )));
        }
        Ok(Sampler::TopP {
            temperature,
            top_p,
            top_k,
            seed,
        })
    }

    /// The next token for each batch row from `logits` `[B, vocab]`; `step` selects the
    /// random key so each step draws independently. Returns `[B]` uint32 (lazy).
    pub fn sample(&self, logits: &Array, step: u64) -> Result<Array> {
        match *self {
            // As mlx-lm's generate_step: the argmax of the log-probabilities, which in the
            // logits' dtype can tie where the logits did not (the first index wins).
            Sampler::Greedy => {
                let lse = mlx_rs::ops::logsumexp_axis(logits, -1, true)?;
                let logprobs = mlx_rs::ops::subtract(logits, &lse)?;
                Ok(mlx_rs::ops::indexing::argmax_axis(&logprobs, -1, None)?
                    .as_dtype(Dtype::Uint32)?)
            }
            Sampler::TopP {
                temperature,
                top_p,
                top_k,
                seed,
            } => {
                let logits = logits.as_dtype(Dtype::Float32)?;
                let scaled = mlx_rs::ops::multiply(&logits, Array::from_f32(1.0 / temperature))?;
                let vocab = scaled.shape().last().copied().unwrap_or(0) as usize;
                let scaled = if top_k > 0 && top_k < vocab {
                    top_k_only(&scaled, top_k)?
                } else {
                    scaled
                };
                let filtered = if top_p < 1.0 {
                    nucleus(&scaled, top_p)?
                } else {
                    scaled
                };
                let key = mlx_rs::random::key(
                    seed.wrapping_add(step.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                )?;
                Ok(mlx_rs::random::categorical(&filtered, -1, None, &key)?
                    .as_dtype(Dtype::Uint32)?)
            }
        }
    }
}

/// Logits below the `k`-th largest of their row set to -inf (ties with it stay, so a
/// row may keep more than `k`).
fn top_k_only(logits: &Array, k: usize) -> Result<Array> {
    let vocab = logits.shape().last().copied().unwrap_or(0);
    let sorted = mlx_rs::ops::sort_axis(logits, -1)?;
    // Ascending: the k-th largest is at vocab - k.
    let kth = sorted.try_index((.., (vocab - k as i32)..(vocab - k as i32 + 1)))?;
    let keep = logits.ge(&kth)?;
    Ok(mlx_rs::ops::select(
        &keep,
        logits,
        Array::from_f32(f32::NEG_INFINITY),
    )?)
}

/// Logits outside the top-p nucleus set to -inf (the most likely token always stays).
fn nucleus(logits: &Array, top_p: f32) -> Result<Array> {
    let probs = mlx_rs::ops::softmax_axis(logits, -1, true)?;
    // Descending order: sort the negated probabilities.
    let order = mlx_rs::ops::argsort_axis(mlx_rs::ops::negative(&probs)?, -1)?;
    let sorted = probs.take_along_axis(&order, -1)?;
    let cumulative = sorted.cumsum(-1, None, None)?;
    // Keep a token if the mass before it is below top_p.
    let before = mlx_rs::ops::subtract(&cumulative, &sorted)?;
    let keep_sorted = before.lt(Array::from_f32(top_p))?;
    let inv = mlx_rs::ops::argsort_axis(&order, -1)?;
    let keep = keep_sorted.take_along_axis(&inv, -1)?;
    Ok(mlx_rs::ops::select(
        &keep,
        logits,
        Array::from_f32(f32::NEG_INFINITY),
    )?)
}
