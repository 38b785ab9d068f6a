//! How far the `fast` numerics profile is from the `mlx` one (mlx-lm's arithmetic): a
//! registered model's generated code under `fast` against its monolith under `mlx`, on
//! the same weights, prompt and tokens. After a prefill, each decode step feeds both the
//! `mlx` side's greedy token (teacher forcing), so step `t` compares the two on the same
//! history; the first step whose argmax differs is where their greedy streams part.

use std::fmt;

use runtime::kv_policy;
use runtime::mlx_rs::{Array, Dtype};
use runtime::model::Loaded;
use runtime::options::{ExecOptions, Numerics};
use runtime::quantization::QuantSpec;
use runtime::registry::Implementation;
use runtime::synth::SynthOptions;

use crate::error::{Context, Result};
use crate::gate::{preset_of, tokens};

/// One comparison of the two sides' logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepDistance {
    /// `||fast - mlx|| / ||mlx||` over the vocabulary, in f64.
    pub rel_err: f64,
    /// The largest `|fast - mlx|`.
    pub max_abs: f32,
    /// Whether both sides' argmax is the same token.
    pub argmax_equal: bool,
}

/// A model's distance report.
#[derive(Debug, Clone, Default)]
pub struct Distance {
    /// The implementation id.
    pub id: String,
    /// Prompt tokens.
    pub prompt: usize,
    /// The last prompt position's comparison.
    pub prefill: Option<StepDistance>,
    /// One per decode step.
    pub steps: Vec<StepDistance>,
    /// Whether the generated side ran its fast path at every step.
    pub fast_path_every_step: bool,
}

impl Distance {
    /// The first decode step whose argmax differs.
    pub fn first_argmax_difference(&self) -> Option<usize> {
        self.steps.iter().position(|s| !s.argmax_equal)
    }

    /// Decode steps whose argmax agrees.
    pub fn argmax_agreements(&self) -> usize {
        self.steps.iter().filter(|s| s.argmax_equal).count()
    }

    /// Median, 99th percentile and maximum relative error over the decode steps.
    pub fn rel_err_summary(&self) -> (f64, f64, f64) {
        let mut v: Vec<f64> = self.steps.iter().map(|s| s.rel_err).collect();
        if v.is_empty() {
            return (f64::NAN, f64::NAN, f64::NAN);
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        (at(0.5), at(0.99), v[v.len() - 1])
    }
}

impl fmt::Display for Distance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p50, p99, max) = self.rel_err_summary();
        write!(
            f,
            "{}: prompt {}, {} decode steps: rel err median {p50:.3e}, p99 {p99:.3e}, max {max:.3e}; \
             argmax equal {}/{}; first argmax difference: {}; prefill rel err {}; fast path every step: {}",
            self.id,
            self.prompt,
            self.steps.len(),
            self.argmax_agreements(),
            self.steps.len(),
            self.first_argmax_difference()
                .map_or("none".to_owned(), |s| format!("step {s}")),
            self.prefill
                .map_or("-".to_owned(), |p| format!("{:.3e}", p.rel_err)),
            self.fast_path_every_step,
        )
    }
}

/// The comparison of two logit rows.
pub fn compare(fast: &[f32], mlx: &[f32]) -> StepDistance {
    let (mut diff, mut norm, mut max_abs) = (0f64, 0f64, 0f32);
    for (&a, &b) in fast.iter().zip(mlx) {
        let d = (a - b) as f64;
        diff += d * d;
        norm += (b as f64) * (b as f64);
        max_abs = max_abs.max((a - b).abs());
    }
    StepDistance {
        rel_err: (diff / norm).sqrt(),
        max_abs,
        argmax_equal: argmax(fast) == argmax(mlx),
    }
}

/// The index of the largest value (the first on ties, as MLX's argmax).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

/// The last position's logits as f32 on the host.
fn last_row(logits: &Array) -> runtime::error::Result<Vec<f32>> {
    use runtime::mlx_rs::ops::indexing::TryIndexOp;
    let l = logits.try_index((.., -1, ..))?.as_dtype(Dtype::Float32)?;
    l.eval()?;
    Ok(l.as_slice::<f32>().to_vec())
}

