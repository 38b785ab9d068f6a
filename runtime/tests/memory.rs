//! The memory plan: KV bytes from each cache's bytes per token (sharers counted once,
//! rings capped at the window, per their kv bits), the largest safe context, admission.

use std::path::Path;

use runtime::family::WeightFacts;
use runtime::kv_layout::KvLayout;
use runtime::memory::{self, MemoryModel};
use runtime::model::AnyConfig;
use runtime::plan::ModelPlan;
use runtime::quantization::QuantSpec;

const Q4: QuantSpec = QuantSpec {
    bits: 4,
    group_size: 64,
};

fn preset(name: &str) -> (AnyConfig, ModelPlan) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../generated/models")
        .join(name);
    let config = AnyConfig::from_file(&dir.join("config.json")).unwrap();
    let kv = dir.join("kv_config.json");
    let layout = if kv.exists() {
        KvLayout::from_file(&kv).unwrap()
    } else {
        KvLayout::float()
    };
    let plan = config.resolve(&layout, WeightFacts::AsShipped).unwrap();
    (config, plan)
}

#[test]
fn e4b_kv_bytes_follow_the_layout() {
    let (config, plan) = preset("gemma4-e4b");
    let model = MemoryModel {
        shape: config.memory_shape(&plan),
        weight_bytes: config.estimate_weight_bytes(Some(Q4), 2),
        dtype_bytes: 2,
        prefill_chunk: 2048,
    };
    let p = model.plan(4096, 1, 24_000_000_000);
    // 24 caches: sharers hold none.
    assert_eq!(p.caches.len(), 24);
    // Sliding cache 0: 4-bit, 2 KV heads, D 256: per vector 128 + 2*4*2 bytes; a ring of 512.
    assert_eq!(p.caches[0].bytes_per_token, 2 * 2 * (128 + 16));
    assert_eq!(p.caches[0].rows, 512);
    // Full cache 11: 8-bit, D 512: per vector 512 + 2*8*2 bytes; 4096 rows.
    assert_eq!(p.caches[11].bytes_per_token, 2 * 2 * (512 + 32));
    assert_eq!(p.caches[11].rows, 4096);
    assert_eq!(p.kv, p.caches.iter().map(|c| c.bytes).sum::<u64>());
    assert_eq!(p.total, p.weights + p.kv + p.transient + p.reserve);
    assert!(p.fits);
}

#[test]
fn the_largest_safe_context_is_the_fitting_boundary() {
    for name in [
        "gemma4-e2b",
        "gemma4-e4b",
        "gemma4-12b",
        "gemma4-26b-a4b",
        "gemma4-31b",
        "llama-3.2-1b",
        "qwen3-0.6b",
    ] {
        let (config, plan) = preset(name);
        let model = MemoryModel {
            shape: config.memory_shape(&plan),
            weight_bytes: config.estimate_weight_bytes(Some(Q4), 2),
            dtype_bytes: 2,
            prefill_chunk: 2048,
        };
        let usable = 40_000_000_000;
        let max = model.max_context(1, usable);
        assert!(max > 0, "{name}");
        assert!(model.plan(max, 1, usable).fits, "{name}");
        assert!(!model.plan(max + 1, 1, usable).fits, "{name}");
        let refused = model.plan(max + 1, 1, usable);
        let msg = memory::admit(&refused).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("{}", max + 1)) && msg.contains(&format!("{max}")),
            "{msg}"
        );
        // Bigger batches need more.
        assert!(model.plan(4096, 2, usable).kv > model.plan(4096, 1, usable).kv);
    }
}

#[test]
fn weight_estimate_counts_quantized_and_float_modules() {
    let (config, _) = preset("gemma4-e4b");
    let q4 = config.estimate_weight_bytes(Some(Q4), 2);
    let bf16 = config.estimate_weight_bytes(None, 2);
    // 4-bit group 64 with bf16 scales and biases is 4.5 bits per weight.
    let ratio = bf16 as f64 / q4 as f64;
    assert!(ratio > 3.4 && ratio < 3.6, "{ratio}");
}
