//! The memory plan: what a model at a context length needs (weights, KV caches,
//! transient activations, a reserve) against what the device can use, the largest safe
//! context, and the admission check that refuses a request before anything is allocated.

use serde::Serialize;

use crate::cache::{CacheGeometry, STEP};
use crate::config::{Gemma4Config, LayerType};
use crate::error::{Error, Result};
use crate::plan::ModelPlan;
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

/// Inputs of the plan that do not depend on the context.
#[derive(Debug, Clone)]
pub struct MemoryModel<'a> {
    /// The config (dimensions).
    pub config: &'a Gemma4Config,
    /// The plan (cache kinds after the kv policy).
    pub plan: &'a ModelPlan,
    /// Bytes of the weights.
    pub weight_bytes: u64,
    /// Bytes of one activation element (2 for bf16).
    pub dtype_bytes: u64,
    /// Prompt tokens per prefill forward.
    pub prefill_chunk: u64,
}

impl MemoryModel<'_> {
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

    /// What cache `i` stores per token for `batch` rows.
    fn geometry(&self, i: usize, batch: u64) -> CacheGeometry {
        CacheGeometry {
            batch: batch as usize,
            kv_heads: self.config.kv_heads(i),
            head_dim: self.config.head_dim_of(i),
            dtype_bytes: self.dtype_bytes as usize,
        }
    }

    fn caches(&self, context: u64, batch: u64) -> Vec<CacheMemory> {
        let c = self.config;
        self.plan
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.kv.is_donor())
            .map(|(i, l)| {
                let per_token = self.per_token(i, batch, l.cache.quant());
                // A ring holds its window once single-token steps trim it; a growing
                // cache holds the context rounded up to its 256-row growth step.
                let rows = match l.attention {
                    LayerType::Sliding => context.min(c.sliding_window as u64),
                    LayerType::Full => context.div_ceil(STEP as u64).saturating_mul(STEP as u64),
                };
                CacheMemory {
                    cache: i,
                    signature: l.cache.to_string(),
                    bytes_per_token: per_token,
                    rows,
                    bytes: per_token.saturating_mul(rows),
                }
            })
            .collect()
    }

    /// The peak transient of one forward: the larger of a prefill chunk and a decode step.
    fn transient(&self, context: u64, batch: u64) -> u64 {
        let c = self.config;
        let chunk = self.prefill_chunk.min(context).max(1);
        let step = |tokens: u64| -> u64 {
            let rows = batch.saturating_mul(tokens);
            let h = c.hidden_size as u64;
            let mlp = (0..c.num_hidden_layers)
                .map(|i| c.mlp_width(i))
                .max()
                .unwrap_or(0) as u64;
            let moe = c.moe.map_or(0, |m| {
                product([m.top_k as u64, m.intermediate_size as u64, 3])
            });
            let ple = product([
                c.num_hidden_layers as u64,
                c.hidden_size_per_layer_input as u64,
            ]);
            let heads = c.num_attention_heads as u64;
            let d = c.global_head_dim.max(c.head_dim) as u64;
            // Residual, norms, q/k/v/o, MLP gate/up/product, per-layer inputs.
            let width = sum([
                product([6, h]),
                product([4, heads, d]),
                product([3, mlp]),
                moe,
                product([2, ple]),
            ]);
            let activations = product([rows, width, self.dtype_bytes]);
            // Unfused attention scores (quantized path): bf16 scores, where, f32 softmax.
            let keys = context.max(tokens);
            let scores = product([batch, heads, tokens, keys, 2 * self.dtype_bytes + 4]);
            // Logits of the last position, cast to f32 for sampling.
            let logits = product([batch, c.vocab_size as u64, self.dtype_bytes + 4]);
            sum([activations, scores, logits])
        };
        // The first chunk is cached in float before the policy converts it.
        let float_chunk: u64 = self
            .plan
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.kv.is_donor())
            .map(|(i, _)| {
                product([
                    self.per_token(i, batch, None),
                    chunk.div_ceil(STEP as u64),
                    STEP as u64,
                ])
            })
            .fold(0, u64::saturating_add);
        step(chunk).max(step(1)).saturating_add(float_chunk)
    }

    /// Bytes per token of cache `i` for `batch` rows: its geometry's, computed here with
    /// saturation because the batch is the caller's and need not be small.
    fn per_token(&self, i: usize, batch: u64, quant: Option<QuantSpec>) -> u64 {
        let one_row = self.geometry(i, 1).bytes_per_token(quant) as u64;
        one_row.saturating_mul(batch)
    }
}

/// Weight bytes of `config` stored as mlx-community would (float `dtype_bytes` elements,
/// or `quant` for every module whose inputs divide its group, the MoE router at 8 bits),
/// from the canonical tensor list: what `plan` uses when there is no weight file.
pub fn estimate_weight_bytes(
    config: &Gemma4Config,
    quant: Option<crate::quantization::QuantSpec>,
    dtype_bytes: u64,
) -> u64 {
    use crate::model::gemma4::weights::{TensorRole, canonical_tensors};
    let total = canonical_tensors(config)
        .into_iter()
        .map(|(name, role)| match role {
            TensorRole::Module { lead, out, inp } => {
                let rows = product(lead.iter().chain([&out]).map(|&d| d as u64));
                let spec = match quant {
                    Some(_) if name.ends_with("router.proj") => Some(crate::synth::ROUTER_QUANT),
                    q => q,
                };
                let inp = inp as u64;
                match spec.filter(|q| inp.is_multiple_of(u64::from(q.group_size))) {
                    Some(q) => {
                        let packed = product([inp, q.bits.into()]) / 32;
                        let groups = inp / u64::from(q.group_size);
                        let row = sum([product([4, packed]), product([2, groups, dtype_bytes])]);
                        product([rows, row])
                    }
                    None => product([rows, inp, dtype_bytes]),
                }
            }
            TensorRole::Norm(d) | TensorRole::Vector(d) => product([d as u64, dtype_bytes]),
            TensorRole::LayerScalar => dtype_bytes,
        });
    sum(total)
}

// Byte counts saturate: a model too large to count in u64 bytes is one that never fits,
// and a plan must say so rather than overflow (configs bound each dimension, not their
// products, and the context and batch are the caller's).

fn sum(terms: impl IntoIterator<Item = u64>) -> u64 {
    terms.into_iter().fold(0, u64::saturating_add)
}

fn product(factors: impl IntoIterator<Item = u64>) -> u64 {
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
