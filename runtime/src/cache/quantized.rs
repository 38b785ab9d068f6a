//! `QuantizedKvCache`: a growing affine-quantized cache (mlx-lm `QuantizedKVCache`).

use mlx_rs::Array;

use super::ragged::{self, LeftPadding, Part};
use super::{CacheGeometry, QuantTriple, STEP, concat_rows, rows, write_rows};
use crate::error::{Error, Result};
use crate::nn::rope::RopeOffset;
use crate::quantization::QuantSpec;

/// Quantized keys and values grown 256 rows at a time.
#[derive(Debug, Clone)]
pub struct QuantizedKvCache {
    geometry: CacheGeometry,
    spec: QuantSpec,
    keys: Option<QuantTriple>,
    values: Option<QuantTriple>,
    offset: usize,
    /// Rows of different lengths ([`super::ragged`]).
    padding: Option<LeftPadding>,
}

impl QuantizedKvCache {
    /// An empty cache.
    pub fn new(geometry: CacheGeometry, spec: QuantSpec) -> Self {
        QuantizedKvCache {
            geometry,
            spec,
            keys: None,
            values: None,
            offset: 0,
            padding: None,
        }
    }

    /// The conversion of a float cache: its buffers quantized as laid out.
    pub(super) fn from_float(
        geometry: CacheGeometry,
        spec: QuantSpec,
        keys: Option<&Array>,
        values: Option<&Array>,
        offset: usize,
        padding: Option<LeftPadding>,
    ) -> Result<Self> {
        Ok(QuantizedKvCache {
            geometry,
            spec,
            keys: keys.map(|k| QuantTriple::quantize(k, spec)).transpose()?,
            values: values.map(|v| QuantTriple::quantize(v, spec)).transpose()?,
            offset,
            padding,
        })
    }

    /// Bits and group size.
    pub fn spec(&self) -> QuantSpec {
        self.spec
    }

    /// Tokens held.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The geometry the cache was made for.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// Quantizes and writes `[B, H, L, D]` keys/values; returns the valid rows' triples.
    pub fn update_and_fetch(&mut self, k: &Array, v: &Array) -> Result<(QuantTriple, QuantTriple)> {
        let spec = self.spec;
        let prev = self.offset as i32;
        let l = k.dim(2);
        let capacity = self.keys.as_ref().map_or(0, QuantTriple::len);
        if self.keys.is_none() || prev + l > capacity {
            let (b, h) = (k.dim(0), k.dim(1));
            let n = (l + STEP as i32 - 1) / STEP as i32 * STEP as i32;
            match (self.keys.take(), self.values.take()) {
                (Some(mut keys), Some(mut values)) => {
                    if prev % STEP as i32 != 0 {
                        keys = keys.map(|x| rows(x, 0, prev))?;
                        values = values.map(|x| rows(x, 0, prev))?;
                    }
                    let expand = |x: &Array| -> Result<Array> {
                        let z = mlx_rs::ops::zeros_dtype(&[b, h, n, x.dim(-1)], x.dtype())?;
                        concat_rows(&[x.clone(), z])
                    };
                    self.keys = Some(keys.map(expand)?);
                    self.values = Some(values.map(expand)?);
                }
                _ => {
                    self.keys = Some(QuantTriple::zeros(b, h, n, k.dim(3), spec, k.dtype())?);
                    self.values = Some(QuantTriple::zeros(b, h, n, v.dim(3), spec, k.dtype())?);
                }
            }
        }
        self.offset += l as usize;
        let end = self.offset as i32;
        let qk = QuantTriple::quantize(k, spec)?;
        let qv = QuantTriple::quantize(v, spec)?;
        let keys = self.keys.as_mut().expect("allocated");
        let values = self.values.as_mut().expect("allocated");
        write_triple(keys, prev, end, &qk)?;
        write_triple(values, prev, end, &qv)?;
        if end == keys.len() {
            Ok((keys.clone(), values.clone()))
        } else {
            Ok((
                keys.map(|x| rows(x, 0, end))?,
                values.map(|x| rows(x, 0, end))?,
            ))
        }
    }

