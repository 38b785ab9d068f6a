//! What the fuzz targets of `fuzz/` found, as regular tests: every saved crash input of
//! `fuzz/regressions/{config_plan,safetensors}/` is refused with an error naming the key
//! or tensor at fault, and the arithmetic they overflowed stays safe on the values around
//! them. Also: the seed corpus stays valid (a seed that no longer parses would make the
//! fuzzers start from nothing), and the safetensors cases the reliability issue lists
//! (offsets past the end, overlapping tensors, absurd shapes, dtype/shape/length
//! disagreement) through the in-memory entry point the fuzz target uses.

use std::fs;
use std::path::{Path, PathBuf};

use runtime::Error;
use runtime::config::{MAX_DIM, MAX_LAYERS};
use runtime::family::ModelConfig;
use runtime::generate::DEFAULT_PREFILL_CHUNK;
use runtime::kv_layout::KvLayout;
use runtime::memory::MemoryModel;
use runtime::model::AnyConfig;
use runtime::model::gemma4::Gemma4Config;
use runtime::model::gemma4::plan::WeightFacts;
use runtime::model::gemma4::weights::{TensorRole, canonical_tensors};
use runtime::model::llama::config::LlamaConfig;
use runtime::plan::ModelPlan;
use runtime::quantization::QuantSpec;
use runtime::weights::catalog::{Catalog, parse_index};
use runtime::weights::expect::Expect;
use runtime::weights::header::Header;
use serde_json::{Value, json};

