//! The layer barrier: on CUDA, a multi-token forward pass (a prefill) of a model with MoE
//! layers is evaluated in pieces, after every layer's attention and at the end of every
//! layer.
//!
//! MLX 0.32.2's CUDA backend does not give the same bytes twice for one large graph of
//! gemma4-26b-a4b: a 1,027-token prefill of mlx-lm's own model evaluated as one graph gave
//! 2-3 distinct results in 4 runs, while the same prefill evaluated after every layer, and
//! every op of the layer on its own, gave one (`scripts/cuda-determinism.py`,
//! BENCHMARKS.md). With our quantized caches a barrier per layer still left `parity --full
//! gemma4-26b-a4b` failing at that prefill; one after attention as well made all 2,053
//! steps byte-equal. The barrier must wait: the same cuts made with `async_eval`, the host
//! building the next piece while the device runs this one, failed that gate at its first
//! window-crossing prefill (row 280, `benchmarks/h200-2026-12-01e/run1-*`).
//!
//! Dense models take no barrier by default: their prefills gave the same bytes evaluated
//! as one graph (`parity --full` with the barrier off on gemma4-e4b-float twice, gemma4-e4b
//! with its quantized caches and gemma4-e2b, `benchmarks/h200-2026-12-01f/run3-parity-*`;
//! with this default, `run5-parity-*`), and the barrier's 84 waits per prefill took the
//! e4b's monolith from 10,940 to 6,013 tok/s (`run3-bench-b0`, `run3-bench-b2`).
//! Evaluating does not change what is computed, only when, so the barrier keeps the bits
//! of the CPU and Metal; the monolith and generated code both pass through it at the same
//! points. Single-token steps (decode) are left as one graph: they matched in every gate
//! run, and a barrier there would cost a host round trip per layer.

use mlx_rs::Array;

use crate::error::Result;
use crate::options::ExecOptions;

/// Where a multi-token forward pass is evaluated before it goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barrier {
    /// Nowhere: one graph per forward pass (the CPU and Metal default, and CUDA's for
    /// dense models).
    Off,
    /// At the end of every layer: not enough on CUDA for gemma4-26b-a4b once the caches
    /// are quantized.
    Layers,
    /// At the end of every layer and after every layer's attention (CUDA's default for
    /// models with MoE layers).
    LayersAndAttention,
}

/// Whether a model's feed-forward blocks route through experts: what decides its default
/// barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForward {
    /// No layer has MoE experts.
    Dense,
    /// At least one layer has MoE experts.
    WithMoe,
}

/// The barrier in force for a model whose feed-forward is `ffn` under `options`: their
/// [`ExecOptions::barrier`] if set, else [`Barrier::LayersAndAttention`] for a model with
/// MoE layers where the default device is a CUDA GPU, and [`Barrier::Off`] otherwise.
pub fn for_model(ffn: FeedForward, options: &ExecOptions) -> Barrier {
    options.barrier.unwrap_or(match ffn {
        FeedForward::WithMoe if crate::backend::cuda_default() => Barrier::LayersAndAttention,
        _ => Barrier::Off,
    })
}

/// The end of a layer whose output residual stream is `h` `[B, L, H]`: evaluated when
/// `barrier` is on and `L > 1`.
pub fn layer_done(h: &Array, barrier: Barrier) -> Result<()> {
    if multi_token(h) && barrier != Barrier::Off {
        h.eval()?;
    }
    Ok(())
}

/// A layer's attention output `o` (`L` second to last): evaluated under
/// `barrier` [`Barrier::LayersAndAttention`] when `L > 1`.
pub fn attention_done(o: &Array, barrier: Barrier) -> Result<()> {
    if multi_token(o) && barrier == Barrier::LayersAndAttention {
        o.eval()?;
    }
    Ok(())
}

fn multi_token(x: &Array) -> bool {
    x.ndim() >= 2 && x.dim(-2) > 1
}
