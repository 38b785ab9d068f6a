//! `kv_config.json` (mlx-optiq): per-cache KV quantization, `[{layer_idx, bits, group_size}]`.
//!
//! `layer_idx` is a *cache* index (a donor layer's index); caches not listed stay float.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::json::{self, Obj};
use crate::quantization::QuantSpec;

/// One entry of a kv layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvEntry {
    /// Position in the file, for messages.
    pub position: usize,
    /// The cache (donor layer) index.
    pub cache: usize,
    /// Its quantization.
    pub quant: QuantSpec,
}

/// Which caches are quantized, and how.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvLayout {
    /// Where the layout came from, for messages.
    pub source: String,
    entries: BTreeMap<usize, KvEntry>,
}

impl KvLayout {
    /// No quantized caches.
    pub fn float() -> Self {
        KvLayout {
            source: "(float caches)".to_owned(),
            entries: BTreeMap::new(),
        }
    }

    /// Every one of `caches` caches at `quant`.
    pub fn uniform(caches: usize, quant: QuantSpec) -> Self {
        let entries = (0..caches)
            .map(|cache| {
                (
                    cache,
                    KvEntry {
                        position: cache,
                        cache,
                        quant,
                    },
                )
            })
            .collect();
        KvLayout {
            source: format!("(uniform {quant})"),
            entries,
        }
    }

    /// The same layout with cache `cache` at `quant` (added or replaced).
    pub fn with_entry(mut self, cache: usize, quant: QuantSpec) -> Self {
        let position = self
            .entries
            .get(&cache)
            .map_or(self.entries.len(), |e| e.position);
        self.entries.insert(
            cache,
            KvEntry {
                position,
                cache,
                quant,
            },
        );
        self
    }

    /// Reads a kv_config.json.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_json_str(&path.display().to_string(), &text)
    }

    /// Parses the text of a kv_config.json; `file` names it in errors.
    pub fn from_json_str(file: &str, text: &str) -> Result<Self> {
        let value = json::parse(file, text)?;
        let items = value.as_array().ok_or_else(|| {
            Error::config(
                file,
                "(top level)",
                "expected a list of {layer_idx, bits, group_size}",
            )
        })?;
        let mut entries = BTreeMap::new();
        for (position, item) in items.iter().enumerate() {
            let o = Obj::new(file, format!("[{position}]"), item)?;
            let cache = o.usize("layer_idx")?;
            let bits = o.u32("bits")?;
            // mlx-optiq treats group_size as optional with a default of 64.
            let group_size = o.opt_u32("group_size")?.unwrap_or(64);
            let quant = QuantSpec { bits, group_size }
                .validate()
                .map_err(|m| o.err("bits", m))?;
            if let Some(prev) = entries.insert(
                cache,
                KvEntry {
                    position,
                    cache,
                    quant,
                },
            ) {
                return Err(o.err(
                    "layer_idx",
                    format!(
                        "cache {cache} is listed twice (also at [{}])",
                        prev.position
                    ),
                ));
            }
        }
        Ok(KvLayout {
            source: file.to_owned(),
            entries,
        })
    }

    /// The quantization of cache `cache`, if listed.
    pub fn get(&self, cache: usize) -> Option<QuantSpec> {
        self.entries.get(&cache).map(|e| e.quant)
    }

    /// The entries in cache order.
    pub fn entries(&self) -> impl Iterator<Item = &KvEntry> {
        self.entries.values()
    }

    /// Whether no cache is quantized.
    pub fn is_float(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the layout in kv_config.json form (one entry per line, cache order).
    pub fn to_json(&self) -> String {
        let lines: Vec<String> = self
            .entries
            .values()
            .map(|e| {
                format!(
                    "  {{\"layer_idx\": {}, \"bits\": {}, \"group_size\": {}}}",
                    e.cache, e.quant.bits, e.quant.group_size
                )
            })
            .collect();
        format!("[\n{}\n]\n", lines.join(",\n"))
    }
}
