//! Fused CUDA kernels for the single-token steps of generated models.
//!
//! On a CUDA device a decode step is bound by MLX's host cost per kernel, not by the
//! device (BENCHMARKS.md). These kernels (sources in `runtime/kernels/`) each do the work
//! of several MLX kernels in one launch and reproduce their arithmetic operation for
//! operation, so their outputs are the same bytes (`scripts/fused-kernel-probe.py`
//! compares each with the ops it replaces; the parity gate compares whole models):
//!
//! - [`attention_inputs`]: a layer's q/k/v norms and RoPE from its projection, one launch
//!   where MLX makes five (three `rms_norm`, two `rope`);
//! - [`residual`]: `h + rms_norm(d)`, optionally times the layer scalar, optionally
//!   followed by the next block's input norm, one launch for up to four;
//! - [`geglu`]: `gelu_approx(g) * u`, one launch where the reference's compiled function
//!   makes two (three for `gelu_approx` and a multiply), in either rounding ([`Gelu`]).
//!
//! The shared blocks call them where [`enabled`] for the model's options, in the
//! single-token composition (generated decode steps).

mod cuda;
pub mod fast;

use std::cell::RefCell;
use std::collections::HashMap;

use mlx_rs::{Array, Dtype};

use cuda::{KernelSpec, Launch, Template, call};

use crate::error::{Error, Result};
use crate::nn::Rope;
use crate::options::ExecOptions;

/// Whether a model with `options` runs the fused kernels: when they ask for them and
/// MLX's default device is a CUDA GPU (the only one they are written for).
pub fn enabled(options: &ExecOptions) -> bool {
    options.fused_kernels && crate::backend::cuda_default()
}

/// Under `options.fused_check`, compares `fused` with what `reference` (the MLX ops the
/// kernel replaces) computes, printing each output that differs under `label`: a
/// diagnostic naming the kernel whose bytes differ on a device.
pub fn compare(
    label: &str,
    options: &ExecOptions,
    fused: &[Array],
    reference: impl FnOnce() -> Result<Vec<Array>>,
) -> Result<()> {
    if options.fused_check {
        static DONE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let want = reference()?;
        crate::model::segments::check_stage(&format!("fused {label}"), fused, &want)?;
        let n = DONE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            eprintln!("fused check: {n} comparisons so far");
        }
    }
    Ok(())
}

thread_local! {
    static POSITION: RefCell<Option<(i32, Array)>> = const { RefCell::new(None) };
    static CONSTANTS: RefCell<HashMap<(Dtype, Constant), Array>> = RefCell::new(HashMap::new());
}

/// How MLX 0.32.2's `rms_norm` kernel lays a row of `axis` values over a block: `block`
/// threads, each holding `chunks` vectors of 16 bytes (its `dispatch_num_chunks`). The
/// fused kernels must split a row the same way to sum its squares in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowPlan {
    /// Threads per row.
    pub block: i32,
    /// Vectors per thread.
    pub chunks: i32,
}

impl RowPlan {
    /// The plan of a row of `axis` values of `dtype`; `None` where MLX uses another
    /// kernel (rows longer than 1024 vectors).
    pub fn of(axis: i32, dtype: Dtype) -> Option<RowPlan> {
        let n_reads = 16 / dtype_size(dtype)?;
        if axis <= 0 || axis > n_reads * 128 * 8 {
            return None;
        }
        let nvec = (axis + n_reads - 1) / n_reads;
        let plan = |block, chunks| Some(RowPlan { block, chunks });
        if axis <= n_reads * 64 {
            plan(64, 1)
        } else if nvec % 128 == 0 && nvec / 128 <= 8 {
            plan(128, nvec / 128)
        } else if nvec % 64 == 0 && nvec / 64 <= 8 {
            plan(64, nvec / 64)
        } else {
            plan(128, ((nvec + 127) / 128).min(8))
        }
    }
}

fn dtype_size(dtype: Dtype) -> Option<i32> {
    match dtype {
        Dtype::Float32 => Some(4),
        Dtype::Bfloat16 | Dtype::Float16 => Some(2),
        _ => None,
    }
}

fn plan_for(axis: i32, dtype: Dtype) -> Result<RowPlan> {
    RowPlan::of(axis, dtype).ok_or_else(|| {
        Error::Unsupported(format!("a fused RMS norm over {axis} values of {dtype:?}"))
    })
}