/// As `fuzz/src/lib.rs` joins the files of one input.
const SEPARATOR: &[u8] = b"\n--8<--\n";
const MAX_PARTS: usize = 8;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of one fuzz input (the split of `fuzz/src/lib.rs`).
fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while parts.len() + 1 < MAX_PARTS {
        match rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(at) => {
                parts.push(&rest[..at]);
                rest = &rest[at + SEPARATOR.len()..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts
}

/// The inputs of a folder of `fuzz/`, by file name.
fn inputs(folder: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join(folder);
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn tiny_config() -> Gemma4Config {
    let text = fs::read_to_string(fuzz_dir().join("tiny/config.json")).unwrap();
    Gemma4Config::from_json_str("tiny/config.json", &text).unwrap()
}

fn tiny_json() -> Value {
    serde_json::from_str(&fs::read_to_string(fuzz_dir().join("tiny/config.json")).unwrap()).unwrap()
}

/// The config error's key and message, or a panic saying what came instead.
fn config_error(result: Result<impl std::fmt::Debug, Error>) -> (String, String) {
    match result {
        Err(Error::Config { key, message, .. }) => (key, message),
        other => panic!("expected a config error, got {other:?}"),
    }
}

fn memory(config: &Gemma4Config, plan: &ModelPlan, weight_bytes: u64) -> MemoryModel {
    MemoryModel {
        shape: config.memory_shape(plan),
        weight_bytes,
        dtype_bytes: 2,
        prefill_chunk: DEFAULT_PREFILL_CHUNK as u64,
    }
}

// --- config_plan ------------------------------------------------------------------------

/// Each saved config_plan input, the key its error must name, and a part of the message.
const CONFIG_REGRESSIONS: [(&str, &str, &str); 5] = [
    // Found by the fuzzer: head_dim = u64::MAX overflowed `heads * head_dim` while listing
    // the tensors (model/gemma4/weights.rs) for the weight estimate.
    (
        "head-dim-overflow",
        "head_dim",
        "num_attention_heads × head_dim = 16 × 18446744073709551615 exceeds 2147483647",
    ),
    // Found by hand while checking the first fuzz run: hidden_size = 2^62 overflowed the
    // weight estimate (memory.rs) after validating.
    (
        "hidden-size-overflow",
        "hidden_size",
        "hidden_size = 4611686018427387904 exceeds 2147483647",
    ),
    // Found by the fuzzer: the same overflow in the Llama tensor list
    // (model/llama/weights.rs), head_dim = 2^62.
    (
        "llama-head-dim-overflow",
        "head_dim",
        "num_attention_heads × head_dim = 16 × 4611686018427387904 exceeds",
    ),
    // Found by the fuzzer: num_hidden_layers = 2^63 in a Llama config (which lists no
    // layers) sized the plan's layer table: capacity overflow (smaller values: out of
    // memory).
    (
        "llama-layer-count",
        "num_hidden_layers",
        "9223372036854775808 layers; at most 4096",
    ),
    // Found by the fuzzer's round trip: original_max_position_embeddings = 0.5
    // validated, was written back as 0 (`as u64`), which does not.
    (
        "llama-rope-positions-fraction",
        "rope_scaling.original_max_position_embeddings",
        "must be a whole number of positions",
    ),
];

#[test]
fn every_saved_config_plan_input_is_refused_naming_its_key() {
    let saved = inputs("regressions/config_plan");
    assert_eq!(
        saved.len(),
        CONFIG_REGRESSIONS.len(),
        "every saved input has an expectation"
    );
    for (name, key, what) in CONFIG_REGRESSIONS {
        let data = &saved.iter().find(|(n, _)| n == name).expect(name).1;
        let text = std::str::from_utf8(split(data)[0]).unwrap();
        let (got_key, message) = config_error(AnyConfig::from_json_str("config.json", text));
        assert_eq!(got_key, key, "{name}: {message}");
        assert!(message.contains(what), "{name}: {message}");
    }
}

#[test]
fn a_config_declares_at_most_max_layers() {
    let mut v = tiny_json();
    v["num_hidden_layers"] = json!(MAX_LAYERS + 1);
    let (key, message) = config_error(Gemma4Config::from_value("test.json", &v));
    assert_eq!(key, "num_hidden_layers", "{message}");
    let llama = json!({
        "model_type": "llama", "hidden_size": 8, "intermediate_size": 16,
        "num_attention_heads": 2, "rms_norm_eps": 1e-5, "vocab_size": 16,
        "num_hidden_layers": MAX_LAYERS,
    });
    let config = LlamaConfig::from_value("test.json", &llama).unwrap();
    let plan = runtime::model::llama::plan::resolve(&config, &KvLayout::float()).unwrap();
    assert_eq!(plan.num_caches(), MAX_LAYERS);
    let mut too_many = llama;
    too_many["num_hidden_layers"] = json!(MAX_LAYERS + 1);
    let (key, _) = config_error(LlamaConfig::from_value("test.json", &too_many));
    assert_eq!(key, "num_hidden_layers");
}

#[test]
fn dimensions_up_to_the_mlx_limit_validate_and_one_past_it_is_refused() {
    for (key, product) in [
        ("hidden_size", "hidden_size"),
        ("vocab_size", "vocab_size"),
        ("sliding_window", "sliding_window"),
        ("intermediate_size", "intermediate_size"),
        ("head_dim", "num_attention_heads × head_dim"),
        ("global_head_dim", "num_attention_heads × global_head_dim"),
    ] {
        let mut v = tiny_json();
        // Two attention heads: the largest head dim that fits is MAX_DIM / 2 (rounded down
        // to a multiple of 8 so that the full layers' quarter rotation stays even).
        let (at_limit, one_past) = if key.ends_with("head_dim") {
            (MAX_DIM / 2 / 8 * 8, MAX_DIM / 2 + 1)
        } else {
            (MAX_DIM, MAX_DIM + 1)
        };
        v[key] = json!(at_limit);
        Gemma4Config::from_value("test.json", &v)
            .unwrap_or_else(|e| panic!("{key} = {at_limit} is valid: {e}"));
        v[key] = json!(one_past);
        let (got, message) = config_error(Gemma4Config::from_value("test.json", &v));
        assert_eq!(got, key, "{message}");
        assert!(message.contains(product), "{message}");
    }
    // Products of keys: layers × per-layer-input width, and the double-wide MLP.
    let mut v = tiny_json();
    v["hidden_size_per_layer_input"] = json!(MAX_DIM / 2 + 1);
    v["vocab_size_per_layer_input"] = json!(16);
    let (key, message) = config_error(Gemma4Config::from_value("test.json", &v));
    assert_eq!(key, "hidden_size_per_layer_input", "{message}");
    assert!(message.contains("num_hidden_layers × hidden_size_per_layer_input"));
    let mut v = tiny_json();
    v["num_kv_shared_layers"] = json!(1);
    v["layer_types"] = json!(["full_attention", "full_attention"]);
    v["use_double_wide_mlp"] = json!(true);
    v["intermediate_size"] = json!(MAX_DIM / 2 + 1);
    let (key, message) = config_error(Gemma4Config::from_value("test.json", &v));
    assert_eq!(key, "intermediate_size", "{message}");
    assert!(message.contains("use_double_wide_mlp"), "{message}");
}

#[test]
fn a_memory_plan_too_large_for_u64_bytes_saturates_and_does_not_fit() {
    // Every dimension at the limit, with the largest expert block: valid, and far more
    // bytes than a u64 counts.
    let mut v = tiny_json();
    v["hidden_size"] = json!(MAX_DIM);
    v["vocab_size"] = json!(MAX_DIM);
    v["intermediate_size"] = json!(MAX_DIM);
    v["enable_moe_block"] = json!(true);
    v["num_experts"] = json!(MAX_DIM);
    v["top_k_experts"] = json!(MAX_DIM);
    v["moe_intermediate_size"] = json!(MAX_DIM / 2);
    let config = Gemma4Config::from_value("test.json", &v).unwrap();
    let plan = runtime::model::gemma4::plan::resolve(
        &config,
        &KvLayout::float(),
        &WeightFacts::all_scalars(2),
    )
    .unwrap();
    for quant in [
        None,
        Some(QuantSpec {
            bits: 4,
            group_size: 64,
        }),
    ] {
        assert_eq!(config.estimate_weight_bytes(quant, 2), u64::MAX);
    }
    let model = memory(&config, &plan, u64::MAX);
    let p = model.plan(u64::MAX, u64::MAX, 24_000_000_000);
    assert_eq!(p.total, u64::MAX);
    assert!(!p.fits);
    assert_eq!(p.max_context, 0);

    // The tiny model at an absurd context and batch: the KV and transient bytes saturate.
    let tiny = tiny_config();
    let plan = runtime::model::gemma4::plan::resolve(
        &tiny,
        &KvLayout::float(),
        &WeightFacts::all_scalars(2),
    )
    .unwrap();
    let model = memory(&tiny, &plan, tiny.estimate_weight_bytes(None, 2));
    let p = model.plan(u64::MAX, u64::MAX, 24_000_000_000);
    assert!(!p.fits && p.kv == u64::MAX, "{p:?}");
    // ... while a sane request is unchanged by the saturation: one batch row of 4096
    // tokens of the tiny model fits easily.
    assert!(model.plan(4096, 1, 24_000_000_000).fits);
}

#[test]
fn bit_widths_and_group_sizes_past_u32_are_refused_not_truncated() {
    // 2^32 + 4 used to be read `as u32`, i.e. as 4 bits: accepted as a valid layout.
    let (key, message) = config_error(KvLayout::from_json_str(
        "kv_config.json",
        r#"[{"layer_idx": 0, "bits": 4294967300, "group_size": 64}]"#,
    ));
    assert_eq!(key, "[0].bits", "{message}");
    let (key, _) = config_error(KvLayout::from_json_str(
        "kv_config.json",
        r#"[{"layer_idx": 0, "bits": 4, "group_size": 4294967360}]"#,
    ));
    assert_eq!(key, "[0].group_size");
    for (block, key) in [
        (
            json!({"bits": 4294967300u64, "group_size": 64}),
            "quantization.bits",
        ),
        (
            json!({"bits": 4, "group_size": 4294967360u64}),
            "quantization.group_size",
        ),
        (
            json!({"bits": 4, "group_size": 64, "layers.0.mlp.up_proj": {"bits": 4294967304u64}}),
            "quantization.layers.0.mlp.up_proj.bits",
        ),
    ] {
        let mut v = tiny_json();
        v["quantization"] = block;
        let (got, message) = config_error(Gemma4Config::from_value("test.json", &v));
        assert_eq!(got, key, "{message}");
    }
}

#[test]
fn the_config_plan_seeds_validate_and_resolve() {
    let seeds = inputs("corpus/config_plan");
    assert!(seeds.len() >= 5);
    for (name, data) in seeds {
        let parts = split(&data);
        let config =
            AnyConfig::from_json_str(&name, std::str::from_utf8(parts[0]).unwrap()).unwrap();
        let kv = match parts.get(1) {
            Some(p) => KvLayout::from_json_str(&name, std::str::from_utf8(p).unwrap()).unwrap(),
            None => KvLayout::float(),
        };
        let plan = config.resolve(&kv, runtime::family::WeightFacts::AsShipped);
        plan.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

// --- safetensors ------------------------------------------------------------------------

/// The loader's checks of a catalog against the tiny config, as the fuzz target makes them.
fn check_tiny(catalog: &Catalog) -> Result<(), Error> {
    let config = tiny_config();
    let mut expect = Expect::new(catalog, None);
    for (name, role) in canonical_tensors(&config) {
        match role {
            TensorRole::Module { lead, out, inp } => {
                expect.module(&name, &lead, out, inp)?;
            }
            TensorRole::Norm(d) | TensorRole::Vector(d) => expect.float(&name, &[d])?,
            TensorRole::LayerScalar if expect.has(&name) => expect.float(&name, &[1])?,
            TensorRole::LayerScalar => {}
        }
    }
    Ok(())
}

/// A catalog of one fuzz input: index (empty: none), then one file per shard.
fn catalog_of(data: &[u8]) -> Result<Catalog, Error> {
    let parts = split(data);
    let index = match parts[0] {
        [] => None,
        text => Some(parse_index(
            "index.json",
            std::str::from_utf8(text).unwrap(),
        )?),
    };
    let dir = Path::new("/fuzz/model");
    let shards = parts.len() - 1;
    let headers = parts[1..]
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let file = dir.join(format!("model-{:05}-of-{shards:05}.safetensors", i + 1));
            Header::from_bytes(&file.display().to_string(), bytes).map(|h| (file, h))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Catalog::from_headers(dir, headers, index)
}

#[test]
fn the_safetensors_seeds_pass_the_loader_checks() {
    let seeds = inputs("corpus/safetensors");
    assert!(seeds.len() >= 2);
    for (name, data) in seeds {
        let catalog = catalog_of(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        match (name.as_str(), check_tiny(&catalog)) {
            // Its gate_proj is quantized with in_dims 8, which no group size divides.
            ("quantized-module", Err(e)) => {
                assert!(e.to_string().contains("layers.0.mlp.gate_proj"), "{e}")
            }
            (_, result) => result.unwrap_or_else(|e| panic!("{name}: {e}")),
        }
    }
}

/// A whole safetensors file: the header JSON (padded), then `data_len` zero bytes.
fn file(header: Value, data_len: usize) -> Vec<u8> {
    let mut text = serde_json::to_vec(&header).unwrap();
    text.resize(text.len().div_ceil(8) * 8, b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(vec![0u8; data_len]);
    out
}

fn weights_error(bytes: &[u8]) -> (String, String) {
    match Header::from_bytes("f.safetensors", bytes) {
        Err(Error::Weights {
            file,
            tensor,
            message,
        }) => {
            assert_eq!(file, "f.safetensors");
            (tensor, message)
        }
        other => panic!("expected a weights error, got {other:?}"),
    }
}

#[test]
fn safetensors_bytes_that_lie_are_refused_naming_the_tensor() {
    let ok = file(
        json!({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}),
        16,
    );
    assert_eq!(
        Header::from_bytes("f.safetensors", &ok)
            .unwrap()
            .tensors
            .len(),
        1
    );

    // Offsets past the end of the data.
    let (t, m) = weights_error(&file(
        json!({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}),
        8,
    ));
    assert_eq!(t, "a");
    assert!(m.contains("data section holds 8 bytes"), "{m}");
    // Overlapping tensors.
    let (t, m) = weights_error(&file(
        json!({
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
        }),
        12,
    ));
    assert_eq!(t, "b");
    assert!(m.contains("overlap tensor `a`"), "{m}");
    // An absurd shape: its element count overflows, and nothing is allocated for it.
    let (t, m) = weights_error(&file(
        json!({"a": {"dtype": "F32", "shape": [u64::MAX, u64::MAX], "data_offsets": [0, 0]}}),
        0,
    ));
    assert_eq!(t, "a");
    assert!(m.contains("too large"), "{m}");
    // A dimension MLX cannot index, with a byte length that agrees.
    let (t, m) = weights_error(&file(
        json!({"a": {"dtype": "U8", "shape": [1u64 << 31, 0], "data_offsets": [0, 0]}}),
        0,
    ));
    assert_eq!(t, "a");
    assert!(m.contains("exceeds what MLX indexes"), "{m}");
    // dtype × shape disagreeing with the byte range.
    let (t, m) = weights_error(&file(
        json!({"a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}}),
        16,
    ));
    assert_eq!(t, "a");
    assert!(m.contains("needs 8 bytes but data_offsets give 16"), "{m}");
    // An unknown dtype, and offsets that run backwards.
    let (_, m) = weights_error(&file(
        json!({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}),
        1,
    ));
    assert!(m.contains("unknown dtype"), "{m}");
    let (_, m) = weights_error(&file(
        json!({"a": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}),
        4,
    ));
    assert!(m.contains("run backwards"), "{m}");
    // The length prefix: missing, past the end, over the format's limit.
    let (t, m) = weights_error(&[1, 2, 3]);
    assert_eq!(t, "(header)");
    assert!(m.contains("too short"), "{m}");
    let (_, m) = weights_error(&64u64.to_le_bytes());
    assert!(m.contains("runs past the end"), "{m}");
    let (_, m) = weights_error(&u64::MAX.to_le_bytes());
    assert!(m.contains("exceeds the 100000000-byte limit"), "{m}");
}

#[test]
fn an_index_naming_other_files_or_leaving_the_folder_is_refused() {
    let shard = file(
        json!({"model.norm.weight": {"dtype": "BF16", "shape": [8], "data_offsets": [0, 16]}}),
        16,
    );
    let join = |index: &str| [index.as_bytes(), SEPARATOR, &shard].concat();
    let ok = join(r#"{"weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors"}}"#);
    assert!(catalog_of(&ok).unwrap().contains("norm.weight"));

    let err = catalog_of(&join(
        r#"{"weight_map": {"model.norm.weight": "other.safetensors"}}"#,
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("model.norm.weight") && err.contains("listed in other.safetensors"));
    let err = catalog_of(&join(
        r#"{"weight_map": {"model.lm_head.weight": "model-00001-of-00001.safetensors"}}"#,
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("missing from the file's header"), "{err}");
    for escape in ["../x.safetensors", "/etc/x.safetensors"] {
        let text = format!(r#"{{"weight_map": {{"model.norm.weight": "{escape}"}}}}"#);
        let (key, _) = config_error(parse_index("index.json", &text));
        assert_eq!(key, "weight_map.model.norm.weight");
    }
    let (key, _) = config_error(parse_index("index.json", r#"{"metadata": {}}"#));
    assert_eq!(key, "weight_map");
}
