//! `RotatingQuantizedKvCache`: the ring of `RotatingKvCache` over quantized triples
//! (mlx-optiq `RotatingQuantizedKVCache`). New K/V are quantized before they are
//! written; fetches return triples, never dequantized.

use mlx_rs::Array;

use super::quantized::{triple_arrays, write_triple};
use super::rotating::KEEP;
use super::{CacheGeometry, QuantTriple, STEP, concat_rows, rows};
use crate::error::Result;
use crate::quantization::QuantSpec;

/// A quantized ring buffer.
#[derive(Debug, Clone)]
pub struct RotatingQuantizedKvCache {
    geometry: CacheGeometry,
    spec: QuantSpec,
    keys: Option<QuantTriple>,
    values: Option<QuantTriple>,
    offset: usize,
    idx: i32,
    max_size: i32,
}

impl RotatingQuantizedKvCache {
    /// An empty ring of `max_size` rows.
    pub fn new(geometry: CacheGeometry, max_size: usize, spec: QuantSpec) -> Self {
        RotatingQuantizedKvCache {
            geometry,
            spec,
            keys: None,
            values: None,
            offset: 0,
            idx: 0,
            max_size: max_size as i32,
        }
    }

    pub(super) fn from_float(
        geometry: CacheGeometry,
        spec: QuantSpec,
        keys: Option<&Array>,
        values: Option<&Array>,
        offset: usize,
        idx: i32,
        max_size: i32,
    ) -> Result<Self> {
        Ok(RotatingQuantizedKvCache {
            geometry,
            spec,
            keys: keys.map(|k| QuantTriple::quantize(k, spec)).transpose()?,
            values: values.map(|v| QuantTriple::quantize(v, spec)).transpose()?,
            offset,
            idx,
            max_size,
        })
    }

    /// Bits and group size.
    pub fn spec(&self) -> QuantSpec {
        self.spec
    }

    /// The RoPE position of the next token (every row alike: a quantized ring is never ragged).
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

    /// Quantizes and writes `[B, H, L, D]` keys/values; returns the attended triples.
    pub fn update_and_fetch(&mut self, k: &Array, v: &Array) -> Result<(QuantTriple, QuantTriple)> {
        if k.dim(2) == 1 {
            self.update_in_place(k, v)
        } else {
            self.update_concat(k, v)
        }
    }

    fn update_concat(&mut self, k: &Array, v: &Array) -> Result<(QuantTriple, QuantTriple)> {
        let qk = QuantTriple::quantize(k, self.spec)?;
        let qv = QuantTriple::quantize(v, self.spec)?;
        match (self.keys.take(), self.values.take()) {
            (Some(keys), Some(values)) => {
                let keys = temporal_order(&keys, self.idx, self.offset)?;
                let values = temporal_order(&values, self.idx, self.offset)?;
                self.idx = keys.len();
                let trim_size = self.idx - self.max_size + 1;
                self.keys = Some(trim(trim_size, &keys, Some(&qk))?);
                self.values = Some(trim(trim_size, &values, Some(&qv))?);
            }
            _ => {
                self.keys = Some(qk);
                self.values = Some(qv);
            }
        }
        self.offset += k.dim(2) as usize;
        self.idx = self.keys.as_ref().expect("set above").len();
        self.active()
    }

    fn update_in_place(&mut self, k: &Array, v: &Array) -> Result<(QuantTriple, QuantTriple)> {
        let (b, h, s) = (k.dim(0), k.dim(1), k.dim(2));
        let prev = self.offset as i32;
        let len = self.keys.as_ref().map_or(0, QuantTriple::len);
        if self.keys.is_none() || (prev >= len && len < self.max_size) {
            let new_size = (STEP as i32).min(self.max_size - prev);
            let new_k = QuantTriple::zeros(b, h, new_size, k.dim(3), self.spec, k.dtype())?;
            let new_v = QuantTriple::zeros(b, h, new_size, v.dim(3), self.spec, v.dtype())?;
            match (self.keys.take(), self.values.take()) {
                (Some(keys), Some(values)) => {
                    self.keys =
                        Some(keys.zip(&new_k, |a, z| concat_rows(&[a.clone(), z.clone()]))?);
                    self.values =
                        Some(values.zip(&new_v, |a, z| concat_rows(&[a.clone(), z.clone()]))?);
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
        let trim_size = keys.len() - self.max_size;
        if trim_size > 0 {
            *keys = trim(trim_size, keys, None)?;
            *values = trim(trim_size, values, None)?;
            self.idx = self.max_size;
        }
        if self.idx == self.max_size {
            self.idx = KEEP;
        }
        let qk = QuantTriple::quantize(k, self.spec)?;
        let qv = QuantTriple::quantize(v, self.spec)?;
        write_triple(keys, self.idx, self.idx + s, &qk)?;
        write_triple(values, self.idx, self.idx + s, &qv)?;
        self.offset += s as usize;
        self.idx += s;
        self.active()
    }

    /// `[:offset]` while the ring is not full, else the whole buffer.
    fn active(&self) -> Result<(QuantTriple, QuantTriple)> {
        let keys = self.keys.as_ref().expect("allocated");
        let values = self.values.as_ref().expect("allocated");
        if (self.offset as i32) < self.max_size {
            let end = self.offset as i32;
            Ok((
                keys.map(|x| rows(x, 0, end))?,
                values.map(|x| rows(x, 0, end))?,
            ))
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

    /// Bytes held by the buffers.
    pub fn nbytes(&self) -> usize {
        self.keys.as_ref().map_or(0, QuantTriple::nbytes)
            + self.values.as_ref().map_or(0, QuantTriple::nbytes)
    }

    /// The buffers.
    pub fn arrays(&self) -> Vec<&Array> {
        triple_arrays(self.keys.as_ref(), self.values.as_ref())
    }
}

/// mlx-optiq `_trim` over triples: no concatenation when only one part remains.
fn trim(trim_size: i32, v: &QuantTriple, append: Option<&QuantTriple>) -> Result<QuantTriple> {
    let mut parts = if trim_size > 0 {
        let len = v.len();
        vec![
            v.map(|x| rows(x, 0, KEEP))?,
            v.map(|x| rows(x, trim_size + KEEP, len))?,
        ]
    } else {
        vec![v.clone()]
    };
    if let Some(a) = append {
        parts.push(a.clone());
    }
    if parts.len() == 1 {
        return Ok(parts.pop().expect("one part"));
    }
    let join = |pick: fn(&QuantTriple) -> &Array| -> Result<Array> {
        concat_rows(&parts.iter().map(|p| pick(p).clone()).collect::<Vec<_>>())
    };
    Ok(QuantTriple {
        packed: join(|t| &t.packed)?,
        scales: join(|t| &t.scales)?,
        biases: join(|t| &t.biases)?,
    })
}

/// mlx-optiq `_temporal_order` over triples.
fn temporal_order(v: &QuantTriple, idx: i32, offset: usize) -> Result<QuantTriple> {
    let len = v.len();
    if idx == len {
        Ok(v.clone())
    } else if (idx as usize) < offset {
        v.map(|x| concat_rows(&[rows(x, 0, KEEP)?, rows(x, idx, len)?, rows(x, KEEP, idx)?]))
    } else {
        v.map(|x| rows(x, 0, idx))
    }
}
