//! Batches whose rows hold different numbers of tokens, for continuous batching: rows
//! are left-padded to a common length, so one write position serves every row. Each
//! row knows how many padding slots precede its tokens; its RoPE position is the common
//! offset minus that, and a single-token step's mask hides the padding. Rows join by
//! [`merge`] (the shorter side padded) and leave by [`select`] (padding every row shares
//! dropped). These are the growing caches' helpers; a float ring holds rows of
//! different lengths in its own layout ([`super::RotatingKvCache::merge`]).

use mlx_rs::Array;
use mlx_rs::ops::indexing::TryIndexOp;

use super::{concat_rows, rows, zeros};
use crate::error::{Error, Result};
use crate::nn::mask::AttnMask;
use crate::nn::rope::RopeOffset;

/// Padding slots before each row's first token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftPadding(Vec<usize>);

impl LeftPadding {
    /// `None` when no row is padded (the cache is an ordinary batch).
    pub fn new(pads: Vec<usize>) -> Option<Self> {
        if pads.iter().all(|&p| p == 0) {
            None
        } else {
            Some(LeftPadding(pads))
        }
    }

    /// Per row.
    pub fn pads(&self) -> &[usize] {
        &self.0
    }

    /// Each row's position after `offset` slots.
    pub fn rope_offset(&self, offset: usize) -> RopeOffset {
        let rows: Vec<i32> = self.0.iter().map(|&p| (offset - p) as i32).collect();
        RopeOffset::Rows(Array::from_slice(&rows, &[rows.len() as i32]))
    }

    /// The mask of an `n`-token step after `offset` slots: `[B, 1, 1, offset + 1]`, true
    /// where a key is one of the row's tokens. Only single-token steps: a longer step
    /// would also need the causal part (prefill runs per row, before joining).
    pub fn mask(&self, offset: usize, n: usize) -> Result<AttnMask> {
        if n != 1 {
            return Err(Error::Request(format!(
                "a batch of rows of different lengths takes single-token steps, got {n} tokens"
            )));
        }
        let keys = (offset + 1) as i32;
        let slots = Array::arange::<i32, i32>(None, keys, None)?.reshape(&[1, 1, 1, keys])?;
        let pads: Vec<i32> = self.0.iter().map(|&p| p as i32).collect();
        let pads = Array::from_slice(&pads, &[pads.len() as i32, 1, 1, 1]);
        Ok(AttnMask::Array(slots.ge(&pads)?))
    }
}

/// The RoPE position of each row's next token after `offset` slots.
pub fn rope_offset(offset: usize, padding: Option<&LeftPadding>) -> RopeOffset {
    match padding {
        Some(p) => p.rope_offset(offset),
        None => RopeOffset::Uniform(offset as i32),
    }
}

/// The mask of an `n`-token step of a growing cache after `offset` slots: the padding's
/// where rows are padded, else the ordinary full-attention mask.
pub fn mask(offset: usize, padding: Option<&LeftPadding>, n: usize) -> Result<AttnMask> {
    match padding {
        Some(p) => p.mask(offset, n),
        None => Ok(crate::nn::mask::full_mask(n)),
    }
}

/// Each row's padding (zeros for an ordinary batch of `batch` rows).
pub(super) fn pads(padding: Option<&LeftPadding>, batch: usize) -> Vec<usize> {
    match padding {
        Some(p) => p.pads().to_vec(),
        None => vec![0; batch],
    }
}

/// One part of a merge: a cache's K/V buffers (`[B, H, capacity, cols]`, the first
/// `offset` slots written), its rows' padding, its batch.
pub(super) struct Part {
    pub buffers: Vec<Array>,
    pub offset: usize,
    pub pads: Vec<usize>,
}

/// The parts as one batch, each left-padded to the longest: the buffers (exactly
/// `offset` slots), the common offset and every row's padding.
pub(super) fn merge(parts: Vec<Part>) -> Result<(Vec<Array>, usize, Option<LeftPadding>)> {
    let offset = parts.iter().map(|p| p.offset).max().unwrap_or(0);
    let n_buffers = parts.first().map_or(0, |p| p.buffers.len());
    if parts.iter().any(|p| p.buffers.len() != n_buffers) {
        return Err(Error::Request("merging caches of different kinds".into()));
    }
    let mut merged = Vec::with_capacity(n_buffers);
    for i in 0..n_buffers {
        let mut pieces = Vec::with_capacity(parts.len());
        for p in &parts {
            let x = &p.buffers[i];
            let valid = rows(x, 0, p.offset as i32)?;
            let extra = (offset - p.offset) as i32;
            pieces.push(if extra > 0 {
                let pad = zeros(x.dim(0), x.dim(1), extra, x.dim(3), x.dtype())?;
                concat_rows(&[pad, valid])?
            } else {
                valid
            });
        }
        merged.push(mlx_rs::ops::concatenate(&pieces, 0)?);
    }
    let pads = parts
        .iter()
        .flat_map(|p| p.pads.iter().map(move |&q| q + offset - p.offset))
        .collect();
    Ok((merged, offset, LeftPadding::new(pads)))
}

/// Rows `keep` of a batch (buffers with `offset` slots written, rows padded by `pads`),
/// with the padding all of them share dropped: the buffers, the new offset, the padding.
pub(super) fn select(
    buffers: &[Array],
    offset: usize,
    pads: &[usize],
    keep: &[usize],
) -> Result<(Vec<Array>, usize, Option<LeftPadding>)> {
    if keep.is_empty() || keep.iter().any(|&r| r >= pads.len()) {
        return Err(Error::Request(format!(
            "rows {keep:?} of a batch of {}",
            pads.len()
        )));
    }
    let kept: Vec<usize> = keep.iter().map(|&r| pads[r]).collect();
    let shared = kept.iter().copied().min().unwrap_or(0);
    let index: Vec<i32> = keep.iter().map(|&r| r as i32).collect();
    let index = Array::from_slice(&index, &[index.len() as i32]);
    let out = buffers
        .iter()
        .map(|x| {
            let x = x.take_axis(&index, 0)?;
            Ok(if shared > 0 {
                x.try_index((.., .., shared as i32..offset as i32, ..))?
            } else {
                x
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let pads = kept.iter().map(|&p| p - shared).collect();
    Ok((out, offset - shared, LeftPadding::new(pads)))
}

/// Whether every cache of a model can hold rows of different lengths.
pub fn batchable(caches: &[super::AnyCache]) -> bool {
    caches.iter().all(super::AnyCache::is_batchable)
}

/// The rows of `batches` (each a model's caches, of the same signatures) as one batch,
/// in order: cache by cache, each row left-padded to the longest.
pub fn join(batches: &[&[super::AnyCache]]) -> Result<Vec<super::AnyCache>> {
    let n = batches.first().map_or(0, |b| b.len());
    if batches.iter().any(|b| b.len() != n) {
        return Err(Error::Request(
            "joining batches of different models (cache counts differ)".into(),
        ));
    }
    (0..n)
        .map(|i| {
            let parts: Vec<&super::AnyCache> = batches.iter().map(|b| &b[i]).collect();
            super::AnyCache::merge(i, &parts)
        })
        .collect()
}

/// Rows `keep` of a model's caches, in that order.
pub fn keep_rows(caches: &[super::AnyCache], keep: &[usize]) -> Result<Vec<super::AnyCache>> {
    caches
        .iter()
        .enumerate()
        .map(|(i, c)| c.select_rows(i, keep))
        .collect()
}