fn eps_bits(eps: f32) -> i32 {
    eps.to_bits() as i32
}

/// `(h + rms_norm(d, d_norm)) [* scale]`, and with `next_norm` also `rms_norm` of that
/// sum: the residual stream and the next block's input. `h` and `d` are `[.., axis]` of
/// one dtype, contiguous; `scale` a one-element array.
pub fn residual(
    h: &Array,
    d: &Array,
    d_norm: &Array,
    scale: Option<&Array>,
    next_norm: Option<&Array>,
    eps: f32,
) -> Result<(Array, Option<Array>)> {
    let axis = h.dim(-1);
    let plan = plan_for(axis, h.dtype())?;
    let rows = h.size() as i32 / axis;
    let inputs: Vec<&Array> = [Some(h), Some(d), Some(d_norm), scale, next_norm]
        .into_iter()
        .flatten()
        .collect();
    let (scaled, next) = (scale.is_some(), next_norm.is_some());
    let n_out = 1 + next as usize;
    let name = match (scaled, next) {
        (false, false) => "mlx_aot_residual",
        (true, false) => "mlx_aot_residual_scaled",
        (false, true) => "mlx_aot_residual_norm",
        (true, true) => "mlx_aot_residual_scaled_norm",
    };
    let spec = || KernelSpec {
        name,
        body: include_str!("../../kernels/residual.cu"),
        defines: vec![("AOT_SCALE", scaled as i32), ("AOT_NEXT", next as i32)],
        inputs: ["h", "d", "wd"]
            .into_iter()
            .chain(scaled.then_some("s"))
            .chain(next.then_some("wn"))
            .collect(),
        outputs: ["h_out"]
            .into_iter()
            .chain(next.then_some("x_out"))
            .collect(),
        contiguous: true,
        shared_header: true,
    };
    let template = [
        Template::Dtype(c"T", h.dtype()),
        Template::Int(c"BLOCK", plan.block),
        Template::Int(c"CHUNKS", plan.chunks),
        Template::Int(c"AXIS", axis),
        Template::Int(c"EPS", eps_bits(eps)),
    ];
    let shape = h.shape().to_vec();
    let mut out = call(
        name,
        spec,
        &inputs,
        &Launch {
            threads: rows * plan.block,
            block: plan.block,
            output_shapes: vec![shape; n_out],
            dtype: h.dtype(),
            template: &template,
        },
    )?
    .into_iter();
    let h_out = out.next().ok_or_else(|| missing("residual"))?;
    Ok((h_out, out.next()))
}

fn missing(kernel: &str) -> Error {
    Error::Unsupported(format!(
        "the fused {kernel} kernel returned too few outputs"
    ))
}

/// The token position as the int32 array the RoPE kernel reads, shared by the layers of a
/// step (the last one made on this thread is kept).
fn position(offset: i32) -> Array {
    POSITION.with(|p| {
        let mut p = p.borrow_mut();
        match &*p {
            Some((o, a)) if *o == offset => a.clone(),
            _ => {
                let a = Array::from_int(offset);
                *p = Some((offset, a.clone()));
                a
            }
        }
    })
}

/// A constant input of the kernels, made once per dtype and thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Constant {
    /// The reference's weak scalars of `gelu_approx`, converted as
    /// [`crate::nn::scalar::scalar`] converts them: `[3, 0.044715, sqrt(2/pi), 0.5, 1]`.
    Gelu,
    /// `[1]`: the weight of a weightless norm, as MLX passes one.
    One,
}

fn cached(dtype: Dtype, which: Constant) -> Result<Array> {
    CONSTANTS.with(|c| {
        if let Some(a) = c.borrow().get(&(dtype, which)) {
            return Ok(a.clone());
        }
        let values: &[f64] = match which {
            Constant::Gelu => &[3.0, 0.044715, (2.0 / std::f64::consts::PI).sqrt(), 0.5, 1.0],
            Constant::One => &[1.0],
        };
        let parts = values
            .iter()
            .map(|&v| {
                crate::nn::scalar::scalar(v, dtype)?
                    .reshape(&[1])
                    .map_err(Error::from)
            })
            .collect::<Result<Vec<Array>>>()?;
        let a = mlx_rs::ops::concatenate(&parts, 0)?;
        a.eval()?;
        c.borrow_mut().insert((dtype, which), a.clone());
        Ok(a)
    })
}

