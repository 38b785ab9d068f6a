//! `MlaCache`: the MLA family's per-layer cache (mlx-lm's `CacheList(KVCache(), KVCache())`
//! for `deepseek_v32` / `glm_moe_dsa`): the normed compressed latent `[B, 1, T, kv_lora]`
//! and the rotated one-head RoPE key `[B, 1, T, rope]` of every token, and, for a layer
//! that runs its own DSA indexer, the indexer's rotated keys `[B, 1, T, index_head_dim]`.
//!
//! Buffers grow as mlx-lm's `KVCache` grows (256 rows at a time), so what a layer attends
//! over is the same slice of the same values. mlx-lm's indexer cache also keeps a zero
//! `values` buffer beside the keys, which nothing reads; it is not kept here.

use mlx_rs::Array;

use super::write_growing;
use crate::error::Result;
use crate::nn::rope::RopeOffset;

/// What an MLA cache stores per token, known before it holds anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlaGeometry {
    /// Batch rows.
    pub batch: usize,
    /// kv_lora_rank: the latent's width.
    pub latent: usize,
    /// qk_rope_head_dim: the RoPE key's width.
    pub rope: usize,
    /// index_head_dim, when the cache holds the indexer's keys.
    pub index: Option<usize>,
    /// Bytes of one float element.
    pub dtype_bytes: usize,
}

impl MlaGeometry {
    /// Bytes per token of everything the cache holds, all rows.
    pub fn bytes_per_token(&self) -> usize {
        self.batch * (self.latent + self.rope + self.index.unwrap_or(0)) * self.dtype_bytes
    }
}

/// Every cached row after a step's update: what the layer attends over.
#[derive(Debug, Clone)]
pub struct MlaFetched {
    /// `[B, 1, T, kv_lora]`.
    pub latent: Array,
    /// `[B, 1, T, rope]`.
    pub rope_key: Array,
    /// `[B, 1, T, index_head_dim]`, for a cache that holds them.
    pub index_keys: Option<Array>,
}

/// The latent, the RoPE key and (optionally) the indexer's keys of one layer.
#[derive(Debug, Clone)]
pub struct MlaCache {
    geometry: MlaGeometry,
    latent: Option<Array>,
    rope_key: Option<Array>,
    /// `Some` (empty or not) exactly when the cache holds the indexer's keys.
    index_keys: Option<Option<Array>>,
    offset: usize,
}

impl MlaCache {
    /// An empty cache; it holds the indexer's keys when `geometry.index` is set.
    pub fn new(geometry: MlaGeometry) -> Self {
        MlaCache {
            geometry,
            latent: None,
            rope_key: None,
            index_keys: geometry.index.map(|_| None),
            offset: 0,
        }
    }

    /// Tokens held.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The geometry the cache was made for.
    pub fn geometry(&self) -> MlaGeometry {
        self.geometry
    }

    /// Whether the cache holds the indexer's keys.
    pub fn has_indexer(&self) -> bool {
        self.index_keys.is_some()
    }

    /// The RoPE position of the next token (every row holds the same tokens).
    pub fn rope_offset(&self) -> RopeOffset {
        RopeOffset::Uniform(self.offset as i32)
    }

    /// Writes one step (`[B, 1, L, ·]` each): the latent, the RoPE key and, for a cache
    /// that holds them, the indexer's keys; returns every cached row of each. The
    /// indexer's keys must be given exactly when the cache holds them.
    pub fn update_and_fetch(
        &mut self,
        cache_index: usize,
        latent: &Array,
        rope_key: &Array,
        index_keys: Option<&Array>,
    ) -> Result<MlaFetched> {
        let prev = self.offset as i32;
        let index = match (self.index_keys.as_mut(), index_keys) {
            (Some(buffer), Some(keys)) => Some(write_growing(buffer, prev, keys)?),
            (None, None) => None,
            (held, _) => {
                return Err(crate::Error::Cache {
                    cache: cache_index,
                    message: format!(
                        "is {} but the layer {} indexer keys",
                        if held.is_some() {
                            "mla:latent+index"
                        } else {
                            "mla:latent"
                        },
                        if held.is_some() { "wrote no" } else { "wrote" }
                    ),
                });
            }
        };
        let fetched = MlaFetched {
            latent: write_growing(&mut self.latent, prev, latent)?,
            rope_key: write_growing(&mut self.rope_key, prev, rope_key)?,
            index_keys: index,
        };
        self.offset += latent.dim(2) as usize;
        Ok(fetched)
    }

    /// Moves `offset` back by up to `n`.
    pub fn trim(&mut self, n: usize) -> usize {
        let n = n.min(self.offset);
        self.offset -= n;
        n
    }

    /// Bytes currently held by the buffers.
    pub fn nbytes(&self) -> usize {
        self.arrays().iter().map(|a| a.nbytes()).sum()
    }

    /// The arrays the cache holds, to evaluate them together.
    pub fn arrays(&self) -> Vec<&Array> {
        [&self.latent, &self.rope_key]
            .into_iter()
            .chain(self.index_keys.as_ref())
            .filter_map(Option::as_ref)
            .collect()
    }
}
