//! The KV quantization policy (mlx-optiq's per-layer hook, gemma4.md §6): before each
//! forward, every cache the kv layout lists that is still float and holds tokens is
//! converted, evaluated and its float buffers released, one cache at a time.

use crate::cache::AnyCache;
use crate::error::Result;
use crate::kv_layout::KvLayout;

/// Converts the caches `layout` asks for; returns how many were converted now.
/// The first prefill therefore always runs on float caches.
pub fn apply(caches: &mut [AnyCache], layout: &KvLayout) -> Result<usize> {
    let mut converted = 0;
    for entry in layout.entries() {
        let Some(cache) = caches.get_mut(entry.cache) else {
            continue;
        };
        let is_float = cache.signature().quant().is_none();
        if !is_float || cache.offset() == 0 {
            continue;
        }
        let quantized = cache.clone().to_quantized(entry.cache, entry.quant)?;
        mlx_rs::transforms::eval(quantized.arrays())?;
        // Dropping the float cache here releases its buffers before the next conversion.
        *cache = quantized;
        converted += 1;
    }
    Ok(converted)
}
