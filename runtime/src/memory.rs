//! The memory plan: what a model at a context length needs (weights, KV caches,
//! transient activations, a reserve) against what the device can use, the largest safe
//! context, and the admission check that refuses a request before anything is allocated.

use serde::Serialize;

use crate::cache::{CacheGeometry, STEP};
use crate::error::{Error, Result};
use crate::quantization::QuantSpec;

/// One cache's share of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheMemory {
    /// Cache (donor layer) index.
    pub cache: usize,
    /// Its signature after the kv policy (`kv:rotating-quant:4:64`, ...).
    pub signature: String,
    /// Bytes per token (K and V, all batch rows).
    pub bytes_per_token: u64,
    /// Rows it holds at this context (a ring holds at most its window).
    pub rows: u64,
    /// Bytes.
    pub bytes: u64,
}

/// A model's memory at one context length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryPlan {
    /// Context tokens planned for.
    pub context: u64,
    /// Batch rows.
    pub batch: u64,
    /// Weight bytes.
    pub weights: u64,
    /// KV cache bytes (sharers hold none).
    pub kv: u64,
    /// Peak transient bytes of one forward (activations, attention scores, logits, and
    /// the float copy of a chunk before the kv policy converts it).
    pub transient: u64,
    /// Kept free for the allocator, the runtime and fragmentation.
    pub reserve: u64,
    /// weights + kv + transient + reserve.
    pub total: u64,
    /// What the device can use.
    pub usable: u64,
    /// `total <= usable`.
    pub fits: bool,
    /// The largest context that fits (0 if not even one token fits).
    pub max_context: u64,
    /// Per cache.
    pub caches: Vec<CacheMemory>,
}

/// What the memory plan needs of a model, from its family: its caches and the widths of
/// one forward's transient arrays. Dimensions only; the plan decides the cache kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryShape {
    /// Every cache the model keeps, in cache order.
    pub caches: Vec<CacheShape>,
    /// Elements per token of the activations live at once in one layer (residual, norms,
    /// projections, feed-forward, per-layer inputs).
    pub activation_width: u64,
    /// Attention heads (unfused attention scores are `heads × tokens × keys`).
    pub attention_heads: u64,
    /// vocab_size (the logits of the last position).
    pub vocab: u64,
}

/// One cache of a [`MemoryShape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheShape {
    /// Cache index.
    pub cache: usize,
    /// Its signature under the plan.
    pub signature: crate::signature::CacheSignature,
    /// What it stores per token.
    pub width: CacheWidth,
    /// The rows a ring keeps; `None` for a cache that grows with the context.
    pub window: Option<u64>,
}

/// What one cache stores per token and batch row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheWidth {
    /// A key and a value per K/V head, float or quantized as the signature says.
    KeysValues {
        /// K/V heads.
        kv_heads: usize,
        /// Head dim.
        head_dim: usize,
    },
    /// Float elements no kv policy quantizes (the MLA family's latent, RoPE key and
    /// indexer key).
    Float {
        /// Elements per token.
        elements: usize,
    },
}

/// Inputs of the plan that do not depend on the context.
#[derive(Debug, Clone)]
pub struct MemoryModel {
    /// The model's caches and widths.
    pub shape: MemoryShape,
    /// Bytes of the weights.
    pub weight_bytes: u64,
    /// Bytes of one activation element (2 for bf16).
    pub dtype_bytes: u64,
    /// Prompt tokens per prefill forward.
    pub prefill_chunk: u64,
}

impl MemoryModel {
    /// The plan at `context` tokens for `batch` rows within `usable` bytes.
    pub fn plan(&self, context: u64, batch: u64, usable: u64) -> MemoryPlan {
        let caches = self.caches(context, batch);
        let kv = caches
            .iter()
            .fold(0, |acc: u64, c| acc.saturating_add(c.bytes));
        let transient = self.transient(context, batch);
        let reserve = reserve(usable);
        let total = sum([self.weight_bytes, kv, transient, reserve]);
        let max_context = self.max_context(batch, usable);
        MemoryPlan {
            context,
            batch,
            weights: self.weight_bytes,
            kv,
            transient,
            reserve,
            total,
            usable,
            fits: total <= usable,
            max_context,
            caches,
        }
    }

    /// Refuses `context` tokens for `batch` rows when they do not fit `usable`: the
    /// admission every family's requests go through, before anything is allocated.
    pub fn admit(&self, context: u64, batch: u64, usable: u64) -> Result<MemoryPlan> {
        let plan = self.plan(context, batch, usable);
        admit(&plan)?;
        Ok(plan)
    }

    fn total(&self, context: u64, batch: u64, usable: u64) -> u64 {
        let kv = sum(self.caches(context, batch).iter().map(|c| c.bytes));
        sum([
            self.weight_bytes,
            kv,
            self.transient(context, batch),
            reserve(usable),
        ])
    }

