//! The cache zoo (gemma4.md §4): float and quantized, growing and ring, with the exact
//! semantics of mlx-lm's `KVCache`/`RotatingKVCache`/`QuantizedKVCache` and mlx-optiq's
//! `RotatingQuantizedKVCache`. K/V are `[B, heads, seq, D]`.

mod mla;
mod plain;
mod quantized;
pub mod ragged;
mod rotating;
mod rotating_quantized;
mod triple;

pub use mla::{MlaCache, MlaFetched, MlaGeometry};
pub use plain::KvCache;
pub use quantized::QuantizedKvCache;
pub use rotating::RotatingKvCache;
pub use rotating_quantized::RotatingQuantizedKvCache;
pub use triple::QuantTriple;

use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};
use crate::nn::mask::{self, AttnMask};
use crate::nn::rope::RopeOffset;
use crate::quantization::QuantSpec;
use crate::signature::CacheSignature;

/// Rows added when a growing cache (or a ring still below its size) runs out of room.
pub const STEP: usize = 256;

/// What a cache stores per token, known before it holds anything (for memory planning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheGeometry {
    /// Batch rows.
    pub batch: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// Head dim.
    pub head_dim: usize,
    /// Bytes of one float element (2 for bf16).
    pub dtype_bytes: usize,
}

impl CacheGeometry {
    /// Bytes per token of K and V together, float or quantized by `quant`.
    pub fn bytes_per_token(&self, quant: Option<QuantSpec>) -> usize {
        let per_vector = match quant {
            None => self.head_dim * self.dtype_bytes,
            Some(q) => {
                4 * q.packed_cols(self.head_dim)
                    + 2 * q.group_cols(self.head_dim) * self.dtype_bytes
            }
        };
        2 * self.batch * self.kv_heads * per_vector
    }
}

/// The K/V a layer attends over after its cache update: what sharers reuse.
#[derive(Debug, Clone)]
pub enum Kv {
    /// Float K and V.
    Float {
        /// Keys.
        keys: Array,
        /// Values.
        values: Array,
    },
    /// Quantized triples with their (bits, group size), carried because sharers have
    /// no cache of their own to ask.
    Quant {
        /// Keys.
        keys: QuantTriple,
        /// Values.
        values: QuantTriple,
        /// Bits and group size.
        spec: QuantSpec,
    },
}

/// Any cache: the closed set the engine supports.
#[derive(Debug, Clone)]
pub enum AnyCache {
    /// `KVCache`.
    Plain(KvCache),
    /// `RotatingKVCache`.
    Rotating(RotatingKvCache),
    /// `QuantizedKVCache`.
    Quant(QuantizedKvCache),
    /// `RotatingQuantizedKVCache`.
    RotatingQuant(RotatingQuantizedKvCache),
    /// The MLA family's `CacheList(KVCache, KVCache)`: latent, RoPE key, indexer keys.
    Mla(MlaCache),
}

impl AnyCache {
    /// An empty K/V cache of the given signature; `window` is the ring size of rotating
    /// kinds.
    ///
    /// # Panics
    /// For an MLA signature, whose caches are made from their own geometry
    /// ([`MlaCache::new`]); only the MLA family's plans hold them.
    pub fn new(signature: CacheSignature, geometry: CacheGeometry, window: usize) -> Self {
        match signature {
            CacheSignature::Mla { .. } => {
                unreachable!("an MLA cache is made with MlaCache::new from its MlaGeometry")
            }
            CacheSignature::Plain => AnyCache::Plain(KvCache::new(geometry)),
            CacheSignature::Rotating => AnyCache::Rotating(RotatingKvCache::new(geometry, window)),
            CacheSignature::Quant(q) => AnyCache::Quant(QuantizedKvCache::new(geometry, q)),
            CacheSignature::RotatingQuant(q) => {
                AnyCache::RotatingQuant(RotatingQuantizedKvCache::new(geometry, window, q))
            }
        }
    }

    /// The signature the generated code's guard compares.
    pub fn signature(&self) -> CacheSignature {
        match self {
            AnyCache::Plain(_) => CacheSignature::Plain,
            AnyCache::Rotating(_) => CacheSignature::Rotating,
            AnyCache::Quant(c) => CacheSignature::Quant(c.spec()),
            AnyCache::RotatingQuant(c) => CacheSignature::RotatingQuant(c.spec()),
            AnyCache::Mla(c) => CacheSignature::Mla {
                indexer: c.has_indexer(),
            },
        }
    }

