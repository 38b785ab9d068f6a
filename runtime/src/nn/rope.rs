//! Rotary position embeddings: the default type, Gemma 4's proportional type
//! (gemma4.md §3.6), Llama 3's scaled type, the linear type, LongRoPE and YaRN. They
//! rotate halves (`traditional = false`), or adjacent pairs through
//! [`Rope::apply_interleaved_at`] (the MLA family's `traditional = True`).

use mlx_rs::{Array, Dtype};

use crate::config::{positions, positive_f64};
use crate::error::Result;
use crate::json::Obj;

/// How a layer rotates its queries and keys, as a config describes it.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeParams {
    /// `default`: `fast::rope` with `base = theta` over all D dims.
    Default {
        /// rope_theta.
        theta: f64,
    },
    /// `proportional`: a period table over `int(D * partial_rotary_factor)` dims, the rest
    /// infinite (gemma4.md §3.6).
    Proportional {
        /// rope_theta.
        theta: f64,
        /// partial_rotary_factor.
        partial_rotary_factor: f64,
        /// factor, when the config gives one.
        factor: Option<f64>,
    },
}

/// A layer type's RoPE, ready to apply.
#[derive(Debug, Clone)]
pub enum Rope {
    /// `fast::rope(x, dims, base = theta)`.
    Default {
        /// Rotated dims (the head dim).
        dims: i32,
        /// rope_theta as the C float MLX receives.
        base: f32,
    },
    /// `fast::rope(x, dims, base = none, freqs)` with a period table.
    Proportional {
        /// The head dim.
        dims: i32,
        /// `dims / 2` periods: finite for the rotated pairs, `+inf` for the rest.
        freqs: Array,
    },
    /// `fast::rope(x, dims, base = none, freqs)` with Llama 3's scaled frequencies
    /// (mlx-lm `Llama3RoPE`).
    Llama3 {
        /// The head dim.
        dims: i32,
        /// `dims / 2` frequencies.
        freqs: Array,
    },
    /// `fast::rope(x, dims, base, scale)`: positions scaled by `1 / factor` (mlx-lm's
    /// `linear` type, an `nn.RoPE` with `scale`).
    Linear {
        /// Rotated dims (the head dim).
        dims: i32,
        /// rope_theta as the C float MLX receives.
        base: f32,
        /// `1 / factor` as the C float MLX receives.
        scale: f32,
    },
    /// mlx-lm's `SuScaledRoPE` (`longrope`): `x * mscale`, then `fast::rope` with the
    /// long factors times the default frequencies.
    LongRope {
        /// The head dim.
        dims: i32,
        /// `dims / 2` frequencies.
        freqs: Array,
        /// The input scale (1 when the context is not extended past the original).
        mscale: f64,
    },
    /// mlx-lm's `YarnRoPE`: the rotated dims times its input scale (the
    /// `mscale / mscale_all_dim` ratio; skipped at 1, as in DeepSeek-V3.2), then
    /// `fast::rope` with the blended frequencies.
    Yarn {
        /// Rotated dims (the first `dims` of the last axis).
        dims: i32,
        /// `dims / 2` frequencies.
        freqs: Array,
        /// [`YarnScaling::input_scale`].
        input_scale: f64,
    },
}

/// YaRN (`rope_scaling` with `type: yarn`), as mlx-lm's `YarnRoPE` reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct YarnScaling {
    /// factor.
    pub factor: f64,
    /// original_max_position_embeddings (default 4096).
    pub original_max_position_embeddings: f64,
    /// beta_fast (default 32).
    pub beta_fast: f64,
    /// beta_slow (default 1).
    pub beta_slow: f64,
    /// mscale (default 1).
    pub mscale: f64,
    /// mscale_all_dim (default 0).
    pub mscale_all_dim: f64,
}