    /// The largest context whose total fits `usable` (binary search; totals grow with
    /// the context).
    pub fn max_context(&self, batch: u64, usable: u64) -> u64 {
        if self.total(1, batch, usable) > usable {
            return 0;
        }
        let (mut lo, mut hi) = (1u64, 1u64 << 40);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.total(mid, batch, usable) <= usable {
                lo = mid
            } else {
                hi = mid - 1
            }
        }
        lo
    }

    fn caches(&self, context: u64, batch: u64) -> Vec<CacheMemory> {
        self.shape
            .caches
            .iter()
            .map(|c| {
                let per_token = self.per_token(c, batch, c.signature.quant());
                // A ring holds its window once single-token steps trim it; a growing
                // cache holds the context rounded up to its 256-row growth step.
                let rows = match c.window {
                    Some(window) => context.min(window),
                    None => context.div_ceil(STEP as u64).saturating_mul(STEP as u64),
                };
                CacheMemory {
                    cache: c.cache,
                    signature: c.signature.to_string(),
                    bytes_per_token: per_token,
                    rows,
                    bytes: per_token.saturating_mul(rows),
                }
            })
            .collect()
    }

    /// The peak transient of one forward: the larger of a prefill chunk and a decode step.
    fn transient(&self, context: u64, batch: u64) -> u64 {
        let s = &self.shape;
        let chunk = self.prefill_chunk.min(context).max(1);
        let step = |tokens: u64| -> u64 {
            let rows = batch.saturating_mul(tokens);
            let activations = product([rows, s.activation_width, self.dtype_bytes]);
            // Unfused attention scores (quantized path): bf16 scores, where, f32 softmax.
            let keys = context.max(tokens);
            let scores = product([
                batch,
                s.attention_heads,
                tokens,
                keys,
                2 * self.dtype_bytes + 4,
            ]);
            // Logits of the last position, cast to f32 for sampling.
            let logits = product([batch, s.vocab, self.dtype_bytes + 4]);
            sum([activations, scores, logits])
        };
        // The first chunk is cached in float before the policy converts it.
        let float_chunk: u64 = s
            .caches
            .iter()
            .map(|c| {
                product([
                    self.per_token(c, batch, None),
                    chunk.div_ceil(STEP as u64),
                    STEP as u64,
                ])
            })
            .fold(0, u64::saturating_add);
        step(chunk).max(step(1)).saturating_add(float_chunk)
    }

    /// Bytes per token of cache `c` for `batch` rows: its geometry's, computed here with
    /// saturation because the batch is the caller's and need not be small.
    fn per_token(&self, c: &CacheShape, batch: u64, quant: Option<QuantSpec>) -> u64 {
        let one_row = match c.width {
            CacheWidth::KeysValues { kv_heads, head_dim } => CacheGeometry {
                batch: 1,
                kv_heads,
                head_dim,
                dtype_bytes: self.dtype_bytes as usize,
            }
            .bytes_per_token(quant)
                as u64,
            CacheWidth::Float { elements } => product([elements as u64, self.dtype_bytes]),
        };
        one_row.saturating_mul(batch)
    }
}

/// Bytes of a linear module with `rows` outputs over `inp` inputs stored as
/// mlx-community stores it: quantized by `quant` when `inp` divides into its groups (packed
/// words plus a scale and a bias per group), else float `dtype_bytes` elements.
pub fn module_bytes(rows: u64, inp: u64, quant: Option<QuantSpec>, dtype_bytes: u64) -> u64 {
    match quant.filter(|q| inp.is_multiple_of(u64::from(q.group_size))) {
        Some(q) => {
            let packed = product([inp, q.bits.into()]) / 32;
            let groups = inp / u64::from(q.group_size);
            let row = sum([product([4, packed]), product([2, groups, dtype_bytes])]);
            product([rows, row])
        }
        None => product([rows, inp, dtype_bytes]),
    }
}

/// Bytes of one element of an MLX dtype.
pub fn dtype_bytes(d: mlx_rs::Dtype) -> u64 {
    use mlx_rs::Dtype::*;
    match d {
        Bool | Uint8 | Int8 => 1,
        Uint16 | Int16 | Float16 | Bfloat16 => 2,
        Uint32 | Int32 | Float32 => 4,
        _ => 8,
    }
}

// Byte counts saturate: a model too large to count in u64 bytes is one that never fits,
// and a plan must say so rather than overflow (configs bound each dimension, not their
// products, and the context and batch are the caller's).

pub(crate) fn sum(terms: impl IntoIterator<Item = u64>) -> u64 {
    terms.into_iter().fold(0, u64::saturating_add)
}

pub(crate) fn product(factors: impl IntoIterator<Item = u64>) -> u64 {
    factors.into_iter().fold(1, u64::saturating_mul)
}

/// The reserve: 10% of the usable memory, at least 512 MiB, at most 4 GiB.
fn reserve(usable: u64) -> u64 {
    (usable / 10).clamp(512 << 20, 4 << 30).min(usable)
}

/// What the device can use: MLX's memory limit (the device's recommended working set on
/// Metal and CUDA, system memory on CPU).
pub fn device_usable() -> Result<u64> {
    Ok(mlx_rs::memory::memory_limit()? as u64)
}

/// Refuses `context` tokens when the plan says they do not fit, with both numbers.
pub fn admit(plan: &MemoryPlan) -> Result<()> {
    if plan.fits {
        return Ok(());
    }
    Err(Error::Request(format!(
        "a context of {} tokens needs {:.2} GB (weights {:.2}, KV {:.2}, transient {:.2}, reserve {:.2}) \
         but {:.2} GB are usable; the largest safe context is {} tokens",
        plan.context,
        gb(plan.total),
        gb(plan.weights),
        gb(plan.kv),
        gb(plan.transient),
        gb(plan.reserve),
        gb(plan.usable),
        plan.max_context
    )))
}

/// Bytes as decimal gigabytes.
pub fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}
