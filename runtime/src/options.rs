//! How a loaded model executes: which stages compile, whether the fused kernels run,
//! where multi-token passes are evaluated, and the diagnostic checks. A value built once
//! at the edge (a binary's flags, or [`ExecOptions::from_env`] there) and carried by the
//! loaded model; the library reads no environment and keeps no global switch.

use crate::error::{Error, Result};
use crate::model::barrier::Barrier;
use crate::model::segments::CompiledStages;

/// Whose arithmetic a model runs: the numerics profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numerics {
    /// MLX's kernels (and fused kernels of ours that reproduce their bytes): bit-equal
    /// to mlx-lm. The default on the CPU and on Metal.
    Mlx,
    /// Kernels of our own where they are faster than MLX's ([`crate::kernels::fast`]),
    /// run alike by the monolith and the generated code (so the two stay equal byte for
    /// byte) and measured against mlx-lm rather than equal to it. The default on CUDA;
    /// on other devices the same as [`Numerics::Mlx`], since its kernels are CUDA's.
    Fast,
}

impl Numerics {
    /// This device's default: [`Numerics::Fast`] where MLX's default device is a CUDA
    /// GPU, [`Numerics::Mlx`] elsewhere.
    pub fn device_default() -> Numerics {
        if crate::backend::cuda_default() {
            Numerics::Fast
        } else {
            Numerics::Mlx
        }
    }

    /// Every profile.
    pub const ALL: [Numerics; 2] = [Numerics::Mlx, Numerics::Fast];

    /// The name `MLX_AOT_NUMERICS` and the bench's `*-mlx` / `*-fast` columns take.
    pub fn name(self) -> &'static str {
        match self {
            Numerics::Mlx => "mlx",
            Numerics::Fast => "fast",
        }
    }

    /// The profile of that [`Self::name`].
    pub fn from_name(name: &str) -> Option<Numerics> {
        Self::ALL.into_iter().find(|n| n.name() == name)
    }
}

/// The execution options of one loaded model. None of them changes the plan, and so none
/// changes the fingerprint: they choose how the same computation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecOptions {
    /// Which stages of generated single-token steps run compiled; `None`: this device's
    /// default ([`crate::model::segments::device_default_stages`]).
    pub compiled_stages: Option<CompiledStages>,
    /// Whether generated single-token steps on CUDA run the fused kernels of
    /// [`crate::kernels`] (they reproduce MLX's kernels' bytes; never run on the CPU or
    /// Metal, whatever this says).
    pub fused_kernels: bool,
    /// Where multi-token passes are evaluated before they go on; `None`: the model's
    /// default ([`crate::model::barrier::for_model`]).
    pub barrier: Option<Barrier>,
    /// Whether the activations the reference compiles (Gemma 4's `gelu_approx`, `geglu`,
    /// `logit_softcap`) run compiled, as mlx-lm runs them, or op by op.
    pub compiled_activations: bool,
    /// Whether the SwiGLU of the Llama and MLA families runs as mlx-lm's compiled
    /// `swiglu` or op by op; for the MLA family also its compiled expert selection
    /// (`group_expert_select`), which mlx-lm compiles under the same switch
    /// (`mx.disable_compile()` turns both off).
    pub compiled_swiglu: bool,
    /// The numerics profile; `None`: this device's default ([`Numerics::device_default`]).
    pub numerics: Option<Numerics>,
    /// Diagnostics: compute every fused kernel's outputs with the MLX ops it replaces
    /// too and report the ones that differ.
    pub fused_check: bool,
    /// Diagnostics: run every compiled stage eagerly too and report outputs that differ.
    pub stage_check: bool,
    /// Diagnostics: single-token attention over float K/V (without a mask) computed in
    /// f32 by MLX's own ops, then rounded back: the same formula as the `mlx` profile's,
    /// more precisely, as a yardstick for the `fast` profile's distance
    /// (`parity --distance --control`). Not selectable from the environment.
    pub attention_f32: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            compiled_stages: None,
            fused_kernels: true,
            barrier: None,
            compiled_activations: true,
            compiled_swiglu: true,
            numerics: None,
            fused_check: false,
            stage_check: false,
            attention_f32: false,
        }
    }
}

/// The environment variables [`ExecOptions::from_env`] reads, with what each takes.
pub const ENV_VARS: [(&str, &str); 8] = [
    ("MLX_AOT_COMPILED_DECODE", "0 | pre | all | 1"),
    ("MLX_AOT_FUSED_KERNELS", "0 | 1"),
    ("MLX_AOT_LAYER_BARRIER", "0 | 1 | 2"),
    ("MLX_AOT_COMPILED_ACTIVATIONS", "0 | 1"),
    ("MLX_AOT_COMPILED_SWIGLU", "0 | 1"),
    ("MLX_AOT_NUMERICS", "fast | mlx"),
    ("MLX_AOT_FUSED_CHECK", "0 | 1"),
    ("MLX_AOT_STAGE_CHECK", "0 | 1"),
];

impl ExecOptions {
    /// The numerics profile these options run on this device.
    pub fn numerics(&self) -> Numerics {
        self.numerics.unwrap_or_else(Numerics::device_default)
    }