    /// Moves `offset` back by up to `n`.
    pub fn trim(&mut self, n: usize) -> usize {
        let n = n.min(self.offset);
        self.offset -= n;
        n
    }

    /// The per-row padding, when the rows hold different numbers of tokens.
    pub fn padding(&self) -> Option<&LeftPadding> {
        self.padding.as_ref()
    }

    /// The RoPE position of each row's next token.
    pub fn rope_offset(&self) -> RopeOffset {
        ragged::rope_offset(self.offset, self.padding.as_ref())
    }

    fn part(&self) -> Result<Part> {
        let (Some(k), Some(v)) = (&self.keys, &self.values) else {
            return Err(Error::Request("an empty cache cannot join a batch".into()));
        };
        Ok(Part {
            buffers: [k, v]
                .into_iter()
                .flat_map(|t| [t.packed.clone(), t.scales.clone(), t.biases.clone()])
                .collect(),
            offset: self.offset,
            pads: ragged::pads(self.padding.as_ref(), k.packed.dim(0) as usize),
        })
    }

    /// One batch of the rows of `parts` (growing caches of one model and spec), each
    /// left-padded to the longest.
    pub fn merge(parts: &[&QuantizedKvCache]) -> Result<QuantizedKvCache> {
        let first = parts
            .first()
            .ok_or_else(|| Error::Request("merging no caches".into()))?;
        if parts.iter().any(|c| c.spec != first.spec) {
            return Err(Error::Request(
                "merging caches of different quantizations".into(),
            ));
        }
        let (buffers, offset, padding) =
            ragged::merge(parts.iter().map(|c| c.part()).collect::<Result<_>>()?)?;
        Ok(Self::from_buffers(
            first.geometry,
            first.spec,
            buffers,
            offset,
            padding,
        ))
    }

    /// Rows `keep` of the batch, in that order.
    pub fn select(&self, keep: &[usize]) -> Result<QuantizedKvCache> {
        let part = self.part()?;
        let (buffers, offset, padding) =
            ragged::select(&part.buffers, self.offset, &part.pads, keep)?;
        Ok(Self::from_buffers(
            self.geometry,
            self.spec,
            buffers,
            offset,
            padding,
        ))
    }

    fn from_buffers(
        geometry: CacheGeometry,
        spec: QuantSpec,
        buffers: Vec<Array>,
        offset: usize,
        padding: Option<LeftPadding>,
    ) -> QuantizedKvCache {
        let mut it = buffers.into_iter();
        let mut triple = || -> Option<QuantTriple> {
            Some(QuantTriple {
                packed: it.next()?,
                scales: it.next()?,
                biases: it.next()?,
            })
        };
        let keys = triple();
        let values = triple();
        let batch = keys
            .as_ref()
            .map_or(geometry.batch, |k| k.packed.dim(0) as usize);
        QuantizedKvCache {
            geometry: CacheGeometry { batch, ..geometry },
            spec,
            keys,
            values,
            offset,
            padding,
        }
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

/// Slice-updates each component of `dst` at rows `[start, stop)`.
pub(super) fn write_triple(
    dst: &mut QuantTriple,
    start: i32,
    stop: i32,
    src: &QuantTriple,
) -> Result<()> {
    write_rows(&mut dst.packed, start, stop, &src.packed)?;
    write_rows(&mut dst.scales, start, stop, &src.scales)?;
    write_rows(&mut dst.biases, start, stop, &src.biases)?;
    Ok(())
}

/// The six arrays of a K/V pair of triples.
pub(super) fn triple_arrays<'a>(
    k: Option<&'a QuantTriple>,
    v: Option<&'a QuantTriple>,
) -> Vec<&'a Array> {
    k.into_iter()
        .chain(v)
        .flat_map(|t| [&t.packed, &t.scales, &t.biases])
        .collect()
}