    /// Tokens seen (the RoPE offset of the next token).
    pub fn offset(&self) -> usize {
        match self {
            AnyCache::Plain(c) => c.offset(),
            AnyCache::Rotating(c) => c.offset(),
            AnyCache::Quant(c) => c.offset(),
            AnyCache::RotatingQuant(c) => c.offset(),
            AnyCache::Mla(c) => c.offset(),
        }
    }

    /// Bytes per token of this cache's representation.
    pub fn bytes_per_token(&self) -> usize {
        let quant = self.signature().quant();
        match self {
            AnyCache::Plain(c) => c.geometry().bytes_per_token(quant),
            AnyCache::Rotating(c) => c.geometry().bytes_per_token(quant),
            AnyCache::Quant(c) => c.geometry().bytes_per_token(quant),
            AnyCache::RotatingQuant(c) => c.geometry().bytes_per_token(quant),
            AnyCache::Mla(c) => c.geometry().bytes_per_token(),
        }
    }

    /// Bytes currently held by the cache's buffers.
    pub fn nbytes(&self) -> usize {
        match self {
            AnyCache::Plain(c) => c.nbytes(),
            AnyCache::Rotating(c) => c.nbytes(),
            AnyCache::Quant(c) => c.nbytes(),
            AnyCache::RotatingQuant(c) => c.nbytes(),
            AnyCache::Mla(c) => c.nbytes(),
        }
    }

    /// Writes `keys`/`values` (`[B, heads, L, D]`) and returns what the layer attends over.
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<Kv> {
        Ok(match self {
            AnyCache::Plain(c) => {
                let (keys, values) = c.update_and_fetch(keys, values)?;
                Kv::Float { keys, values }
            }
            AnyCache::Rotating(c) => {
                let (keys, values) = c.update_and_fetch(keys, values)?;
                Kv::Float { keys, values }
            }
            AnyCache::Quant(c) => {
                let spec = c.spec();
                let (keys, values) = c.update_and_fetch(keys, values)?;
                Kv::Quant { keys, values, spec }
            }
            AnyCache::RotatingQuant(c) => {
                let spec = c.spec();
                let (keys, values) = c.update_and_fetch(keys, values)?;
                Kv::Quant { keys, values, spec }
            }
            AnyCache::Mla(_) => {
                return Err(Error::Request(
                    "an MLA cache holds a latent, not K/V: its layers write it with \
                     MlaCache::update_and_fetch"
                        .into(),
                ));
            }
        })
    }

    /// The RoPE position of each row's next token.
    pub fn rope_offset(&self) -> RopeOffset {
        match self {
            AnyCache::Plain(c) => c.rope_offset(),
            AnyCache::Quant(c) => c.rope_offset(),
            AnyCache::Rotating(c) => c.rope_offset(),
            AnyCache::RotatingQuant(c) => c.rope_offset(),
            AnyCache::Mla(c) => c.rope_offset(),
        }
    }

    /// Whether rows of different lengths can share this cache
    /// ([`CacheSignature::is_batchable`]).
    pub fn is_batchable(&self) -> bool {
        self.signature().is_batchable()
    }

    /// The rows of `parts` (caches of one kind, at the same place in one model) as one
    /// batch, each row left-padded to the longest ([`ragged`]).
    pub fn merge(cache_index: usize, parts: &[&AnyCache]) -> Result<AnyCache> {
        let refused = |message: String| Error::Cache {
            cache: cache_index,
            message,
        };
        // Every part of the first one's kind, or `None`.
        fn all<'a, T>(
            parts: &[&'a AnyCache],
            kind: impl Fn(&'a AnyCache) -> Option<&'a T>,
        ) -> Option<Vec<&'a T>> {
            parts.iter().map(|c| kind(c)).collect()
        }
        let mixed = || refused("merging caches of different kinds".into());
        match parts.first() {
            Some(AnyCache::Plain(_)) => {
                let plain = all(parts, |c| match c {
                    AnyCache::Plain(p) => Some(p),
                    _ => None,
                });
                Ok(AnyCache::Plain(KvCache::merge(&plain.ok_or_else(mixed)?)?))
            }
            Some(AnyCache::Quant(_)) => {
                let quant = all(parts, |c| match c {
                    AnyCache::Quant(q) => Some(q),
                    _ => None,
                });
                Ok(AnyCache::Quant(QuantizedKvCache::merge(
                    &quant.ok_or_else(mixed)?,
                )?))
            }
            Some(AnyCache::Rotating(_)) => {
                let rings = all(parts, |c| match c {
                    AnyCache::Rotating(r) => Some(r),
                    _ => None,
                });
                Ok(AnyCache::Rotating(RotatingKvCache::merge(
                    &rings.ok_or_else(mixed)?,
                )?))
            }
            Some(c) => Err(refused(format!(
                "a {} cache cannot hold rows of different lengths",
                c.signature()
            ))),
            None => Err(refused("merging no caches".into())),
        }
    }

