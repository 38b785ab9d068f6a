//! Safetensors headers and the sharded index -> catalog -> the loader's tensor checks:
//! what `Catalog::open` and the Gemma 4 loader do before reading any tensor data.
//!
//! Input: `model.safetensors.index.json` (empty: no index), then [`SEPARATOR`] and one
//! whole safetensors file per shard, named `model-0000<i>-of-0000<n>.safetensors`. A
//! header that parses must describe tensors inside the data, of exactly dtype × shape
//! bytes, none overlapping another: the target checks that again, independently, on
//! every header the parser accepts. Accepted catalogs are then checked against a tiny
//! fixed config, as the loader checks a real one.
//!
//! [`SEPARATOR`]: mlx_aot_fuzz::SEPARATOR

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mlx_aot_fuzz::{split, text};
use runtime::model::gemma4::Gemma4Config;
use runtime::model::gemma4::weights::{TensorRole, canonical_tensors, weight_facts};
use runtime::weights::catalog::{Catalog, parse_index};
use runtime::weights::expect::Expect;
use runtime::weights::header::Header;

/// Two layers (one sliding, one full), hidden size 8: the catalogs of the seeds.
const TINY_CONFIG: &str = include_str!("../tiny/config.json");

fn tiny() -> &'static Gemma4Config {
    static CONFIG: OnceLock<Gemma4Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Gemma4Config::from_json_str("tiny/config.json", TINY_CONFIG).expect("the tiny config")
    })
}

// Mostly well-formed files with one odd value (see `mlx_aot_fuzz::mutate`).
libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    mlx_aot_fuzz::mutate(data, size, max_size, seed)
});

fuzz_target!(|data: &[u8]| {
    let parts = split(data);
    let index = match parts[0] {
        [] => None,
        bytes => {
            let Some(t) = text(bytes) else { return };
            match parse_index("model.safetensors.index.json", t) {
                Ok(index) => Some(index),
                Err(_) => return,
            }
        }
    };
    let dir = Path::new("/fuzz/model");
    let shards = parts.len() - 1;
    let mut headers = Vec::with_capacity(shards);
    for (i, bytes) in parts[1..].iter().enumerate() {
        let file = dir.join(format!("model-{:05}-of-{shards:05}.safetensors", i + 1));
        let Ok(header) = Header::from_bytes(&file.display().to_string(), bytes) else {
            return;
        };
        check_header(&header, bytes.len() as u64);
        headers.push((file, header));
    }
    let total: u64 = headers
        .iter()
        .flat_map(|(_, h)| h.tensors.values())
        .map(|t| t.end - t.start)
        .sum();
    let Ok(catalog) = Catalog::from_headers(dir, headers, index) else {
        return;
    };
    assert!(catalog.total_bytes() <= total);
    check_against_tiny(&catalog);
});

/// What `Header::parse` promises of a header it accepts.
fn check_header(header: &Header, file_len: u64) {
    let data_len = file_len - header.data_start;
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for (name, t) in &header.tensors {
        assert!(
            t.start <= t.end && t.end <= data_len,
            "{name}: outside the data"
        );
        let elements: u128 = t.shape.iter().map(|&d| d as u128).product();
        assert_eq!(
            elements * t.dtype.size() as u128,
            (t.end - t.start) as u128,
            "{name}: bytes disagree with dtype and shape"
        );
        spans.push((t.start, t.end));
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[1].0 >= w[0].1, "overlapping tensors {w:?}");
    }
}

/// The loader's checks (`Gemma4Weights::load` before it reads data), in its order.
fn check_against_tiny(catalog: &Catalog) {
    let config = tiny();
    let _ = weight_facts(config, catalog);
    let mut expect = Expect::new(catalog, config.quantization.as_ref());
    for (name, role) in canonical_tensors(config) {
        let checked = match role {
            TensorRole::Module { lead, out, inp } => {
                expect.module(&name, &lead, out, inp).map(|_| ())
            }
            TensorRole::Norm(d) | TensorRole::Vector(d) => expect.float(&name, &[d]),
            TensorRole::LayerScalar if expect.has(&name) => expect.float(&name, &[1]),
            TensorRole::LayerScalar => Ok(()),
        };
        if checked.is_err() {
            return;
        }
    }
    let wanted: Vec<PathBuf> = expect
        .finish()
        .iter()
        .filter_map(|n| catalog.get(n).map(|e| e.file.clone()))
        .collect();
    assert!(wanted.iter().all(|f| f.starts_with("/fuzz/model")));
}
