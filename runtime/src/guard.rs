//! The guard of generated code: live cache signatures against the ones it was
//! generated for (count and each entry, kind with bits and group size).

use crate::cache::AnyCache;
use crate::signature::CacheSignature;

/// Whether `caches` are exactly the kinds (and quantizations) `expected` lists.
pub fn caches_match(caches: &[AnyCache], expected: &[CacheSignature]) -> bool {
    caches.len() == expected.len()
        && caches
            .iter()
            .zip(expected)
            .all(|(c, e)| c.signature() == *e)
}

/// The first difference between `caches` and `expected`, for logs and errors.
pub fn mismatch(caches: &[AnyCache], expected: &[CacheSignature]) -> Option<String> {
    if caches.len() != expected.len() {
        return Some(format!(
            "{} caches, generated for {}",
            caches.len(),
            expected.len()
        ));
    }
    caches
        .iter()
        .zip(expected)
        .enumerate()
        .find_map(|(i, (c, e))| {
            (c.signature() != *e)
                .then(|| format!("cache {i} is {}, generated for {e}", c.signature()))
        })
}