    /// The options the documented `MLX_AOT_*` variables ask for, over the defaults; for
    /// binaries to call once at start-up. A value outside what a variable takes is an
    /// error naming it.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Self::from_env`] over any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut o = ExecOptions::default();
        let read = |name: &'static str| -> Result<Option<String>> {
            Ok(get(name).filter(|v| !v.is_empty()))
        };
        let bad = |name: &str, value: &str| {
            let takes = ENV_VARS
                .iter()
                .find(|(n, _)| *n == name)
                .map_or("", |(_, t)| t);
            Error::Request(format!(
                "environment variable {name}={value:?}: expected {takes}"
            ))
        };
        let switch = |name: &'static str, default: bool| -> Result<bool> {
            match read(name)?.as_deref() {
                None => Ok(default),
                Some("0") => Ok(false),
                Some("1") => Ok(true),
                Some(v) => Err(bad(name, v)),
            }
        };
        if let Some(v) = read("MLX_AOT_COMPILED_DECODE")? {
            o.compiled_stages = match v.as_str() {
                "0" => Some(CompiledStages::None),
                "pre" => Some(CompiledStages::BeforeAttention),
                "all" => Some(CompiledStages::All),
                "1" => None,
                _ => return Err(bad("MLX_AOT_COMPILED_DECODE", &v)),
            };
        }
        if let Some(v) = read("MLX_AOT_LAYER_BARRIER")? {
            o.barrier = Some(match v.as_str() {
                "0" => Barrier::Off,
                "1" => Barrier::Layers,
                "2" => Barrier::LayersAndAttention,
                _ => return Err(bad("MLX_AOT_LAYER_BARRIER", &v)),
            });
        }
        if let Some(v) = read("MLX_AOT_NUMERICS")? {
            o.numerics = Some(Numerics::from_name(&v).ok_or_else(|| bad("MLX_AOT_NUMERICS", &v))?);
        }
        o.fused_kernels = switch("MLX_AOT_FUSED_KERNELS", o.fused_kernels)?;
        o.compiled_activations = switch("MLX_AOT_COMPILED_ACTIVATIONS", o.compiled_activations)?;
        o.compiled_swiglu = switch("MLX_AOT_COMPILED_SWIGLU", o.compiled_swiglu)?;
        o.fused_check = switch("MLX_AOT_FUSED_CHECK", o.fused_check)?;
        o.stage_check = switch("MLX_AOT_STAGE_CHECK", o.stage_check)?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<ExecOptions> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ExecOptions::from_lookup(|n| map.get(n).cloned())
    }

    #[test]
    fn nothing_set_is_the_default() {
        assert_eq!(with(&[]).unwrap(), ExecOptions::default());
    }

    #[test]
    fn each_variable_sets_its_option() {
        let o = with(&[
            ("MLX_AOT_COMPILED_DECODE", "pre"),
            ("MLX_AOT_FUSED_KERNELS", "0"),
            ("MLX_AOT_LAYER_BARRIER", "2"),
            ("MLX_AOT_COMPILED_ACTIVATIONS", "0"),
            ("MLX_AOT_COMPILED_SWIGLU", "0"),
            ("MLX_AOT_NUMERICS", "mlx"),
            ("MLX_AOT_FUSED_CHECK", "1"),
            ("MLX_AOT_STAGE_CHECK", "1"),
        ])
        .unwrap();
        assert_eq!(
            o,
            ExecOptions {
                compiled_stages: Some(CompiledStages::BeforeAttention),
                fused_kernels: false,
                barrier: Some(Barrier::LayersAndAttention),
                compiled_activations: false,
                compiled_swiglu: false,
                numerics: Some(Numerics::Mlx),
                fused_check: true,
                stage_check: true,
                attention_f32: false,
            }
        );
    }

    #[test]
    fn a_bad_value_names_the_variable_and_what_it_takes() {
        let e = with(&[("MLX_AOT_LAYER_BARRIER", "3")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MLX_AOT_LAYER_BARRIER") && e.contains("0 | 1 | 2"),
            "{e}"
        );
        let e = with(&[("MLX_AOT_FUSED_KERNELS", "yes")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MLX_AOT_FUSED_KERNELS") && e.contains("0 | 1"),
            "{e}"
        );
        let e = with(&[("MLX_AOT_NUMERICS", "exact")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MLX_AOT_NUMERICS") && e.contains("fast | mlx"),
            "{e}"
        );
    }

    #[test]
    fn fast_numerics_run_only_on_cuda_and_are_its_default() {
        // Fast kernels are CUDA's: elsewhere both profiles run MLX's arithmetic.
        let cuda = crate::backend::cuda_default();
        let default = with(&[]).unwrap().numerics();
        assert_eq!(default, if cuda { Numerics::Fast } else { Numerics::Mlx });
        let fast = with(&[("MLX_AOT_NUMERICS", "fast")]).unwrap();
        assert_eq!(fast.numerics(), Numerics::Fast);
        assert_eq!(crate::kernels::fast::enabled(&fast), cuda);
        let mlx = with(&[("MLX_AOT_NUMERICS", "mlx")]).unwrap();
        assert!(!crate::kernels::fast::enabled(&mlx));
    }
}
