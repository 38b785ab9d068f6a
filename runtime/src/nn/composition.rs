//! How a block composes its ops: as the reference does, or in a single-token step's
//! shorter form.
//!
//! For one token per sequence several of the reference's ops change no bit: the three
//! projections of q, k and v (and gate and up) can be one matmul whose product is split
//! ([`crate::nn::fused`]), a `[B, 1, n·D]` projection becomes `[B, n, 1, D]` heads by
//! one reshape where the reference reshapes and transposes (the transpose moves an axis
//! of length 1, so the bytes are in the same order), attention can skip MLX's
//! multiplication by the scale 1.0 ([`crate::nn::attention::sdpa_with`]), and Gemma 4's
//! last residual add and layer scalar can be one compiled kernel
//! ([`crate::nn::residual`]). MLX spends host time on every op it evaluates, so fewer
//! ops is less host time per step (views cost less of it than kernels).
//! `scripts/decode-probe.py` compares each rewrite with the reference's form byte for
//! byte on a backend; the parity gate compares whole models.

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::fused::FusedProjection;
use crate::options::ExecOptions;

/// Which composition a block uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Composition {
    /// The reference's ops at every length (what the monolith runs).
    Reference,
    /// The shorter form where the step has one token per sequence; the reference's ops
    /// otherwise (a prefill would pay copies to split wider products).
    SingleToken,
}

impl Composition {
    /// Whether a step of `len` tokens per sequence takes the single-token form.
    pub fn single(self, len: i32) -> bool {
        self == Composition::SingleToken && len == 1
    }

    /// Whether a step whose activation is `x` `[B, L, H]` runs the fused CUDA kernels
    /// ([`crate::kernels`]): the single-token form (`L` = 1), where `options` ask for
    /// them on a device that has them.
    pub fn fused_kernels(self, x: &Array, options: &ExecOptions) -> bool {
        x.ndim() == 3 && self.single(x.dim(1)) && crate::kernels::enabled(options)
    }

    /// The fused projection to use for input `x` `[B, L, H]`, if any.
    pub fn fused<'a>(
        self,
        fused: Option<&'a FusedProjection>,
        x: &Array,
    ) -> Option<&'a FusedProjection> {
        if x.ndim() == 3 && self.single(x.dim(1)) {
            fused
        } else {
            None
        }
    }

    /// `[B, L, n·D]` split into `n` heads of `D` (`n` may be -1) ahead of a norm over the
    /// last axis: the reference's `[B, L, n, D]`, or for one token in the single-token
    /// form already `[B, n, 1, D]` (the transpose after the norm would only move an axis
    /// of length 1, so the bytes are in the same order).
    pub fn split_heads(self, x: &Array, n: i32, head_dim: i32) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        if self.single(l) {
            Ok(x.reshape(&[b, n, l, head_dim])?)
        } else {
            Ok(x.reshape(&[b, l, n, head_dim])?)
        }
    }

    /// Heads from [`Composition::split_heads`] of a `len`-token step as `[B, n, L, D]`:
    /// the reference's transpose, or nothing for the single-token form.
    pub fn heads_first(self, x: Array, len: i32) -> Result<Array> {
        if self.single(len) {
            Ok(x)
        } else {
            Ok(x.transpose_axes(&[0, 2, 1, 3])?)
        }
    }

    /// Attention output heads `[B, n, L, D]` back to `[B, L, n·D]`: transpose and
    /// reshape, or for one token in the single-token form the reshape alone.
    pub fn merge_heads(self, o: &Array) -> Result<Array> {
        let (b, l) = (o.dim(0), o.dim(2));
        if self.single(l) {
            Ok(o.reshape(&[b, l, -1])?)
        } else {
            Ok(o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?)
        }
    }
}
