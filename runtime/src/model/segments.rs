//! The compiled stages of single-token steps, shared by every family: which stages
//! compile on this device, a stage compiled for one layer ([`Segment`]), a model's set of
//! them ([`DecodeSegments`]), and running one stage compiled or directly.
//!
//! A layer's stages are the parts with shapes fixed by the model, not by the caches: what
//! comes before RoPE and the cache update (norms, projections) and what comes after
//! attention (output projection, feed-forward). For single-token steps they are compiled
//! once (mlx `compile`) and replayed: their elementwise chains fuse and their graphs are
//! not rebuilt op by op every step. Cache updates and attention, whose shapes grow with
//! the cache, run eagerly between them, and so does RoPE: on the CPU it is a composition
//! of ops whose compiled (fused) form rounds differently from the reference, which the
//! parity gate catches.

use std::any::Any;
use std::rc::Rc;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use crate::error::{Error, Result};
use crate::options::ExecOptions;

/// Which stages of a generated model's single-token steps run compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompiledStages {
    /// Every stage runs eagerly.
    None,
    /// Embedding, the stages before attention, and the head; the stages after attention
    /// run eagerly.
    BeforeAttention,
    /// Every stage.
    All,
}

/// Which stages generated models compile by default on this device: on the CPU all of
/// them; on a GPU those before attention. On MLX 0.32.2 CUDA the compiled stages after
/// attention (output projection, feed-forward) round differently from the same ops run
/// one by one ([`ExecOptions::stage_check`] showed up to 0.03 on bf16 activations,
/// growing to whole logits apart over 40 layers), while the embedding, pre-attention and
/// head stages matched byte for byte.
pub fn device_default_stages() -> CompiledStages {
    if crate::backend::cpu_default() {
        CompiledStages::All
    } else {
        CompiledStages::BeforeAttention
    }
}

/// Which stages a model with `options` compiles: theirs, else this device's default.
pub fn compiled_stages(options: &ExecOptions) -> CompiledStages {
    options
        .compiled_stages
        .unwrap_or_else(device_default_stages)
}

/// A stage: `(model, layer, inputs) -> outputs`.
pub type StageFn<M> = fn(&M, usize, &[Array]) -> Result<Vec<Array>>;

/// A model whose steps have an embedding and a head stage besides the layers'.
pub trait Staged: crate::family::FamilyModel + Sized + 'static {
    /// The family's id.
    const FAMILY: crate::plan::FamilyId;
    /// `[tokens] -> [h, ...]`: the embedding and whatever every layer reads with it.
    const EMBED: StageFn<Self>;
    /// `[h] -> [logits]`.
    const HEAD: StageFn<Self>;
    /// The family's monolith: the fallback of a generated model off its fast path.
    fn monolith_forward(
        &self,
        tokens: &Array,
        caches: &mut [crate::cache::AnyCache],
    ) -> Result<Array>;
}

type Compiled = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// A stage compiled for one layer of one model.
pub struct Segment {
    compiled: Compiled,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Segment")
    }
}

impl Segment {
    /// Compiles `stage` of `layer` (traced at its first call, per input shape).
    pub fn new<M: 'static>(model: Rc<M>, layer: usize, stage: StageFn<M>) -> Self {
        let f = move |args: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
            stage(&model, layer, args).map_err(|e| Exception::custom(e.to_string()))
        };
        Segment {
            compiled: Box::new(mlx_rs::transforms::compile::compile(f, false)),
        }
    }

    /// Runs the compiled stage.
    pub fn call(&mut self, args: &[Array]) -> Result<Vec<Array>> {
        Ok((self.compiled)(args)?)
    }
}

/// The compiled segments of a model's single-token step. A layer's stages are compiled
/// at their first call, from the stage function the layer's code passes, so a generated
/// module needs no table of them.
pub struct DecodeSegments {
    /// The model the segments are compiled for (a `Rc<M>` of the [`Staged`] type).
    model: Rc<dyn Any>,
    embed: Segment,
    layers: Vec<LayerSegments>,
    head: Segment,
}