impl YarnScaling {
    /// Reads the scaling keys of a `rope_scaling` object with mlx-lm's `YarnRoPE`
    /// defaults (`factor` required; original context 4096, betas 32 and 1, mscale 1,
    /// mscale_all_dim 0).
    pub fn read(s: &Obj<'_>) -> Result<Self> {
        let finite = |key: &str, default: f64| -> Result<f64> {
            let v = s.opt_f64(key)?.unwrap_or(default);
            if !v.is_finite() {
                return Err(s.err(key, format!("must be finite, found {v}")));
            }
            Ok(v)
        };
        Ok(YarnScaling {
            factor: positive_f64(s, "factor", None)?,
            // Written back as an integer (`to_json`), so it must be one.
            original_max_position_embeddings: positions(
                s,
                "original_max_position_embeddings",
                Some(4096.0),
            )?,
            beta_fast: positive_f64(s, "beta_fast", Some(32.0))?,
            beta_slow: positive_f64(s, "beta_slow", Some(1.0))?,
            mscale: finite("mscale", 1.0)?,
            mscale_all_dim: finite("mscale_all_dim", 0.0)?,
        })
    }

    /// The `rope_scaling` object as mlx-lm reads it back, its type under `type_key`
    /// (`type` or `rope_type`, as the family's configs spell it).
    pub fn to_json(&self, type_key: &str) -> serde_json::Value {
        let mut v = serde_json::json!({
            "factor": self.factor,
            "original_max_position_embeddings": self.original_max_position_embeddings as u64,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
            "mscale": self.mscale,
            "mscale_all_dim": self.mscale_all_dim,
        });
        v[type_key] = "yarn".into();
        v
    }

    /// `yarn_get_mscale(factor, m)`: `0.1 m ln(factor) + 1` past factor 1, else 1.
    pub fn get_mscale(factor: f64, m: f64) -> f64 {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * m * factor.ln() + 1.0
        }
    }

    /// The input scale `YarnRoPE` multiplies the rotated dims by.
    pub fn input_scale(&self) -> f64 {
        Self::get_mscale(self.factor, self.mscale)
            / Self::get_mscale(self.factor, self.mscale_all_dim)
    }
}

/// LongRoPE (`rope_scaling` with `rope_type: longrope`), as mlx-lm's `SuScaledRoPE` reads
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct LongRopeScaling {
    /// long_factor: one per rotated pair, or one for all.
    pub long_factor: Vec<f64>,
    /// original_max_position_embeddings.
    pub original_max_position_embeddings: f64,
    /// The config's max_position_embeddings (required: the scale depends on it).
    pub max_position_embeddings: f64,
}

impl LongRopeScaling {
    /// The input scale: `sqrt(1 + ln(factor) / ln(original))` with `factor = max /
    /// original` when that exceeds 1, else 1 (in f64, as Python computes it).
    pub fn mscale(&self) -> f64 {
        let factor = self.max_position_embeddings / self.original_max_position_embeddings;
        if factor <= 1.0 {
            1.0
        } else {
            (1.0 + factor.ln() / self.original_max_position_embeddings.ln()).sqrt()
        }
    }
}

/// Llama 3 rope scaling (`rope_scaling` with `rope_type: llama3`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    /// factor.
    pub factor: f64,
    /// low_freq_factor (default 1).
    pub low_freq_factor: f64,
    /// high_freq_factor (default 4).
    pub high_freq_factor: f64,
    /// original_max_position_embeddings (default 8192).
    pub original_max_position_embeddings: f64,
}

impl Rope {
    /// Builds the RoPE of a layer type with head dim `dims`. The proportional period
    /// table is computed with device ops in f32, as the reference does (never on the host
    /// in f64, where `pow` lands some entries 1 ulp off).
    pub fn new(params: &RopeParams, dims: usize) -> Result<Self> {
        let d = dims as i32;
        Ok(match *params {
            RopeParams::Default { theta } => Rope::Default {
                dims: d,
                base: theta as f32,
            },
            RopeParams::Proportional {
                theta,
                partial_rotary_factor,
                factor,
            } => {
                let rotated = (dims as f64 * partial_rotary_factor) as i32;
                let exponents = Array::arange::<f64, f32>(0.0, rotated as f64, 2.0)?;
                let exponents = super::scalar::div(&exponents, d as f64)?;
                let periods =
                    mlx_rs::ops::power(super::scalar::scalar(theta, Dtype::Float32)?, &exponents)?;
                let periods = super::scalar::rmul(factor.unwrap_or(1.0), &periods)?;
                let infinite =
                    Array::full::<f32>(&[(d - rotated) / 2], Array::from_f32(f32::INFINITY))?;
                let freqs = mlx_rs::ops::concatenate(&[periods, infinite], 0)?;
                freqs.eval()?;
                Rope::Proportional { dims: d, freqs }
            }
        })
    }

