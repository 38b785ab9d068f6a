//! `CacheSignature`: what a cache is, in the terms generated code is specialized on.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::quantization::QuantSpec;

/// The kind of a KV cache with its quantization: the unit of the generated code's guard.
///
/// Displayed as `kv:plain`, `kv:rotating`, `kv:quant:8:64`, `kv:rotating-quant:4:64`
/// (kind, bits, group size), and for the MLA family's latent caches `mla:latent` or
/// `mla:latent+index` (with the sparse-attention indexer's keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CacheSignature {
    /// A growing float cache (full attention).
    Plain,
    /// A float ring of `sliding_window` rows (sliding attention).
    Rotating,
    /// A growing affine-quantized cache.
    Quant(QuantSpec),
    /// An affine-quantized ring.
    RotatingQuant(QuantSpec),
    /// A growing float cache of MLA's compressed latent and its one-head RoPE key per
    /// token, with the DSA indexer's keys when `indexer` (a layer that runs its own
    /// indexer); never quantized.
    Mla {
        /// Whether the cache also holds the indexer's keys.
        indexer: bool,
    },
}

impl CacheSignature {
    /// The quantization, for quantized kinds.
    pub fn quant(self) -> Option<QuantSpec> {
        match self {
            CacheSignature::Quant(q) | CacheSignature::RotatingQuant(q) => Some(q),
            CacheSignature::Plain | CacheSignature::Rotating | CacheSignature::Mla { .. } => None,
        }
    }

    /// Whether the cache is a ring (sliding window).
    pub fn is_rotating(self) -> bool {
        matches!(
            self,
            CacheSignature::Rotating | CacheSignature::RotatingQuant(_)
        )
    }

    /// Whether rows of different lengths can share a cache of this kind (left-padded,
    /// [`crate::cache::ragged`]): the growing K/V kinds and the float ring. A quantized
    /// ring and an MLA cache have no ragged form yet.
    pub fn is_batchable(self) -> bool {
        matches!(
            self,
            CacheSignature::Plain | CacheSignature::Quant(_) | CacheSignature::Rotating
        )
    }

    /// The same geometry (ring or growing) with the given quantization; an MLA cache,
    /// which has no quantized kind, stays as it is.
    pub fn with_quant(self, quant: Option<QuantSpec>) -> Self {
        if let CacheSignature::Mla { .. } = self {
            return self;
        }
        match (self.is_rotating(), quant) {
            (true, Some(q)) => CacheSignature::RotatingQuant(q),
            (true, None) => CacheSignature::Rotating,
            (false, Some(q)) => CacheSignature::Quant(q),
            (false, None) => CacheSignature::Plain,
        }
    }
}

impl fmt::Display for CacheSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheSignature::Plain => f.write_str("kv:plain"),
            CacheSignature::Rotating => f.write_str("kv:rotating"),
            CacheSignature::Quant(q) => write!(f, "kv:quant:{}:{}", q.bits, q.group_size),
            CacheSignature::RotatingQuant(q) => {
                write!(f, "kv:rotating-quant:{}:{}", q.bits, q.group_size)
            }
            CacheSignature::Mla { indexer: false } => f.write_str("mla:latent"),
            CacheSignature::Mla { indexer: true } => f.write_str("mla:latent+index"),
        }
    }
}

impl FromStr for CacheSignature {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not a cache signature: {s:?} (expected e.g. kv:quant:4:64)");
        let parts: Vec<&str> = s.split(':').collect();
        let quant = |bits: &str, group: &str| -> Result<QuantSpec, String> {
            let spec = QuantSpec {
                bits: bits.parse().map_err(|_| bad())?,
                group_size: group.parse().map_err(|_| bad())?,
            };
            spec.validate()
        };
        match parts.as_slice() {
            ["kv", "plain"] => Ok(CacheSignature::Plain),
            ["kv", "rotating"] => Ok(CacheSignature::Rotating),
            ["kv", "quant", b, g] => Ok(CacheSignature::Quant(quant(b, g)?)),
            ["kv", "rotating-quant", b, g] => Ok(CacheSignature::RotatingQuant(quant(b, g)?)),
            ["mla", "latent"] => Ok(CacheSignature::Mla { indexer: false }),
            ["mla", "latent+index"] => Ok(CacheSignature::Mla { indexer: true }),
            _ => Err(bad()),
        }
    }
}

impl Serialize for CacheSignature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CacheSignature {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signature_reads_back_from_its_text() {
        let q = QuantSpec {
            bits: 4,
            group_size: 64,
        };
        for s in [
            CacheSignature::Plain,
            CacheSignature::Rotating,
            CacheSignature::Quant(q),
            CacheSignature::RotatingQuant(q),
            CacheSignature::Mla { indexer: false },
            CacheSignature::Mla { indexer: true },
        ] {
            assert_eq!(s.to_string().parse::<CacheSignature>(), Ok(s));
        }
        assert_eq!(
            CacheSignature::Mla { indexer: true }.to_string(),
            "mla:latent+index"
        );
        assert!("mla:other".parse::<CacheSignature>().is_err());
        // MLA caches have no quantized kind.
        assert_eq!(
            CacheSignature::Mla { indexer: true }.with_quant(Some(q)),
            CacheSignature::Mla { indexer: true }
        );
    }
}