/// What the measured side runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The generated code under the `fast` profile.
    Fast,
    /// A control: the generated code under the `mlx` profile with its single-token
    /// attention computed in f32 by MLX's own ops ([`ExecOptions::attention_f32`]): the
    /// reference's formula, more precisely, as `fast` computes it. How far that carries
    /// through a model with random weights is the scale the `fast` figures are read on.
    Control,
}

/// Measures `imp` on random 4-bit weights (the published shapes with `full`, else the
/// twin): `prompt` tokens, then `steps` decode steps; `exec` are the other options.
pub fn run(
    imp: &Implementation,
    full: bool,
    exec: ExecOptions,
    prompt: usize,
    steps: usize,
    side: Side,
) -> Result<Distance> {
    let (preset, layout) = preset_of(imp)?;
    let config = if full { preset } else { preset.twin() };
    let seed = 1;
    let context = |what: &str| format!("{} distance: {what}", imp.id);
    let quant = Some(QuantSpec {
        bits: 4,
        group_size: 64,
    });
    let (tensors, qmap) = config
        .random_tensors(SynthOptions { seed, quant }, Dtype::Bfloat16)
        .at(|| context("random weights"))?;
    let config = config.with_quantization(qmap);
    let mlx_options = ExecOptions {
        numerics: Some(Numerics::Mlx),
        ..exec
    };
    let model = Loaded::from_tensors(config, layout.clone(), mlx_options, tensors)
        .at(|| context("loading"))?;
    let fast_model = model.with_options(match side {
        Side::Fast => ExecOptions {
            numerics: Some(Numerics::Fast),
            ..exec
        },
        Side::Control => ExecOptions {
            attention_f32: true,
            ..mlx_options
        },
    });
    let reference = model.monolith();
    let ours = imp
        .construct_on(&fast_model)
        .at(|| context("constructing"))?;
    let vocab = model.as_ref().config().vocab_size();
    let ids = tokens(seed * 7919 + prompt as u64, prompt, vocab);
    let ids: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
    let mut a = model.as_ref().float_caches(1);
    let mut b = fast_model.as_ref().float_caches(1);
    let mut report = Distance {
        id: imp.id.to_owned(),
        prompt,
        fast_path_every_step: true,
        ..Distance::default()
    };
    let mut input = Array::from_slice(&ids, &[1, prompt as i32]);
    for t in 0..=steps {
        for c in [&mut a, &mut b] {
            kv_policy::apply(c, &layout).at(|| context("kv policy"))?;
        }
        let before = ours.fast_path_calls();
        let x = ours
            .forward(&input, &mut b)
            .and_then(|l| last_row(&l))
            .at(|| context(&format!("step {t}: fast")))?;
        if t > 0 && ours.fast_path_calls() == before {
            report.fast_path_every_step = false;
        }
        let y = reference
            .forward(&input, &mut a)
            .and_then(|l| last_row(&l))
            .at(|| context(&format!("step {t}: mlx")))?;
        let d = compare(&x, &y);
        if t == 0 {
            report.prefill = Some(d);
        } else {
            report.steps.push(d);
        }
        input = Array::from_slice(&[argmax(&y) as i32], &[1, 1]);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_measures_relative_error_and_argmax() {
        let mlx = [1.0f32, 3.0, 2.0, 0.0];
        let same = compare(&mlx, &mlx);
        assert_eq!(same.rel_err, 0.0);
        assert!(same.argmax_equal);
        let moved = compare(&[1.0, 3.0, 3.5, 0.0], &mlx);
        // ||(0, 0, 1.5, 0)|| / ||(1, 3, 2, 0)|| = 1.5 / sqrt(14)
        assert!((moved.rel_err - 1.5 / 14f64.sqrt()).abs() < 1e-12);
        assert_eq!(moved.max_abs, 1.5);
        assert!(!moved.argmax_equal);
        assert_eq!(argmax(&[2.0, 5.0, 5.0]), 1);
    }
}