impl std::fmt::Debug for DecodeSegments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeSegments")
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}

/// The compiled stages of one layer, each made at its first call.
#[derive(Debug, Default)]
struct LayerSegments {
    pre: Option<Segment>,
    post: Option<Segment>,
}

impl DecodeSegments {
    /// The segments of `model`: embedding and head now, the layers' as they are called.
    pub fn new<M: Staged>(model: &Rc<M>) -> Self {
        DecodeSegments {
            model: model.clone(),
            embed: Segment::new(model.clone(), 0, M::EMBED),
            layers: Vec::new(),
            head: Segment::new(model.clone(), 0, M::HEAD),
        }
    }

    /// The compiled `stage` of layer `i`, compiling `f` at the first call.
    fn layer<M: Staged>(&mut self, i: usize, stage: Stage, f: StageFn<M>) -> Result<&mut Segment> {
        let model = self.model.clone().downcast::<M>().map_err(|_| {
            Error::Unsupported(format!(
                "the compiled segments were made for another model type than {}",
                std::any::type_name::<M>()
            ))
        })?;
        if self.layers.len() <= i {
            self.layers.resize_with(i + 1, LayerSegments::default);
        }
        let slot = match stage {
            Stage::Pre => &mut self.layers[i].pre,
            Stage::Post => &mut self.layers[i].post,
        };
        Ok(slot.get_or_insert_with(|| Segment::new(model, i, f)))
    }
}

/// Which stage of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before the cache update.
    Pre,
    /// After attention.
    Post,
}

/// Runs `stage` of layer `i` of model `m` on `args`: through its compiled segment when
/// `segments` is given and `stages` compiles it, else directly; exactly `N` outputs.
pub fn run_stage<M: Staged, const N: usize>(
    m: &M,
    segments: Option<&mut DecodeSegments>,
    stages: CompiledStages,
    i: usize,
    stage: Stage,
    f: StageFn<M>,
    args: &[&Array],
) -> Result<[Array; N]> {
    let out = run_stage_vec(m, segments, stages, i, stage, f, args)?;
    let n = out.len();
    out.try_into().map_err(|_| {
        Error::Unsupported(format!(
            "stage {stage:?} of layer {i} returned {n} arrays, expected {N}"
        ))
    })
}

/// [`run_stage`] with as many outputs as the stage returns.
pub fn run_stage_vec<M: Staged>(
    m: &M,
    segments: Option<&mut DecodeSegments>,
    stages: CompiledStages,
    i: usize,
    stage: Stage,
    f: StageFn<M>,
    args: &[&Array],
) -> Result<Vec<Array>> {
    let args: Vec<Array> = args.iter().map(|a| (*a).clone()).collect();
    let eager_post = stage == Stage::Post && stages != CompiledStages::All;
    let out = match segments {
        Some(s) if !eager_post => {
            let out = s.layer(i, stage, f)?.call(&args)?;
            if m.options().stage_check {
                check_stage(&format!("layer {i} {stage:?}"), &out, &f(m, i, &args)?)?;
            }
            out
        }
        _ => {
            if stage == Stage::Post
                && let Some(o) = args.get(1)
            {
                crate::model::barrier::attention_done(o, m.barrier())?;
            }
            f(m, i, &args)?
        }
    };
    if stage == Stage::Post
        && let Some(h) = out.first()
    {
        crate::model::barrier::layer_done(h, m.barrier())?;
    }
    Ok(out)
}

/// Whether model `m` compiles its single-token steps: when its options compile any stage
/// and its activations are 16-bit. With float32 activations (float32 checkpoints; MLX's
/// CPU `gather_mm` takes nothing else), the compiled post-attention stage of Gemma 4's MoE
/// layers rounds differently from the unfused reference, which the parity gate shows;
/// such models run their straight-line code without compiling.
pub fn compiles<M: Staged>(m: &M) -> bool {
    compiles_with(m.options(), m.dtype())
}

