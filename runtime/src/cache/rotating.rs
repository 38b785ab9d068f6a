//! `RotatingKvCache`: a float ring of `max_size` rows (mlx-lm `RotatingKVCache`, keep 0),
//! for sliding-window donors.
//!
//! Multi-token updates reorder the buffer into temporal order, keep its last
//! `max_size - 1` rows and append (so a chunk sees up to `max_size - 1 + L` keys);
//! single-token updates write in place, in ring order once the ring is full.
//!
//! Rows of different lengths share a ring as they share a growing cache
//! ([`super::ragged`]): one write index for all rows, each row's tokens right-aligned in
//! the ring's temporal order after a left padding. The ring's `offset` is the longest
//! row's; a row's position is `offset` minus its padding, and a single-token step's mask
//! hides the slots that hold no token of the row (the ring's slot `s` holds the token
//! at a known position, so it is valid for a row when that position is past the row's
//! padding).

use mlx_rs::Array;

use super::ragged::{self, LeftPadding};
use super::{CacheGeometry, RotatingQuantizedKvCache, STEP, concat_rows, rows, write_rows, zeros};
use crate::error::{Error, Result};
use crate::nn::mask::AttnMask;
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
    /// Rows of different lengths.
    padding: Option<LeftPadding>,
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
            padding: None,
        }
    }

    /// The RoPE position of each row's next token.
    pub fn rope_offset(&self) -> crate::nn::rope::RopeOffset {
        ragged::rope_offset(self.offset, self.padding.as_ref())
    }

    /// The per-row padding, when the rows hold different numbers of tokens.
    pub fn padding(&self) -> Option<&LeftPadding> {
        self.padding.as_ref()
    }

    /// The mask of an `n`-token step with window `window`: mlx-lm's where no row is
    /// padded, else (single-token steps only) `[B, 1, 1, keys]`, true where the slot
    /// holds one of the row's tokens.
    pub fn make_mask(&self, n: usize, window: usize) -> Result<AttnMask> {
        let Some(padding) = &self.padding else {
            return crate::nn::mask::rotating_mask(n, self.offset, self.max_size(), window);
        };
        if n != 1 {
            return Err(Error::Request(format!(
                "a batch of rows of different lengths takes single-token steps, got {n} tokens"
            )));
        }
        let positions = self.slot_positions()?;
        let keys = positions.len() as i32;
        let positions = Array::from_slice(&positions, &[1, 1, 1, keys]);
        let pads: Vec<i32> = padding.pads().iter().map(|&p| p as i32).collect();
        let pads = Array::from_slice(&pads, &[pads.len() as i32, 1, 1, 1]);
        Ok(AttnMask::Array(positions.ge(&pads)?))
    }

    /// The position of the token each slot holds after the next single-token write (the
    /// keys that step attends over), for a ring in the layout [`Self::merge`] leaves:
    /// temporal order until it fills, then written in ring order.
    fn slot_positions(&self) -> Result<Vec<i32>> {
        let (offset, size) = (self.offset as i32, self.max_size);
        if offset < size {
            if self.idx != offset {
                return Err(Error::Unsupported(format!(
                    "a ragged ring with write index {} at offset {offset}",
                    self.idx
                )));
            }
            return Ok((0..=offset).collect());
        }
        // The next write goes to slot `w`, which then holds position `offset`.
        let w = if self.idx >= size { KEEP } else { self.idx };
        Ok((0..size)
            .map(|s| offset - (w - s).rem_euclid(size))
            .collect())
    }

    /// One batch of the rows of `parts` (float rings of one model's layer), each row's
    /// tokens right-aligned after a left padding, at the longest row's offset.
    pub fn merge(parts: &[&RotatingKvCache]) -> Result<RotatingKvCache> {
        let offset = parts.iter().map(|p| p.offset).max().unwrap_or(0);
        Self::laid_out(parts, offset)
    }

    /// The rows of `parts` as one ring at `offset` (each part's rows padded by the
    /// difference, which must leave no padding negative): until `offset` fills the ring,
    /// `offset` slots in temporal order; after, the ring's `max_size` slots in temporal
    /// order with the write index at the end (its oldest slot is written next).
    fn laid_out(parts: &[&RotatingKvCache], offset: usize) -> Result<RotatingKvCache> {
        let first = parts
            .first()
            .ok_or_else(|| Error::Request("merging no caches".into()))?;
        let size = first.max_size;
        if parts.iter().any(|p| p.max_size != size) {
            return Err(Error::Request("merging rings of different sizes".into()));
        }
        let len = (offset as i32).min(size);
        let mut keys = Vec::with_capacity(parts.len());
        let mut values = Vec::with_capacity(parts.len());
        let mut pads = Vec::new();
        for p in parts {
            let (Some(k), Some(v)) = (&p.keys, &p.values) else {
                return Err(Error::Request("an empty cache cannot join a batch".into()));
            };
            for (x, out) in [(k, &mut keys), (v, &mut values)] {
                let t = temporal_order(x, p.idx, p.offset)?;
                // The rows' tokens are their latest: they end at the ring's last slot.
                let have = t.dim(2).min(len);
                let t = rows(&t, t.dim(2) - have, t.dim(2))?;
                let extra = len - have;
                out.push(if extra > 0 {
                    let pad = zeros(t.dim(0), t.dim(1), extra, t.dim(3), t.dtype())?;
                    concat_rows(&[pad, t])?
                } else {
                    t
                });
            }
            for q in ragged::pads(p.padding.as_ref(), k.dim(0) as usize) {
                pads.push((q + offset).checked_sub(p.offset).ok_or_else(|| {
                    Error::Request(format!(
                        "a ring row of {} tokens laid out at offset {offset}",
                        p.offset - q
                    ))
                })?);
            }
        }
        let keys = mlx_rs::ops::concatenate(&keys, 0)?;
        let values = mlx_rs::ops::concatenate(&values, 0)?;
        Ok(RotatingKvCache {
            geometry: CacheGeometry {
                batch: keys.dim(0) as usize,
                ..first.geometry
            },
            keys: Some(keys),
            values: Some(values),
            offset,
            idx: len,
            max_size: size,
            padding: LeftPadding::new(pads),
        })
    }

    /// Rows `keep` of the batch, in that order; padding every kept row shares is
    /// dropped (the ring laid out again at the longest kept row's offset), so a ring
    /// long rows have left is again in temporal order once it holds less than its size.
    pub fn select(&self, keep: &[usize]) -> Result<RotatingKvCache> {
        let (Some(k), Some(v)) = (&self.keys, &self.values) else {
            return Err(Error::Request("an empty cache cannot drop rows".into()));
        };
        let pads = ragged::pads(self.padding.as_ref(), k.dim(0) as usize);
        if keep.is_empty() || keep.iter().any(|&r| r >= pads.len()) {
            return Err(Error::Request(format!(
                "rows {keep:?} of a batch of {}",
                pads.len()
            )));
        }
        let index: Vec<i32> = keep.iter().map(|&r| r as i32).collect();
        let index = Array::from_slice(&index, &[index.len() as i32]);
        let kept: Vec<usize> = keep.iter().map(|&r| pads[r]).collect();
        let shared = kept.iter().copied().min().unwrap_or(0);
        let selected = RotatingKvCache {
            geometry: CacheGeometry {
                batch: keep.len(),
                ..self.geometry
            },
            keys: Some(k.take_axis(&index, 0)?),
            values: Some(v.take_axis(&index, 0)?),
            padding: LeftPadding::new(kept),
            ..self.clone()
        };
        if shared == 0 {
            return Ok(selected);
        }
        Self::laid_out(&[&selected], self.offset - shared)
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
        if self.padding.is_some() {
            return Err(Error::Unsupported(
                "quantizing a ring whose rows hold different numbers of tokens".into(),
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const W: usize = 8;

    fn geometry() -> CacheGeometry {
        CacheGeometry {
            batch: 1,
            kv_heads: 1,
            head_dim: 2,
            dtype_bytes: 4,
        }
    }

    /// Keys (and values) `[1, 1, n, 2]` that name their row and position.
    fn tokens(row: usize, from: usize, n: usize) -> Array {
        let data: Vec<f32> = (from..from + n)
            .flat_map(|p| [(1000 * row + p) as f32; 2])
            .collect();
        Array::from_slice(&data, &[1, 1, n as i32, 2])
    }

    /// The positions row `r` of `keys` holds where `valid` (all slots when `None`),
    /// sorted, after checking each slot names row `row`.
    fn held(keys: &Array, valid: Option<&Array>, r: usize, row: usize) -> Vec<usize> {
        let k = keys.as_dtype(mlx_rs::Dtype::Float32).unwrap();
        let slots = k.dim(2) as usize;
        let data = k.as_slice::<f32>();
        let row_data = &data[r * slots * 2..(r + 1) * slots * 2];
        let valid: Vec<bool> = match valid {
            Some(m) => {
                let m = m.as_dtype(mlx_rs::Dtype::Bool).unwrap();
                let all = m.as_slice::<bool>();
                all[r * slots..(r + 1) * slots].to_vec()
            }
            None => vec![true; slots],
        };
        let mut out: Vec<usize> = (0..slots)
            .filter(|&s| valid[s])
            .map(|s| {
                let v = row_data[2 * s] as usize;
                assert_eq!(
                    v / 1000,
                    row,
                    "slot {s} of row {r} holds another row's token"
                );
                v % 1000
            })
            .collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn a_ragged_ring_attends_over_each_rows_own_window() {
        // Row 0 prefilled with 13 tokens (past the ring), row 1 with 3, row 2 with 6;
        // rows 0 and 1 join, step, row 2 joins, they step across the wrap, row 0 leaves.
        let lens = [13usize, 3, 6];
        let mut alone: Vec<RotatingKvCache> = lens
            .iter()
            .enumerate()
            .map(|(r, &n)| {
                let mut c = RotatingKvCache::new(geometry(), W);
                let t = tokens(r, 0, n);
                c.update_and_fetch(&t, &t).unwrap();
                c
            })
            .collect();
        let mut next = lens;
        let mut live = vec![0usize, 1];
        let mut batch = RotatingKvCache::merge(&[&alone[0], &alone[1]]).unwrap();
        for step in 0..14 {
            if step == 3 {
                batch = RotatingKvCache::merge(&[&batch, &alone[2]]).unwrap();
                live.push(2);
            }
            if step == 10 {
                batch = batch.select(&[1, 2]).unwrap();
                live.remove(0);
            }
            let mask = match batch.make_mask(1, W).unwrap() {
                AttnMask::Array(m) => Some(m),
                AttnMask::None => None,
                other => panic!("unexpected mask {other:?}"),
            };
            let new: Vec<Array> = live.iter().map(|&r| tokens(r, next[r], 1)).collect();
            let new = mlx_rs::ops::concatenate(&new, 0).unwrap();
            let positions = batch.rope_offset();
            let (keys, _) = batch.update_and_fetch(&new, &new).unwrap();
            if let Some(m) = &mask {
                assert_eq!(m.dim(-1), keys.dim(2), "step {step}: mask and keys differ");
            }
            for (i, &r) in live.iter().enumerate() {
                let t = tokens(r, next[r], 1);
                let (own, _) = alone[r].update_and_fetch(&t, &t).unwrap();
                next[r] += 1;
                let want: Vec<usize> = (next[r].saturating_sub(W)..next[r]).collect();
                assert_eq!(held(&own, None, 0, r), want, "row {r} alone, step {step}");
                assert_eq!(
                    held(&keys, mask.as_ref(), i, r),
                    want,
                    "row {r} in the batch, step {step}"
                );
                assert_eq!(alone[r].offset(), next[r]);
            }
            // The position each row's token was written at: its own count before it.
            if let crate::nn::rope::RopeOffset::Rows(p) = positions {
                let p = p.as_slice::<i32>().to_vec();
                let want: Vec<i32> = live.iter().map(|&r| next[r] as i32 - 1).collect();
                assert_eq!(p, want, "step {step}: rope positions");
            }
        }
    }

    #[test]
    fn a_ragged_ring_refuses_multi_token_steps_and_quantization() {
        let mut a = RotatingKvCache::new(geometry(), W);
        let mut b = RotatingKvCache::new(geometry(), W);
        a.update_and_fetch(&tokens(0, 0, 2), &tokens(0, 0, 2))
            .unwrap();
        b.update_and_fetch(&tokens(1, 0, 5), &tokens(1, 0, 5))
            .unwrap();
        let batch = RotatingKvCache::merge(&[&a, &b]).unwrap();
        assert!(batch.make_mask(2, W).is_err());
        let spec = QuantSpec {
            bits: 8,
            group_size: 64,
        };
        assert!(batch.to_quantized(spec).is_err());
    }
}