    /// Rows `keep` of the batch, in that order.
    pub fn select_rows(&self, cache_index: usize, keep: &[usize]) -> Result<AnyCache> {
        match self {
            AnyCache::Plain(c) => Ok(AnyCache::Plain(c.select(keep)?)),
            AnyCache::Quant(c) => Ok(AnyCache::Quant(c.select(keep)?)),
            AnyCache::Rotating(c) => Ok(AnyCache::Rotating(c.select(keep)?)),
            other => Err(Error::Cache {
                cache: cache_index,
                message: format!("a {} cache cannot drop rows", other.signature()),
            }),
        }
    }

    /// The mask for an `n`-token step of a layer of this cache; `window` applies to rings.
    pub fn make_mask(&self, n: usize, window: usize) -> Result<AttnMask> {
        match self {
            AnyCache::Plain(c) => ragged::mask(c.offset(), c.padding(), n),
            AnyCache::Quant(c) => ragged::mask(c.offset(), c.padding(), n),
            AnyCache::Rotating(c) => c.make_mask(n, window),
            AnyCache::RotatingQuant(c) => mask::rotating_mask(n, c.offset(), c.max_size(), window),
            // mlx-lm asks for the causal mask as an array here (`return_array=True`).
            AnyCache::Mla(c) if n > 1 => {
                Ok(AttnMask::Array(mask::causal_mask(n, c.offset(), None)?))
            }
            AnyCache::Mla(_) => Ok(AttnMask::None),
        }
    }

    /// Whether `trim` may be called (rings only before they fill).
    pub fn is_trimmable(&self) -> bool {
        match self {
            AnyCache::Plain(_) | AnyCache::Quant(_) | AnyCache::Mla(_) => true,
            AnyCache::Rotating(c) => c.offset() < c.max_size(),
            AnyCache::RotatingQuant(c) => c.offset() < c.max_size(),
        }
    }

    /// Forgets the last `n` tokens (at most `offset`); returns how many were dropped.
    pub fn trim(&mut self, cache_index: usize, n: usize) -> Result<usize> {
        if !self.is_trimmable() {
            return Err(Error::Cache {
                cache: cache_index,
                message: format!(
                    "a {} cache that has wrapped cannot be trimmed (offset {})",
                    self.signature(),
                    self.offset()
                ),
            });
        }
        Ok(match self {
            AnyCache::Plain(c) => c.trim(n),
            AnyCache::Rotating(c) => c.trim(n),
            AnyCache::Quant(c) => c.trim(n),
            AnyCache::RotatingQuant(c) => c.trim(n),
            AnyCache::Mla(c) => c.trim(n),
        })
    }

    /// Converts a float cache to its quantized kind (growing stays growing, a ring stays a
    /// ring), quantizing the buffer as laid out and keeping offsets; quantized caches
    /// are returned unchanged when `spec` matches.
    pub fn to_quantized(self, cache_index: usize, spec: QuantSpec) -> Result<AnyCache> {
        match self {
            AnyCache::Plain(c) => Ok(AnyCache::Quant(c.to_quantized(spec)?)),
            AnyCache::Rotating(c) => Ok(AnyCache::RotatingQuant(c.to_quantized(spec)?)),
            AnyCache::Quant(c) if c.spec() == spec => Ok(AnyCache::Quant(c)),
            AnyCache::RotatingQuant(c) if c.spec() == spec => Ok(AnyCache::RotatingQuant(c)),
            AnyCache::Mla(_) => Err(Error::Cache {
                cache: cache_index,
                message: format!("an MLA cache has no quantized kind (asked for {spec})"),
            }),
            other => Err(Error::Cache {
                cache: cache_index,
                message: format!("already {}, cannot become {spec}", other.signature()),
            }),
        }
    }

