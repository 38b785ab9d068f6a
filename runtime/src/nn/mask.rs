//! Attention masks as the reference builds them (gemma4.md §3.3): none, the `"causal"`
//! string (fast SDPA aligns it bottom-right), or a boolean array.

use mlx_rs::Array;

use crate::error::Result;

/// The mask argument of an attention call.
#[derive(Debug, Clone)]
pub enum AttnMask {
    /// No mask (single-token steps).
    None,
    /// The `"causal"` mode string.
    Causal,
    /// A boolean `[L, S]` array (broadcast over batch and heads).
    Array(Array),
}

impl AttnMask {
    /// The boolean array, if this is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            AttnMask::Array(a) => Some(a),
            AttnMask::None | AttnMask::Causal => None,
        }
    }
}

/// mlx-lm's `create_causal_mask(n, offset, window)`: row r (position `offset + r`) may
/// see column c iff `offset + r >= c` and, with a window, `offset + r < c + window`.
pub fn causal_mask(n: usize, offset: usize, window: Option<usize>) -> Result<Array> {
    let total = (offset + n) as i32;
    let rinds = Array::arange::<i32, i32>(None, total, None)?;
    let linds = if offset > 0 {
        Array::arange::<i32, i32>(offset as i32, total, None)?
    } else {
        rinds.clone()
    };
    let linds = linds.expand_dims(1)?;
    let rinds = rinds.expand_dims(0)?;
    let mut mask = linds.ge(&rinds)?;
    if let Some(w) = window {
        let shifted = mlx_rs::ops::add(&rinds, Array::from_int(w as i32))?;
        mask = mlx_rs::ops::logical_and(&mask, linds.lt(&shifted)?)?;
    }
    Ok(mask)
}

/// The mask of a growing cache (full attention) for an `n`-token step.
pub fn full_mask(n: usize) -> AttnMask {
    if n == 1 {
        AttnMask::None
    } else {
        AttnMask::Causal
    }
}

/// The mask of a ring cache of `max_size` rows holding `offset` tokens, for an `n`-token
/// step with window `window` (mlx-lm `RotatingKVCache.make_mask`; Gemma 4 has
/// `max_size == window`, so single-token steps need no mask).
pub fn rotating_mask(n: usize, offset: usize, max_size: usize, window: usize) -> Result<AttnMask> {
    if n > 1 {
        let o = offset.min(max_size - 1);
        if o + n > window {
            return Ok(AttnMask::Array(causal_mask(n, o, Some(window))?));
        }
        return Ok(AttnMask::Causal);
    }
    if offset >= window && max_size > window {
        return Err(crate::error::Error::Unsupported(format!(
            "a ring of {max_size} rows with a smaller window {window}"
        )));
    }
    Ok(AttnMask::None)
}

/// The mask of an uncached forward of `n` tokens (mlx-lm `create_attention_mask`).
pub fn uncached_mask(n: usize, window: Option<usize>) -> Result<AttnMask> {
    if n == 1 {
        return Ok(AttnMask::None);
    }
    if let Some(w) = window
        && n > w
    {
        return Ok(AttnMask::Array(causal_mask(n, 0, Some(w))?));
    }
    Ok(AttnMask::Causal)
}
