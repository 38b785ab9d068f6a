//! `RotatingKvCache`: a float ring of `max_size` rows (mlx-lm `RotatingKVCache`, keep 0),
//! for sliding-window donors.
//!
//! Multi-token updates reorder the buffer into temporal order, keep its last
//! `max_size - 1` rows and append (so a chunk sees up to `max_size - 1 + L` keys);
//! single-token updates write in place, in ring order once the ring is full.

use mlx_rs::Array;

use super::{CacheGeometry, RotatingQuantizedKvCache, STEP, concat_rows, rows, write_rows, zeros};
use crate::error::Result;
use crate::quantization::QuantSpec;

/// Rows kept at the front of the ring forever (mlx-lm's `keep`; Gemma 4 uses 0).
pub(super) const KEEP: i32 = 0;

/// A float ring buffer.
#[derive(Debug, Clone)]
pub struct RotatingKvCache {
    geometry: CacheGeometry,
    keys: Option<Array>,
    values: Option<Array>,
    /// Tokens ever seen (also the RoPE offset).
    offset: usize,
    /// The write index.
    idx: i32,
    max_size: i32,
}

impl RotatingKvCache {
    /// An empty ring of `max_size` rows.
    pub fn new(geometry: CacheGeometry, max_size: usize) -> Self {
        RotatingKvCache {
            geometry,
            keys: None,
            values: None,
            offset: 0,
            idx: 0,
            max_size: max_size as i32,
        }
    }

    /// The RoPE position of the next token (every row alike: rings are never ragged).
    pub fn rope_offset(&self) -> crate::nn::rope::RopeOffset {
        crate::nn::rope::RopeOffset::Uniform(self.offset() as i32)
    }

    /// Tokens ever seen.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The ring size.
    pub fn max_size(&self) -> usize {
        self.max_size as usize
    }

    /// The geometry the cache was made for.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// Writes `[B, H, L, D]` keys/values; returns what the layer attends over.
    pub fn update_and_fetch(&mut self, k: &Array, v: &Array) -> Result<(Array, Array)> {
        if k.dim(2) == 1 {
            self.update_in_place(k, v)
        } else {
            self.update_concat(k, v)
        }
    }

    fn update_concat(&mut self, k: &Array, v: &Array) -> Result<(Array, Array)> {
        match (self.keys.take(), self.values.take()) {
            (Some(keys), Some(values)) => {
                let keys = temporal_order(&keys, self.idx, self.offset)?;
                let values = temporal_order(&values, self.idx, self.offset)?;
                self.idx = keys.dim(2);
                let trim_size = self.idx - self.max_size + 1;
                self.keys = Some(trim(trim_size, &keys, Some(k))?);
                self.values = Some(trim(trim_size, &values, Some(v))?);
            }
            _ => {
                self.keys = Some(k.clone());
                self.values = Some(v.clone());
            }
        }
        self.offset += k.dim(2) as usize;
        let keys = self.keys.as_ref().expect("set above");
        self.idx = keys.dim(2);
        Ok((keys.clone(), self.values.clone().expect("set above")))
    }

    fn update_in_place(&mut self, k: &Array, v: &Array) -> Result<(Array, Array)> {
        let (b, h, s) = (k.dim(0), k.dim(1), k.dim(2));
        let prev = self.offset as i32;
        let len = self.keys.as_ref().map_or(0, |x| x.dim(2));
        if self.keys.is_none() || (prev >= len && len < self.max_size) {
            let new_size = (STEP as i32).min(self.max_size - prev);
            let new_k = zeros(b, h, new_size, k.dim(3), k.dtype())?;
            let new_v = zeros(b, h, new_size, v.dim(3), v.dtype())?;
            match (self.keys.take(), self.values.take()) {
                (Some(keys), Some(values)) => {
                    self.keys = Some(concat_rows(&[keys, new_k])?);
                    self.values = Some(concat_rows(&[values, new_v])?);
                }
                _ => {
                    self.keys = Some(new_k);
                    self.values = Some(new_v);
                }
            }
            self.idx = prev;
        }
        let keys = self.keys.as_mut().expect("allocated");
        let values = self.values.as_mut().expect("allocated");
        let trim_size = keys.dim(2) - self.max_size;
        if trim_size > 0 {
            *keys = trim(trim_size, keys, None)?;
            *values = trim(trim_size, values, None)?;
            self.idx = self.max_size;
        }
        if self.idx == self.max_size {
            self.idx = KEEP;
        }
        write_rows(keys, self.idx, self.idx + s, k)?;
        write_rows(values, self.idx, self.idx + s, v)?;
        self.offset += s as usize;
        self.idx += s;
        let end = self.offset as i32;
        if end < keys.dim(2) {
            Ok((rows(keys, 0, end)?, rows(values, 0, end)?))
        } else {
            Ok((keys.clone(), values.clone()))
        }
    }

    /// Moves `offset` and the write index back by up to `n` (only before the ring fills).
    pub fn trim(&mut self, n: usize) -> usize {
        let n = n.min(self.offset);
        self.offset -= n;
        self.idx -= n as i32;
        n
    }

    /// Quantizes the buffer as laid out (ring order, unused rows included), keeping
    /// offset and write index (mlx-optiq's conversion).
    pub fn to_quantized(self, spec: QuantSpec) -> Result<RotatingQuantizedKvCache> {
        RotatingQuantizedKvCache::from_float(
            self.geometry,
            spec,
            self.keys.as_ref(),
            self.values.as_ref(),
            self.offset,
            self.idx,
            self.max_size,
        )
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

/// mlx-lm `_trim`: drop `trim_size` rows after the kept ones, then append.
fn trim(trim_size: i32, v: &Array, append: Option<&Array>) -> Result<Array> {
    let mut parts = if trim_size > 0 {
        vec![rows(v, 0, KEEP)?, rows(v, trim_size + KEEP, v.dim(2))?]
    } else {
        vec![v.clone()]
    };
    if let Some(a) = append {
        parts.push(a.clone());
    }
    concat_rows(&parts)
}

/// mlx-lm `_temporal_order`: the ring unrolled oldest-first, unused rows cut off.
fn temporal_order(v: &Array, idx: i32, offset: usize) -> Result<Array> {
    let len = v.dim(2);
    if idx == len {
        Ok(v.clone())
    } else if (idx as usize) < offset {
        concat_rows(&[rows(v, 0, KEEP)?, rows(v, idx, len)?, rows(v, KEEP, idx)?])
    } else {
        rows(v, 0, idx)
    }
}
