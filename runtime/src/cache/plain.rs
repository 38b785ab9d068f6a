//! `KvCache`: a growing float cache (mlx-lm `KVCache`), for full-attention donors.

use mlx_rs::Array;

use super::ragged::{self, LeftPadding, Part};
use super::{CacheGeometry, QuantizedKvCache, write_growing};
use crate::error::{Error, Result};
use crate::nn::rope::RopeOffset;
use crate::quantization::QuantSpec;

/// Keys and values in buffers grown 256 rows at a time; `offset` rows are valid.
#[derive(Debug, Clone)]
pub struct KvCache {
    geometry: CacheGeometry,
    keys: Option<Array>,
    values: Option<Array>,
    offset: usize,
    /// Rows of different lengths ([`super::ragged`]).
    padding: Option<LeftPadding>,
}

impl KvCache {
    /// An empty cache.
    pub fn new(geometry: CacheGeometry) -> Self {
        KvCache {
            geometry,
            keys: None,
            values: None,
            offset: 0,
            padding: None,
        }
    }

    /// Tokens held.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The geometry the cache was made for.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// Writes `[B, H, L, D]` keys/values at `offset` and returns the valid rows.
    pub fn update_and_fetch(&mut self, k: &Array, v: &Array) -> Result<(Array, Array)> {
        let prev = self.offset as i32;
        let keys = write_growing(&mut self.keys, prev, k)?;
        let values = write_growing(&mut self.values, prev, v)?;
        self.offset += k.dim(2) as usize;
        Ok((keys, values))
    }

    /// Moves `offset` back by up to `n`.
    pub fn trim(&mut self, n: usize) -> usize {
        let n = n.min(self.offset);
        self.offset -= n;
        n
    }

    /// Quantizes the whole padded buffer, keeping `offset` (mlx-lm `to_quantized`).
    pub fn to_quantized(self, spec: QuantSpec) -> Result<QuantizedKvCache> {
        QuantizedKvCache::from_float(
            self.geometry,
            spec,
            self.keys.as_ref(),
            self.values.as_ref(),
            self.offset,
            self.padding,
        )
    }

    /// The per-row padding, when the rows hold different numbers of tokens.
    pub fn padding(&self) -> Option<&LeftPadding> {
        self.padding.as_ref()
    }

    /// The RoPE position of each row's next token.
    pub fn rope_offset(&self) -> RopeOffset {
        ragged::rope_offset(self.offset, self.padding.as_ref())
    }

    pub(super) fn part(&self) -> Result<Part> {
        let (Some(k), Some(v)) = (&self.keys, &self.values) else {
            return Err(Error::Request("an empty cache cannot join a batch".into()));
        };
        Ok(Part {
            buffers: vec![k.clone(), v.clone()],
            offset: self.offset,
            pads: ragged::pads(self.padding.as_ref(), k.dim(0) as usize),
        })
    }

    /// One batch of the rows of `parts` (growing float caches of one model), each
    /// left-padded to the longest.
    pub fn merge(parts: &[&KvCache]) -> Result<KvCache> {
        let first = parts
            .first()
            .ok_or_else(|| Error::Request("merging no caches".into()))?;
        let geometry = first.geometry;
        let (buffers, offset, padding) =
            ragged::merge(parts.iter().map(|c| c.part()).collect::<Result<_>>()?)?;
        Ok(Self::from_buffers(geometry, buffers, offset, padding))
    }

    /// Rows `keep` of the batch, in that order.
    pub fn select(&self, keep: &[usize]) -> Result<KvCache> {
        let part = self.part()?;
        let (buffers, offset, padding) =
            ragged::select(&part.buffers, self.offset, &part.pads, keep)?;
        Ok(Self::from_buffers(self.geometry, buffers, offset, padding))
    }

    fn from_buffers(
        geometry: CacheGeometry,
        mut buffers: Vec<Array>,
        offset: usize,
        padding: Option<LeftPadding>,
    ) -> KvCache {
        let values = buffers.pop();
        let keys = buffers.pop();
        let batch = keys.as_ref().map_or(geometry.batch, |k| k.dim(0) as usize);
        KvCache {
            geometry: CacheGeometry { batch, ..geometry },
            keys,
            values,
            offset,
            padding,
        }
    }

    /// Bytes held by the buffers.
    pub fn nbytes(&self) -> usize {
        self.keys.as_ref().map_or(0, Array::nbytes) + self.values.as_ref().map_or(0, Array::nbytes)
    }

    /// The buffers.
    pub fn arrays(&self) -> Vec<&Array> {
        self.keys.iter().chain(self.values.iter()).collect()
    }
}