/// [`compiles`] for a model with `options` and activations of `dtype`.
pub fn compiles_with(options: &ExecOptions, dtype: mlx_rs::Dtype) -> bool {
    compiled_stages(options) != CompiledStages::None
        && matches!(dtype, mlx_rs::Dtype::Bfloat16 | mlx_rs::Dtype::Float16)
}

/// The embedding stage of a step over `tokens`: compiled when `segments` is given (then
/// `tokens` must be `[B, 1]`), else directly. At least one output (`h` first).
pub fn embed<M: Staged>(
    m: &M,
    segments: Option<&mut DecodeSegments>,
    tokens: &Array,
) -> Result<Vec<Array>> {
    let args = std::slice::from_ref(tokens);
    let out = match segments {
        Some(s) => {
            if tokens.ndim() != 2 || tokens.dim(1) != 1 {
                return Err(Error::Request(format!(
                    "the compiled step takes one token per row, got tokens of shape {:?}",
                    tokens.shape()
                )));
            }
            run_compiled(m, "embed", &mut s.embed, M::EMBED, args)?
        }
        None => (M::EMBED)(m, 0, args)?,
    };
    if out.is_empty() {
        return Err(Error::Unsupported(
            "the embedding stage returned nothing".into(),
        ));
    }
    Ok(out)
}

/// The head stage on the last residual stream `h`: logits, compiled when `segments` is
/// given.
pub fn head<M: Staged>(m: &M, segments: Option<&mut DecodeSegments>, h: &Array) -> Result<Array> {
    let args = std::slice::from_ref(h);
    let out = match segments {
        Some(s) => run_compiled(m, "head", &mut s.head, M::HEAD, args)?,
        None => (M::HEAD)(m, 0, args)?,
    };
    out.into_iter()
        .next()
        .ok_or_else(|| Error::Unsupported("the head stage returned nothing".into()))
}

/// Runs the embedding (`segment` set) or head stage compiled, checking it against the
/// direct run under [`stage_check`].
fn run_compiled<M: Staged>(
    m: &M,
    name: &str,
    segment: &mut Segment,
    f: StageFn<M>,
    args: &[Array],
) -> Result<Vec<Array>> {
    let out = segment.call(args)?;
    if m.options().stage_check {
        check_stage(name, &out, &f(m, 0, args)?)?;
    }
    Ok(out)
}

/// Compares a compiled stage's outputs with the eager ones, printing each output that
/// differs (how many elements, the largest |diff|) to stderr.
pub(crate) fn check_stage(name: &str, compiled: &[Array], eager: &[Array]) -> Result<()> {
    let as_f32 = |a: &Array| -> Result<Vec<f32>> {
        let f = a.as_dtype(mlx_rs::Dtype::Float32)?.flatten(None, None)?;
        f.eval()?;
        Ok(f.as_slice::<f32>().to_vec())
    };
    for (j, (c, e)) in compiled.iter().zip(eager).enumerate() {
        if c.shape() != e.shape() || c.dtype() != e.dtype() {
            eprintln!(
                "stage check: {name} output {j}: compiled {:?} {:?} vs eager {:?} {:?}",
                c.shape(),
                c.dtype(),
                e.shape(),
                e.dtype()
            );
            continue;
        }
        let (c, e) = (as_f32(c)?, as_f32(e)?);
        let differing = c
            .iter()
            .zip(&e)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        if differing > 0 {
            let max = c
                .iter()
                .zip(&e)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            eprintln!(
                "stage check: {name} output {j}: {differing} of {} elements differ (max |diff| {max})",
                c.len()
            );
        }
    }
    Ok(())
}

/// Checks a stage's inputs: exactly `N` arrays.
pub fn args<const N: usize>(stage: &str, layer: usize, a: &[Array]) -> Result<[Array; N]> {
    let n = a.len();
    a.to_vec().try_into().map_err(|_| {
        Error::Unsupported(format!(
            "{stage} of layer {layer} takes {N} inputs, got {n}"
        ))
    })
}
