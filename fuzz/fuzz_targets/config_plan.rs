//! config.json (and optionally kv_config.json) -> validated config of its family -> plan
//! -> fingerprint -> memory plan (Gemma 4) or tensor list (Llama): what `mlx-aot plan`,
//! `inspect` and the loaders do with a user's model folder.
//!
//! Input: the config text, then optionally [`SEPARATOR`] and a kv_config.json. Every
//! stage may refuse its input with an error; none may panic, and what one stage accepts
//! the next must handle. The checks beyond "no panic" are round trips: a config that
//! validates writes itself out (`to_text_json`) as a config that validates to the same
//! values, and a kv layout as one with the same entries.
//!
//! [`SEPARATOR`]: mlx_aot_fuzz::SEPARATOR

#![no_main]

use libfuzzer_sys::fuzz_target;
use mlx_aot_fuzz::{split, text};
use runtime::model::gemma4::Gemma4Config;
use runtime::fingerprint::Fingerprint;
use runtime::generate::DEFAULT_PREFILL_CHUNK;
use runtime::kv_layout::KvLayout;
use runtime::family::ModelConfig;
use runtime::memory::MemoryModel;
use runtime::model::AnyConfig;
use runtime::model::llama::config::LlamaConfig;
use runtime::model::llama::weights::canonical_tensors as llama_tensors;
use runtime::model::gemma4::plan::WeightFacts;
use runtime::quantization::QuantSpec;

/// What `mlx-aot plan` would be told a 24 GB machine can use.
const USABLE: u64 = 24_000_000_000;

// Mostly well-formed files with one odd value (see `mlx_aot_fuzz::mutate`).
libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    mlx_aot_fuzz::mutate(data, size, max_size, seed)
});

fuzz_target!(|data: &[u8]| {
    let parts = split(data);
    let Some(config_text) = text(parts[0]) else {
        return;
    };
    // As a model folder is opened: the family its model_type names.
    let Ok(config) = AnyConfig::from_json_str("config.json", config_text) else {
        return;
    };
    let layout = match parts.get(1).map(|p| text(p)) {
        None => KvLayout::float(),
        Some(None) => return,
        Some(Some(kv_text)) => match KvLayout::from_json_str("kv_config.json", kv_text) {
            Ok(layout) => {
                let reread = KvLayout::from_json_str("written kv_config.json", &layout.to_json())
                    .unwrap_or_else(|e| {
                        panic!("a valid kv layout writes out as an invalid one: {e}")
                    });
                let entries =
                    |l: &KvLayout| l.entries().map(|e| (e.cache, e.quant)).collect::<Vec<_>>();
                assert_eq!(entries(&reread), entries(&layout), "kv layout round trip");
                layout
            }
            Err(_) => return,
        },
    };
    if let Some(c) = config.downcast_ref::<Gemma4Config>() {
        gemma4(c, &layout, data.len());
    } else if let Some(c) = config.downcast_ref::<LlamaConfig>() {
        llama(c, &layout);
    }
});

fn gemma4(config: &Gemma4Config, layout: &KvLayout, salt: usize) {
    // A validated config writes out as one that validates to the same values (the
    // quantization block is written separately, and the source names the file).
    let written = config.to_text_json();
    let reread = Gemma4Config::from_value("written config.json", &written)
        .unwrap_or_else(|e| panic!("a validated config writes out as an invalid one: {e}"));
    let mut expected = config.clone();
    expected.source = reread.source.clone();
    expected.quantization = None;
    assert_eq!(reread, expected, "config round trip");

    // Weight facts come from the tensors; a checkpoint may lack any layer scalar (which
    // ones varies with the input).
    let n = config.num_hidden_layers;
    let facts = WeightFacts {
        layer_scalar: (0..n)
            .map(|i| !salt.is_multiple_of(3) || i % 2 == 0)
            .collect(),
    };
    let Ok(plan) = runtime::model::gemma4::plan::resolve(config, layout, &facts) else {
        return;
    };
    assert_eq!(plan.layers.len(), n);
    assert_eq!(plan.num_caches(), config.first_shared_layer());
    let _ = Fingerprint::of(&plan).short();

    // The memory plan of `mlx-aot plan`, estimated weights at bf16 and at 4 bits.
    for quant in [
        None,
        Some(QuantSpec {
            bits: 4,
            group_size: 64,
        }),
    ] {
        let weight_bytes = config.estimate_weight_bytes(quant, 2);
        let model = MemoryModel {
            shape: config.memory_shape(&plan),
            weight_bytes,
            dtype_bytes: 2,
            prefill_chunk: DEFAULT_PREFILL_CHUNK as u64,
        };
        let context = config.max_position_embeddings.unwrap_or(4096).max(1) as u64;
        let p = model.plan(context, 1, USABLE);
        assert!(p.max_context <= 1 << 40);
    }
}

fn llama(config: &LlamaConfig, layout: &KvLayout) {
    let written = config.to_json();
    let reread = LlamaConfig::from_value("written config.json", &written)
        .unwrap_or_else(|e| panic!("a validated config writes out as an invalid one: {e}"));
    let mut expected = config.clone();
    expected.source = reread.source.clone();
    expected.quantization = None;
    assert_eq!(reread, expected, "config round trip");

    let Ok(plan) = runtime::model::llama::plan::resolve(config, layout) else {
        return;
    };
    assert_eq!(plan.num_caches(), config.num_hidden_layers);
    let _ = Fingerprint::of(&plan).short();
    // The tensors the loader checks.
    let tensors = llama_tensors(config);
    assert!(tensors.len() > config.num_hidden_layers);
}