/// Which of the reference's activation functions [`geglu`] reproduces. They differ on
/// CUDA: MLX compiles `geglu` into two kernels that round after every op, and
/// `gelu_approx` alone into two whose second holds `g + 0.044715 * g ** 3`, which the
/// kernel compiler contracts into one FMA (one rounding where the ops make two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gelu {
    /// mlx-lm's compiled `geglu(g, u)` (the MLP).
    Geglu,
    /// The compiled `gelu_approx(g)`, then `* u` (the per-layer-input branch).
    GeluThenMultiply,
}

/// `gelu_approx(g) * u` elementwise, rounded as `form` (`g` and `u` of one shape and
/// dtype).
pub fn geglu(g: &Array, u: &Array, form: Gelu) -> Result<Array> {
    let size = g.size() as i32;
    let fma = form == Gelu::GeluThenMultiply;
    let name = if fma {
        "mlx_aot_gelu_then_multiply"
    } else {
        "mlx_aot_geglu"
    };
    let spec = || KernelSpec {
        name,
        body: include_str!("../../kernels/geglu.cu"),
        defines: vec![("AOT_GELU_FMA", fma as i32)],
        inputs: vec!["g", "u", "c"],
        outputs: vec!["out"],
        contiguous: true,
        shared_header: true,
    };
    let template = [
        Template::Dtype(c"T", g.dtype()),
        Template::Int(c"SIZE", size),
    ];
    let c = cached(g.dtype(), Constant::Gelu)?;
    call(
        name,
        spec,
        &[g, u, &c],
        &Launch {
            threads: size,
            block: 256,
            output_shapes: vec![g.shape().to_vec()],
            dtype: g.dtype(),
            template: &template,
        },
    )?
    .pop()
    .ok_or_else(|| missing("geglu"))
}

/// A layer's attention inputs from its projection product.
#[derive(Debug)]
pub struct AttentionInputs<'a> {
    /// The q/k/v (or, for a layer reading another's K/V, q) projection `[B, 1, width]`:
    /// q heads, then k heads, then v heads unless `k_eq_v`.
    pub product: &'a Array,
    /// q_norm's weight `[head_dim]`.
    pub q_norm: &'a Array,
    /// k_norm's weight, for a layer with its own K/V.
    pub k_norm: Option<&'a Array>,
    /// Query heads.
    pub heads: i32,
    /// K/V heads.
    pub kv_heads: i32,
    /// Head dim.
    pub head_dim: i32,
    /// Whether the values are the raw keys (no v projection).
    pub k_eq_v: bool,
    /// The layer type's RoPE.
    pub rope: &'a Rope,
    /// The position of the token.
    pub offset: i32,
    /// The norms' epsilon.
    pub eps: f32,
}