    /// Llama 3's RoPE over `dims` dims: the frequency table built with f32 device ops in
    /// mlx-lm's order (`base ** (arange(0, dims, 2) / dims)`, the wavelength thresholds,
    /// the smooth interpolation of the medium band), Python scalars as weak f32 scalars.
    pub fn llama3(dims: usize, theta: f64, s: Llama3Scaling) -> Result<Self> {
        use super::scalar::scalar;
        let f32s = |v: f64| scalar(v, Dtype::Float32);
        let d = dims as i32;
        let idx = Array::arange::<i32, i32>(0, d, 2)?;
        let exponents = mlx_rs::ops::divide(&idx, Array::from_int(d))?;
        let freqs = mlx_rs::ops::power(f32s(theta)?, &exponents)?;
        let wavelens = mlx_rs::ops::multiply(f32s(2.0 * std::f64::consts::PI)?, &freqs)?;
        let low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
        let high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
        let scaled = mlx_rs::ops::multiply(&freqs, f32s(s.factor)?)?;
        let freqs = mlx_rs::ops::select(&wavelens.gt(f32s(low_wavelen)?)?, &scaled, &freqs)?;
        let medium = mlx_rs::ops::logical_and(
            &wavelens.gt(f32s(high_wavelen)?)?,
            &wavelens.lt(f32s(low_wavelen)?)?,
        )?;
        let ratio = mlx_rs::ops::divide(f32s(s.original_max_position_embeddings)?, &wavelens)?;
        let smooth = mlx_rs::ops::divide(
            &mlx_rs::ops::subtract(&ratio, f32s(s.low_freq_factor)?)?,
            f32s(s.high_freq_factor - s.low_freq_factor)?,
        )?;
        let one_minus = mlx_rs::ops::subtract(f32s(1.0)?, &smooth)?;
        let denom = mlx_rs::ops::add(&mlx_rs::ops::divide(&one_minus, f32s(s.factor)?)?, &smooth)?;
        let smooth_freqs = mlx_rs::ops::divide(&freqs, &denom)?;
        let freqs = mlx_rs::ops::select(&medium, &smooth_freqs, &freqs)?;
        freqs.eval()?;
        Ok(Rope::Llama3 { dims: d, freqs })
    }

    /// LongRoPE over `dims` dims: `long_factor * base ** (arange(0, dims, 2) / dims)` in
    /// f32 device ops, as `SuScaledRoPE` builds it.
    pub fn long_rope(dims: usize, theta: f64, s: &LongRopeScaling) -> Result<Self> {
        let d = dims as i32;
        let exponents = Array::arange::<f64, f32>(0.0, d as f64, 2.0)?;
        let exponents = super::scalar::div(&exponents, d as f64)?;
        let freqs = mlx_rs::ops::power(super::scalar::scalar(theta, Dtype::Float32)?, &exponents)?;
        let factors: Vec<f32> = s.long_factor.iter().map(|&f| f as f32).collect();
        let factors = if factors.len() == 1 {
            Array::from_f32(factors[0])
        } else {
            Array::from_slice(&factors, &[factors.len() as i32])
        };
        let freqs = mlx_rs::ops::multiply(&factors, &freqs)?;
        freqs.eval()?;
        Ok(Rope::LongRope {
            dims: d,
            freqs,
            mscale: s.mscale(),
        })
    }