    /// The arrays the cache holds, to evaluate them together.
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            AnyCache::Plain(c) => c.arrays(),
            AnyCache::Rotating(c) => c.arrays(),
            AnyCache::Quant(c) => c.arrays(),
            AnyCache::RotatingQuant(c) => c.arrays(),
            AnyCache::Mla(c) => c.arrays(),
        }
    }
}

/// Writes `x` (`[B, heads, L, D]`) at rows `prev..prev + L` of a growing buffer
/// (allocated, or grown by whole [`STEP`]s as mlx-lm's `KVCache` grows, the rows past
/// `prev` dropped first when the buffer is not a whole number of steps), and returns its
/// rows `0..prev + L`.
fn write_growing(buffer: &mut Option<Array>, prev: i32, x: &Array) -> Result<Array> {
    let l = x.dim(2);
    let capacity = buffer.as_ref().map_or(0, |b| b.dim(2));
    if buffer.is_none() || prev + l > capacity {
        let n = (l + STEP as i32 - 1) / STEP as i32 * STEP as i32;
        let fresh = zeros(x.dim(0), x.dim(1), n, x.dim(3), x.dtype())?;
        *buffer = Some(match buffer.take() {
            Some(mut old) => {
                if prev % STEP as i32 != 0 {
                    old = rows(&old, 0, prev)?;
                }
                concat_rows(&[old, fresh])?
            }
            None => fresh,
        });
    }
    let end = prev + l;
    let buffer = buffer.as_mut().expect("allocated above");
    write_rows(buffer, prev, end, x)?;
    if end < buffer.dim(2) {
        rows(buffer, 0, end)
    } else {
        Ok(buffer.clone())
    }
}

/// `zeros([B, heads, rows, dim])` in `dtype`.
fn zeros(batch: i32, heads: i32, rows: i32, dim: i32, dtype: Dtype) -> Result<Array> {
    Ok(mlx_rs::ops::zeros_dtype(&[batch, heads, rows, dim], dtype)?)
}

/// `x[..., start:stop, :]` (a view).
fn rows(x: &Array, start: i32, stop: i32) -> Result<Array> {
    use mlx_rs::ops::indexing::{Ellipsis, TryIndexOp};
    Ok(x.try_index((Ellipsis, start..stop, ..))?)
}

/// `x[..., start:stop, :] = value` (slice update), `value` shaped as the rows it replaces.
///
/// One `SliceUpdate` and nothing else: mlx-rs's indexed assignment reshapes the value
/// twice on the way (leading singletons off, then back on), two graph nodes per write
/// that a decode step pays for on every cache array of every layer.
fn write_rows(x: &mut Array, start: i32, stop: i32, value: &Array) -> Result<()> {
    let ndim = x.ndim();
    if ndim < 2 || value.ndim() != ndim {
        return Err(Error::Request(format!(
            "cache write: value of shape {:?} for rows of an array of shape {:?}",
            value.shape(),
            x.shape()
        )));
    }
    let mut starts = vec![0i32; ndim];
    let mut stops = x.shape().to_vec();
    starts[ndim - 2] = start;
    stops[ndim - 2] = stop;
    let strides = vec![1i32; ndim];
    let stream = mlx_rs::StreamOrDevice::default();
    // SAFETY: mlx-c call on live arrays; the vectors outlive it, and the result array is
    // owned by the `Array` made from it (or freed on failure).
    let updated = unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_slice_update(
            &mut res,
            x.as_ptr(),
            value.as_ptr(),
            starts.as_ptr(),
            ndim,
            stops.as_ptr(),
            ndim,
            strides.as_ptr(),
            ndim,
            stream.as_ref().as_ptr(),
        );
        if status != 0 {
            mlx_sys::mlx_array_free(res);
            return Err(Error::Request(format!(
                "cache write: rows {start}..{stop} of shape {:?} from a value of shape {:?}",
                x.shape(),
                value.shape()
            )));
        }
        Array::from_ptr(res)
    };
    *x = updated;
    Ok(())
}

/// `concatenate(parts, axis = 2)`.
fn concat_rows(parts: &[Array]) -> Result<Array> {
    Ok(mlx_rs::ops::concatenate(parts, 2)?)
}