/// q `[B, heads, 1, D]` normed and rotated; with `k_norm` also k normed and rotated and v
/// normed without a weight (`[B, kv_heads, 1, D]` each): what the reference's norms,
/// transposes and RoPE give for one token.
pub fn attention_inputs(a: &AttentionInputs<'_>) -> Result<Vec<Array>> {
    let dtype = a.product.dtype();
    let plan = plan_for(a.head_dim, dtype)?;
    let kv = a.k_norm.is_some();
    let batch = a.product.dim(0);
    if a.product.ndim() != 3 || a.product.dim(1) != 1 {
        return Err(Error::Unsupported(format!(
            "fused attention inputs of a product of shape {:?} (one token per row expected)",
            a.product.shape()
        )));
    }
    let (base, freqs) = match a.rope {
        Rope::Default { dims, base } if *dims == a.head_dim => (base.log2().to_bits() as i32, None),
        Rope::Proportional { dims, freqs } if *dims == a.head_dim => (0, Some(freqs)),
        _ => {
            return Err(Error::Unsupported(
                "fused attention inputs with a RoPE over part of the head".into(),
            ));
        }
    };
    let ones;
    let offset = position(a.offset);
    let mut inputs = vec![a.product, a.q_norm];
    if let Some(k_norm) = a.k_norm {
        ones = cached(dtype, Constant::One)?;
        inputs.extend([k_norm, &ones]);
    }
    inputs.push(&offset);
    inputs.extend(freqs);
    let with_freqs = freqs.is_some();
    let name = match (kv, with_freqs) {
        (false, false) => "mlx_aot_queries",
        (false, true) => "mlx_aot_queries_freqs",
        (true, false) => "mlx_aot_attention_inputs",
        (true, true) => "mlx_aot_attention_inputs_freqs",
    };
    let spec = || KernelSpec {
        name,
        body: include_str!("../../kernels/qkv.cu"),
        defines: vec![
            ("AOT_KV", kv as i32),
            ("AOT_FREQS", with_freqs as i32),
            ("AOT_SQ_FORM", 1),
            ("AOT_ROPE_FORM", 1),
        ],
        inputs: ["qkv", "wq"]
            .into_iter()
            .chain(kv.then_some(["wk", "ones"]).into_iter().flatten())
            .chain(["offset"])
            .chain(with_freqs.then_some("freqs"))
            .collect(),
        outputs: if kv { vec!["q", "k", "v"] } else { vec!["q"] },
        contiguous: true,
        shared_header: true,
    };
    let template = [
        Template::Dtype(c"T", dtype),
        Template::Int(c"HQ", a.heads),
        Template::Int(c"HKV", a.kv_heads),
        Template::Int(c"D", a.head_dim),
        Template::Int(c"BLOCK", plan.block),
        Template::Int(c"CHUNKS", plan.chunks),
        Template::Int(c"EPS", eps_bits(a.eps)),
        Template::Int(c"BASE", base),
        Template::Bool(c"K_EQ_V", a.k_eq_v),
    ];
    let heads_per_token = a.heads + if kv { 2 * a.kv_heads } else { 0 };
    let mut shapes = vec![vec![batch, a.heads, 1, a.head_dim]];
    if kv {
        shapes.push(vec![batch, a.kv_heads, 1, a.head_dim]);
        shapes.push(vec![batch, a.kv_heads, 1, a.head_dim]);
    }
    call(
        name,
        spec,
        &inputs,
        &Launch {
            threads: batch * heads_per_token * plan.block,
            block: plan.block,
            output_shapes: shapes,
            dtype,
            template: &template,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_runs_the_reference_ops_and_refuses_a_fused_kernel() {
        // The tests run on the CPU build of MLX: no fused kernels, whatever the options...
        assert!(!enabled(&ExecOptions::default()));
        // ...and one called anyway is an error naming it, not a crash.
        let g = Array::from_slice(&[0.5f32, -1.0, 2.0], &[1, 1, 3]);
        let err = geglu(&g, &g, Gelu::Geglu)
            .and_then(|y| {
                y.eval()?;
                Ok(y)
            })
            .expect_err("a CUDA kernel on the CPU");
        assert!(err.to_string().contains("mlx_aot_geglu"), "{err}");
    }

    #[test]
    fn row_plans_are_mlx_dispatch_for_gemma_axes() {
        let bf = Dtype::Bfloat16;
        // 2560 = 320 vectors of 8: 64 threads x 5.
        assert_eq!(
            RowPlan::of(2560, bf),
            Some(RowPlan {
                block: 64,
                chunks: 5
            })
        );
        // Head dims fit one vector per thread of 64.
        assert_eq!(
            RowPlan::of(256, bf),
            Some(RowPlan {
                block: 64,
                chunks: 1
            })
        );
        assert_eq!(
            RowPlan::of(512, bf),
            Some(RowPlan {
                block: 64,
                chunks: 1
            })
        );
        // 2816 = 352 vectors: neither 128 nor 64 divides it into <= 8, so 128 x 3.
        assert_eq!(
            RowPlan::of(2816, bf),
            Some(RowPlan {
                block: 128,
                chunks: 3
            })
        );
        // 5376 = 672 vectors = 64 x 10.5 -> 128 x 6 (ceil).
        assert_eq!(
            RowPlan::of(5376, bf),
            Some(RowPlan {
                block: 128,
                chunks: 6
            })
        );
        // 4096 = 512 vectors = 128 x 4.
        assert_eq!(
            RowPlan::of(4096, bf),
            Some(RowPlan {
                block: 128,
                chunks: 4
            })
        );
        // Float rows have 4 values a vector.
        assert_eq!(
            RowPlan::of(2560, Dtype::Float32),
            Some(RowPlan {
                block: 128,
                chunks: 5
            })
        );
        // Past 1024 vectors MLX takes another kernel; so do we (none).
        assert_eq!(RowPlan::of(8193, bf), None);
        assert_eq!(RowPlan::of(16, Dtype::Int32), None);
    }
}