    /// YaRN over `dims` dims, the frequency table built with f32 device ops in
    /// mlx-lm's order (`base ** (arange(0, dims, 2) / dims)`, the correction range in
    /// f64 on the host as Python computes it, the linear ramp, the blend).
    pub fn yarn(dims: usize, theta: f64, s: YarnScaling) -> Result<Self> {
        use super::scalar::{div, radd, rmul, scalar};
        let d = dims as i32;
        let correction = |rotations: f64| {
            (dims as f64
                * (s.original_max_position_embeddings / (rotations * 2.0 * std::f64::consts::PI))
                    .ln())
                / (2.0 * theta.ln())
        };
        let low = correction(s.beta_fast).floor().max(0.0);
        let high = correction(s.beta_slow).ceil().min((dims - 1) as f64);
        let high = if low == high { high + 0.001 } else { high };
        let exponents = div(&Array::arange::<f64, f32>(0.0, d as f64, 2.0)?, d as f64)?;
        let freq_extra = mlx_rs::ops::power(scalar(theta, Dtype::Float32)?, &exponents)?;
        let freq_inter = rmul(s.factor, &freq_extra)?;
        let ramp = div(
            &super::scalar::radd(-low, &Array::arange::<f64, f32>(0.0, (d / 2) as f64, 1.0)?)?,
            high - low,
        )?;
        let ramp = mlx_rs::ops::clip(&ramp, (0.0f32, 1.0f32))?;
        let freq_mask = radd(1.0, &rmul(-1.0, &ramp)?)?;
        let one_minus_mask = radd(1.0, &rmul(-1.0, &freq_mask)?)?;
        let numerator = mlx_rs::ops::multiply(&freq_inter, &freq_extra)?;
        let denominator = mlx_rs::ops::add(
            &mlx_rs::ops::multiply(&freq_inter, &freq_mask)?,
            &mlx_rs::ops::multiply(&freq_extra, &one_minus_mask)?,
        )?;
        let freqs = mlx_rs::ops::divide(&numerator, &denominator)?;
        freqs.eval()?;
        Ok(Rope::Yarn {
            dims: d,
            freqs,
            input_scale: s.input_scale(),
        })
    }

    /// Rotates `x` (`[B, heads, L, D]`) for positions starting at `offset`: one start
    /// for every row, or one per row ([`RopeOffset::Rows`], a batch whose rows hold
    /// different numbers of tokens). A row's bytes are those of the uniform call at its
    /// own offset.
    pub fn apply_at(&self, x: &Array, offset: &RopeOffset) -> Result<Array> {
        self.rotate(x, offset, false)
    }

    /// [`Rope::apply_at`] rotating adjacent pairs (`traditional = True`).
    pub fn apply_interleaved_at(&self, x: &Array, offset: &RopeOffset) -> Result<Array> {
        self.rotate(x, offset, true)
    }

    fn rotate(&self, x: &Array, offset: &RopeOffset, traditional: bool) -> Result<Array> {
        // MLX's rope with an int offset or with an array of them, same arguments else.
        let rotate =
            |x: &Array, dims: i32, base: Option<f32>, scale: f32, freqs: Option<&Array>| {
                match offset {
                    RopeOffset::Uniform(o) => {
                        mlx_rs::fast::rope(x, dims, traditional, base, scale, *o, freqs)
                    }
                    RopeOffset::Rows(o) => {
                        mlx_rs::fast::rope_dynamic(x, dims, traditional, base, scale, o, freqs)
                    }
                }
            };
        Ok(match self {
            Rope::Default { dims, base } => rotate(x, *dims, Some(*base), 1.0, None)?,
            Rope::Proportional { dims, freqs } | Rope::Llama3 { dims, freqs } => {
                rotate(x, *dims, None, 1.0, Some(freqs))?
            }
            Rope::Linear { dims, base, scale } => rotate(x, *dims, Some(*base), *scale, None)?,
            // mlx-lm's YarnRoPE and SuScaledRoPE: `x.at[..., :dims].multiply(s)`, then the
            // frequencies.
            Rope::Yarn {
                dims,
                freqs,
                input_scale: s,
            }
            | Rope::LongRope {
                dims,
                freqs,
                mscale: s,
            } => {
                // x * 1.0 is x, byte for byte: skip the op then.
                if *s == 1.0 {
                    rotate(x, *dims, None, 1.0, Some(freqs))?
                } else if x.dim(-1) == *dims {
                    rotate(&super::scalar::mul(x, *s)?, *dims, None, 1.0, Some(freqs))?
                } else {
                    return Err(crate::error::Error::Unsupported(format!(
                        "an input scale over {dims} of {} dims",
                        x.dim(-1)
                    )));
                }
            }
        })
    }

    /// Rotates `x` (`[B, heads, L, D]`) for positions starting at `offset`.
    pub fn apply(&self, x: &Array, offset: i32) -> Result<Array> {
        self.apply_at(x, &RopeOffset::Uniform(offset))
    }
}

/// Where a step's positions start.
#[derive(Debug, Clone)]
pub enum RopeOffset {
    /// The same position for every row (the tokens the caches hold).
    Uniform(i32),
    /// One position per row, int32 `[B]`: rows that hold different numbers of tokens.
    Rows(Array),
}
