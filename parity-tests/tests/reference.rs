//! Reference parity: the monolith against mlx-lm 0.32.0 on MLX 0.32.2 (CPU), an
//! implementation nobody here wrote, loading the same saved twin folders. Logits of a
//! prompt longer than the sliding window, then single-token decode steps across the ring
//! wrap, compared byte for byte.
//!
//! Float caches compare with mlx-lm itself; quantized caches (the presets' mixed 4/8-bit
//! kv_config.json) compare with mlx-optiq 0.7.7's caches and SDPA dispatch, which
//! mlx-lm alone cannot run on Gemma 4 (gemma4.md §9 pitfalls 1 and 2).

use std::path::{Path, PathBuf};

use mlx_rs::Dtype;
use parity_tests::reference::{KvMode, LogitsRequest, python_env};
use runtime::generate::logits_walk;
use runtime::kv_layout::KvLayout;
use runtime::model::Loaded;
use runtime::model::gemma4::Gemma4Config;
use runtime::model::gemma4::synth;
use runtime::options::ExecOptions;
use runtime::quantization::QuantSpec;
use runtime::synth::SynthOptions;

/// Twin window is 16: the prompt crosses it, the decode steps wrap the ring.
const PROMPT: usize = 20;
const STEPS: usize = 20;

fn preset_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../generated/models")
        .join(name)
}

fn tokens(seed: u32, n: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % 512
        })
        .collect()
}

/// Writes the twin of `preset` into a scratch folder (with the preset's kv_config.json).
fn twin_folder(preset: &str, quant: Option<QuantSpec>, dtype: Dtype) -> PathBuf {
    let config =
        synth::twin(&Gemma4Config::from_file(&preset_dir(preset).join("config.json")).unwrap());
    let (tensors, qmap) =
        synth::random_tensors_as(&config, SynthOptions { seed: 2026, quant }, dtype).unwrap();
    let tag = format!(
        "{preset}-{}-{dtype:?}",
        quant.map_or("float".to_owned(), |q| format!("q{}", q.bits))
    );
    let dir = std::env::temp_dir().join(format!("mlx-aot-reference-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    synth::write_folder(&dir, &config, &tensors, qmap.as_ref()).unwrap();
    let kv = preset_dir(preset).join("kv_config.json");
    if kv.exists() {
        std::fs::copy(&kv, dir.join("kv_config.json")).unwrap();
    }
    dir
}

/// Our logits for `rows` on the folder `dir`, loaded through the real loader.
fn ours(dir: &Path, rows: &[Vec<u32>], kv: &KvLayout) -> Vec<f32> {
    let loaded = Loaded::load(dir, kv.clone(), ExecOptions::default(), |_, _| {}).unwrap();
    let m = loaded.monolith();
    let mut caches = loaded.float_caches(rows.len());
    let logits = logits_walk(m.as_ref(), &mut caches, rows, PROMPT, kv).unwrap();
    logits.eval().unwrap();
    logits
        .flatten(None, None)
        .unwrap()
        .as_slice::<f32>()
        .to_vec()
}

/// Compares bit patterns; on a difference, reports where and how large.
fn assert_bits_equal(what: &str, ours: &[f32], theirs: &[f32], vocab: usize) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths differ");
    let diff = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a.to_bits() != b.to_bits());
    if let Some(i) = diff {
        let max = ours
            .iter()
            .zip(theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        panic!(
            "{what}: first difference at position {} token {} (ours {} vs mlx-lm {}), max |diff| {max}",
            i / vocab,
            i % vocab,
            ours[i],
            theirs[i]
        );
    }
}

fn check(preset: &str, quant: Option<QuantSpec>, dtype: Dtype) {
    let env = python_env().expect("the Python reference environment");
    let dir = twin_folder(preset, quant, dtype);
    let rows = vec![tokens(preset.len() as u32, PROMPT + STEPS)];
    let what = format!(
        "{preset} {} {dtype:?} weights",
        quant.map_or("float".into(), |q| q.to_string())
    );

    let theirs = env
        .run_logits(&LogitsRequest::new(&dir, rows.clone(), PROMPT).kv(KvMode::Float))
        .unwrap();
    assert_eq!(theirs.shape, [1, PROMPT + STEPS, 512]);
    assert_bits_equal(
        &format!("{what}, float caches"),
        &ours(&dir, &rows, &KvLayout::float()),
        &theirs.data,
        512,
    );

    let kv_path = dir.join("kv_config.json");
    if kv_path.exists() {
        let layout = KvLayout::from_file(&kv_path).unwrap();
        let theirs = env
            .run_logits(&LogitsRequest::new(&dir, rows.clone(), PROMPT).kv(KvMode::Config))
            .unwrap();
        assert_bits_equal(
            &format!("{what}, kv_config caches"),
            &ours(&dir, &rows, &layout),
            &theirs.data,
            512,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const Q4: Option<QuantSpec> = Some(QuantSpec {
    bits: 4,
    group_size: 64,
});

#[test]
fn e2b_matches_mlx_lm() {
    check("gemma4-e2b", None, Dtype::Bfloat16);
    check("gemma4-e2b", Q4, Dtype::Bfloat16);
}

#[test]
fn e4b_matches_mlx_lm() {
    check("gemma4-e4b", None, Dtype::Bfloat16);
    check("gemma4-e4b", Q4, Dtype::Bfloat16);
}

#[test]
fn g12b_matches_mlx_lm() {
    check("gemma4-12b", None, Dtype::Bfloat16);
    check("gemma4-12b", Q4, Dtype::Bfloat16);
}

#[test]
fn g26b_a4b_matches_mlx_lm() {
    // MLX's CPU gather_mm takes float32 only, so float experts run in float32 here.
    check("gemma4-26b-a4b", None, Dtype::Float32);
    check("gemma4-26b-a4b", Q4, Dtype::Bfloat16);
}

#[test]
fn g31b_matches_mlx_lm() {
    check("gemma4-31b", None, Dtype::Bfloat16);
    check("gemma4-31b", Q4, Dtype::Bfloat16);
}

#[test]
fn batch_of_two_matches_mlx_lm() {
    let env = python_env().expect("the Python reference environment");
    let dir = twin_folder("gemma4-e4b", Q4, Dtype::Bfloat16);
    let rows = vec![tokens(1, PROMPT + 6), tokens(2, PROMPT + 6)];
    let layout = KvLayout::from_file(&dir.join("kv_config.json")).unwrap();
    let theirs = env
        .run_logits(&LogitsRequest::new(&dir, rows.clone(), PROMPT).kv(KvMode::Config))
        .unwrap();
    assert_eq!(theirs.shape, [2, PROMPT + 6, 512]);
    assert_bits_equal(
        "e4b batch 2, kv_config caches",
        &ours(&dir, &rows, &layout),
        &theirs.data,
        512,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// mlx-lm's own generation loop (`generate_step`: every prompt token but the last in
/// prefill chunks, then single-token steps, greedy over the log-probabilities) and ours
/// give the same tokens, the monolith and the generated fast path alike: a 20-token
/// prompt across the window in chunks of 7, then 24 tokens across the ring wrap, on the
/// e4b-float twin with 4-bit weights. Random weights make the stream chaotic, so one
/// differing logit bit anywhere would show as a different token.
#[test]
fn generation_matches_mlx_lm_token_for_token() {
    use runtime::generate::{Flow, GenerateOptions, generate};
    use runtime::model::{LanguageModel, Loaded};
    use runtime::sampling::Sampler;

    const MAX_TOKENS: usize = 24;
    const CHUNK: usize = 7;
    let env = python_env().expect("the Python reference environment");
    let dir = twin_folder("gemma4-e4b-float", Q4, Dtype::Bfloat16);
    let prompt = tokens(7, PROMPT);
    let csv: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let out = env
        .run_script(
            "mlx_lm_generate.py",
            [
                "--model".to_owned(),
                dir.display().to_string(),
                "--prompt".to_owned(),
                csv.join(","),
                "--max-tokens".to_owned(),
                MAX_TOKENS.to_string(),
                "--prefill-step".to_owned(),
                CHUNK.to_string(),
            ],
        )
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    let theirs: serde_json::Value = serde_json::from_str(line.lines().last().unwrap()).unwrap();
    let theirs: Vec<u32> = theirs["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(theirs.len(), MAX_TOKENS);

    let loaded = Loaded::load(&dir, KvLayout::float(), ExecOptions::default(), |_, _| {}).unwrap();
    let generated = generated::implementations()
        .into_iter()
        .find(|i| i.id == "gemma4-e4b-float-generated")
        .expect("the e4b-float generated implementation")
        .construct_on(&loaded)
        .unwrap();
    let monolith: Box<dyn LanguageModel> = loaded.monolith();
    for (name, imp) in [("monolith", monolith), ("generated", generated)] {
        let opts = GenerateOptions {
            max_tokens: MAX_TOKENS,
            sampler: Sampler::Greedy,
            stop_tokens: Vec::new(),
            prefill_chunk: CHUNK,
            kv_layout: KvLayout::float(),
            pipeline: runtime::generate::Pipeline::Ahead,
            memory_limit: None,
        };
        let mut caches = loaded.float_caches(1);
        let (ours, stats) = generate(imp.as_ref(), &mut caches, &prompt, &opts, |_| {
            Flow::Continue
        })
        .unwrap();
        assert_eq!(
            ours, theirs,
            "{name}: tokens differ from mlx-lm's generate_step"
        );
        if name == "generated" {
            assert!(
                stats.fast_path_calls as usize >= MAX_TOKENS,
                "the generated path ran only {} fast forwards",
                stats.fast_path_calls
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// The Llama family: llama.py (Llama 3 RoPE) and qwen3.py (q/k norm), float caches.

/// Writes the twin of a Llama-family `preset` into a scratch folder.
/// (Its head tied as the preset says, or untied.)
fn llama_twin_folder_with(preset: &str, quant: Option<QuantSpec>, tied: bool) -> PathBuf {
    let mut config = llama_twin(preset);
    config.tie_word_embeddings = tied;
    let tag = format!("{preset}{}", if tied { "-tied" } else { "-untied" });
    llama_folder(&tag, &config, quant)
}

/// The twin of the Llama-family `preset`.
fn llama_twin(preset: &str) -> runtime::model::llama::LlamaConfig {
    use runtime::model::llama::{LlamaConfig, synth as lsynth};
    lsynth::twin(&LlamaConfig::from_file(&preset_dir(preset).join("config.json")).unwrap())
}

/// Writes `config` with seeded random weights (`quant` or float) into a scratch folder.
fn llama_folder(
    tag: &str,
    config: &runtime::model::llama::LlamaConfig,
    quant: Option<QuantSpec>,
) -> PathBuf {
    use runtime::model::llama::synth as lsynth;
    let (tensors, qmap) =
        lsynth::random_tensors_as(config, SynthOptions { seed: 2026, quant }, Dtype::Bfloat16)
            .unwrap();
    let tag = format!(
        "{tag}-{}",
        quant.map_or("float".to_owned(), |q| format!("q{}", q.bits))
    );
    let dir = std::env::temp_dir().join(format!("mlx-aot-reference-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    lsynth::write_folder(&dir, config, &tensors, qmap.as_ref()).unwrap();
    dir
}

/// Our Llama-family logits on float caches, SwiGLU compiled or not.
fn ours_llama(dir: &Path, rows: &[Vec<u32>], compiled_swiglu: bool) -> Vec<f32> {
    let options = ExecOptions {
        compiled_swiglu,
        ..ExecOptions::default()
    };
    let loaded = Loaded::load(dir, KvLayout::float(), options, |_, _| {}).unwrap();
    let m = loaded.monolith();
    let mut caches = loaded.float_caches(rows.len());
    let logits = logits_walk(m.as_ref(), &mut caches, rows, PROMPT, &KvLayout::float()).unwrap();
    logits.eval().unwrap();
    logits
        .flatten(None, None)
        .unwrap()
        .as_slice::<f32>()
        .to_vec()
}

/// Prefill `PROMPT` then `STEPS` decode steps, batch 2, float caches; SwiGLU compiled on
/// both sides, then op by op on both sides (`mx.disable_compile()` in the reference).
fn check_llama(preset: &str, quant: Option<QuantSpec>) {
    check_llama_with(preset, quant, llama_twin(preset).tie_word_embeddings)
}

fn check_llama_with(preset: &str, quant: Option<QuantSpec>, tied: bool) {
    let dir = llama_twin_folder_with(preset, quant, tied);
    let what = format!(
        "{preset}{}",
        if tied {
            " (tied head)"
        } else {
            " (untied head)"
        }
    );
    check_llama_folder(&what, &dir, preset.len() as u32, quant);
}

/// The monolith against mlx-lm on the model in `dir`, as [`check_llama`] describes.
fn check_llama_folder(what: &str, dir: &Path, seed: u32, quant: Option<QuantSpec>) {
    let env = python_env().expect("the Python reference environment");
    let rows = vec![
        tokens(seed, PROMPT + STEPS),
        tokens(seed + 1, PROMPT + STEPS),
    ];
    let name = what;
    for compiled in [true, false] {
        let what = format!(
            "{name} {} weights, float caches, swiglu {}",
            quant.map_or("float".into(), |q| q.to_string()),
            if compiled { "compiled" } else { "eager" }
        );
        let theirs = env
            .run_logits(
                &LogitsRequest::new(dir, rows.clone(), PROMPT)
                    .kv(KvMode::Float)
                    .no_compile(!compiled),
            )
            .unwrap();
        assert_eq!(theirs.shape, [2, PROMPT + STEPS, 512]);
        assert_bits_equal(&what, &ours_llama(dir, &rows, compiled), &theirs.data, 512);
        eprintln!(
            "{what}: bit-exact over {} positions x 2 rows",
            PROMPT + STEPS
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn llama_3_2_1b_matches_mlx_lm() {
    check_llama("llama-3.2-1b", None);
    check_llama("llama-3.2-1b", Q4);
}

#[test]
fn qwen3_0_6b_matches_mlx_lm() {
    check_llama("qwen3-0.6b", None);
    check_llama("qwen3-0.6b", Q4);
}

#[test]
fn llama_untied_head_matches_mlx_lm() {
    // Both presets tie the head; an untied twin checks `lm_head` (float and 4-bit).
    check_llama_with("llama-3.2-1b", None, false);
    check_llama_with("qwen3-0.6b", Q4, false);
}

// MiniCPM (minicpm.py): scaled embedding, residual branches and head input; LongRoPE.

#[test]
fn minicpm4_8b_matches_mlx_lm() {
    // LongRoPE with max_position_embeddings equal to the original: input scale 1.
    check_llama("minicpm4-8b", None);
    check_llama("minicpm4-8b", Q4);
}

#[test]
fn minicpm_longrope_past_the_original_context_matches_mlx_lm() {
    use runtime::model::llama::LlamaRope;
    // max_position_embeddings 4x the original (OpenBMB's 128K setting): SuScaledRoPE
    // scales its input by sqrt(1 + ln 4 / ln 32768).
    let mut config = llama_twin("minicpm4-8b");
    config.max_position_embeddings = Some(131072);
    let LlamaRope::LongRope { scaling, .. } = &mut config.rope else {
        panic!("minicpm4-8b's preset is LongRoPE: {:?}", config.rope)
    };
    scaling.max_position_embeddings = 131072.0;
    assert!(scaling.mscale() > 1.0, "{}", scaling.mscale());
    for quant in [None, Q4] {
        let dir = llama_folder("minicpm4-8b-128k", &config, quant);
        check_llama_folder("minicpm4-8b at 128K positions", &dir, 77, quant);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn linear_rope_matches_mlx_lm() {
    use runtime::model::llama::LlamaRope;
    // rope_scaling {"rope_type": "linear", "factor": 4}: nn.RoPE with scale 1/4, on the
    // MiniCPM twin (scaled residuals) and on a Llama twin.
    for preset in ["minicpm-2b", "llama-3.2-1b"] {
        let mut config = llama_twin(preset);
        let theta = config.rope.theta();
        config.rope = LlamaRope::Linear { theta, factor: 4.0 };
        for quant in [None, Q4] {
            let dir = llama_folder(&format!("{preset}-linear"), &config, quant);
            let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
            assert!(text.contains("\"linear\""), "{text}");
            check_llama_folder(&format!("{preset} with linear RoPE"), &dir, 31, quant);
        }
    }
}

#[test]
fn minicpm_2b_matches_mlx_lm() {
    // Default RoPE, no GQA (36 kv heads of 36).
    check_llama("minicpm-2b", None);
    check_llama("minicpm-2b", Q4);
}

// The MLA family (deepseek_v32.py / glm_moe_dsa.py): latent attention with the DSA
// indexer, grouped sigmoid routing; float caches (mlx-lm's CacheList of KVCaches).

/// Writes the twin of an MLA-family `preset` (`index_topk` 16) into a scratch folder.
fn mla_folder(preset: &str, quant: Option<QuantSpec>, dtype: Dtype) -> PathBuf {
    use runtime::model::mla::{MlaConfig, synth as msynth};
    let config =
        msynth::twin(&MlaConfig::from_file(&preset_dir(preset).join("config.json")).unwrap());
    let (tensors, qmap) =
        msynth::random_tensors_as(&config, SynthOptions { seed: 2026, quant }, dtype).unwrap();
    let tag = format!(
        "{preset}-{}-{dtype:?}",
        quant.map_or("float".to_owned(), |q| format!("q{}", q.bits))
    );
    let dir = std::env::temp_dir().join(format!("mlx-aot-reference-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    msynth::write_folder(&dir, &config, &tensors, qmap.as_ref()).unwrap();
    dir
}

/// Our logits with `prompt` prefill positions then decode steps, compiled functions on
/// or off.
fn ours_walk(dir: &Path, rows: &[Vec<u32>], prompt: usize, compiled: bool) -> Vec<f32> {
    let options = ExecOptions {
        compiled_swiglu: compiled,
        ..ExecOptions::default()
    };
    let loaded = Loaded::load(dir, KvLayout::float(), options, |_, _| {}).unwrap();
    let m = loaded.monolith();
    let mut caches = loaded.float_caches(rows.len());
    let logits = logits_walk(m.as_ref(), &mut caches, rows, prompt, &KvLayout::float()).unwrap();
    logits.eval().unwrap();
    logits
        .flatten(None, None)
        .unwrap()
        .as_slice::<f32>()
        .to_vec()
}

/// The MLA monolith against mlx-lm on the twin of `preset` (`index_topk` 32), batch 2,
/// float and 4-bit weights, compiled functions (SwiGLU, the expert selection) on and off
/// on both sides; a 20-token prompt (the indexer inactive) then 16 decode steps across
/// the switch at 33 keys, and a 40-token prompt (active from the prefill on) then 4.
fn check_mla(preset: &str) {
    let env = python_env().expect("the Python reference environment");
    for (quant, dtype) in [(None, Dtype::Float32), (Q4, Dtype::Bfloat16)] {
        let dir = mla_folder(preset, quant, dtype);
        assert_eq!(runtime::model::mla::synth::TWIN_INDEX_TOPK, 32);
        for (prompt, steps) in [(20, 16), (40, 4)] {
            let rows = vec![
                tokens(preset.len() as u32, prompt + steps),
                tokens(preset.len() as u32 + 1, prompt + steps),
            ];
            for compiled in [true, false] {
                let what = format!(
                    "{preset} {} {dtype:?} weights, prompt {prompt} + {steps} steps, compiled {}",
                    quant.map_or("float".into(), |q| q.to_string()),
                    if compiled { "on" } else { "off" }
                );
                let theirs = env
                    .run_logits(
                        &LogitsRequest::new(&dir, rows.clone(), prompt)
                            .kv(KvMode::Float)
                            .no_compile(!compiled),
                    )
                    .unwrap();
                assert_eq!(theirs.shape, [2, prompt + steps, 512]);
                assert_bits_equal(
                    &what,
                    &ours_walk(&dir, &rows, prompt, compiled),
                    &theirs.data,
                    512,
                );
                eprintln!(
                    "{what}: bit-exact over {} positions x 2 rows",
                    prompt + steps
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn glm_5_matches_mlx_lm() {
    check_mla("glm-5");
}

#[test]
fn deepseek_v3_2_matches_mlx_lm() {
    check_mla("deepseek-v3.2");
}

/// One model mlx-lm itself made (`reference/make_mlx_lm_model.py`: the `Model` class
/// mlx-lm picks for `config`, its `quantize_model`, `save_model` and `save_config`), once
/// per entry of `variants` (a tag and the script's weight flags): loaded by our loader,
/// `rows` with `prompt` prefill positions then single-token decode steps on float
/// caches, compiled functions on and off on both sides, byte for byte with mlx-lm.
fn check_mlx_lm_made(
    name: &str,
    config: &serde_json::Value,
    variants: &[(&str, &[&str])],
    rows: &[Vec<u32>],
    prompt: usize,
) {
    let env = python_env().expect("the Python reference environment");
    let vocab = config["vocab_size"].as_u64().unwrap() as usize;
    let scratch =
        std::env::temp_dir().join(format!("mlx-aot-reference-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let config_file = scratch.join("config.json");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let rows: Vec<Vec<u32>> = rows
        .iter()
        .map(|r| r.iter().map(|t| t % vocab as u32).collect())
        .collect();
    for (tag, extra) in variants {
        let dir = scratch.join(tag);
        let mut args: Vec<std::ffi::OsString> = vec![
            "--config".into(),
            config_file.clone().into(),
            "--out".into(),
            dir.clone().into(),
            "--seed".into(),
            "3".into(),
        ];
        args.extend(extra.iter().map(Into::into));
        env.run_script("make_mlx_lm_model.py", &args).unwrap();
        for compiled in [true, false] {
            let what = format!("mlx-lm-made {name} {tag}, compiled {compiled}");
            let theirs = env
                .run_logits(
                    &LogitsRequest::new(&dir, rows.clone(), prompt)
                        .kv(KvMode::Float)
                        .no_compile(!compiled),
                )
                .unwrap();
            assert_eq!(theirs.shape, [rows.len(), rows[0].len(), vocab]);
            let ours = ours_walk(&dir, &rows, prompt, compiled);
            assert_bits_equal(&what, &ours, &theirs.data, vocab);
            eprintln!(
                "{what}: bit-exact over {} positions x {} rows",
                rows[0].len(),
                rows.len()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// An MLA model mlx-lm made, with a structure of its own that no preset has: dims that
/// are not powers of two (nope 24 against v 32, q_lora 40), every other layer routed past
/// the first, 3 groups of 2 experts keeping 2, no shared experts, weights not
/// normalized, YaRN with `mscale == mscale_all_dim != 1` (an attention scale, no input
/// scale); float32 weights, and 4-bit group-32 weights (float32 scales) where mlx-lm's
/// predicate quantizes (the rest stay float). Batch 2, 8 prefill + 12 decode positions
/// across `index_topk` 12.
#[test]
fn a_model_mlx_lm_made_with_a_structure_of_its_own_matches_mlx_lm() {
    let config = serde_json::json!({
        "model_type": "deepseek_v32", "vocab_size": 300, "hidden_size": 96,
        "num_hidden_layers": 5, "intermediate_size": 160, "moe_intermediate_size": 48,
        "num_attention_heads": 3, "num_key_value_heads": 3, "n_routed_experts": 6,
        "n_shared_experts": null, "num_experts_per_tok": 3, "n_group": 3, "topk_group": 2,
        "norm_topk_prob": false, "routed_scaling_factor": 1.5, "first_k_dense_replace": 1,
        "moe_layer_freq": 2, "kv_lora_rank": 48, "q_lora_rank": 40, "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 24, "v_head_dim": 32, "index_n_heads": 5, "index_head_dim": 32,
        "index_topk": 12, "rms_norm_eps": 1e-6, "rope_theta": 50000.0,
        "max_position_embeddings": 4096,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "mscale": 0.8, "mscale_all_dim": 0.8,
                         "original_max_position_embeddings": 1024, "beta_fast": 32,
                         "beta_slow": 1}
    });
    check_mlx_lm_made(
        "deepseek_v32",
        &config,
        &[
            ("f32", &["--dtype", "float32"]),
            // float32 here too: the expert projections mlx-lm leaves float (48 inputs, not
            // a multiple of 32) meet MLX's CPU gather_mm, which takes float32 only.
            (
                "q4",
                &["--bits", "4", "--group-size", "32", "--dtype", "float32"],
            ),
        ],
        &[tokens(5, 20), tokens(6, 20)],
        8,
    );
}

/// A Llama mlx-lm made with a structure of its own: head_dim 32 beside hidden 96 / 6
/// heads, one KV head for six, an untied head, Llama 3 RoPE scaling rotating adjacent
/// pairs (`rope_traditional`), an intermediate
/// size (136) that group 32 does not divide (mlx-lm leaves `down_proj` float); bf16, and
/// mlx-lm's mixed 3/6-bit recipe (3-bit embeddings and projections, 6-bit `v_proj` on
/// its chosen layers and the head: per-module entries in `quantization`).
#[test]
fn a_llama_mlx_lm_made_with_a_structure_of_its_own_matches_mlx_lm() {
    let config = serde_json::json!({
        "model_type": "llama", "vocab_size": 300, "hidden_size": 96, "num_hidden_layers": 5,
        "intermediate_size": 136, "num_attention_heads": 6, "num_key_value_heads": 1,
        "head_dim": 32, "rms_norm_eps": 1e-5, "rope_theta": 50000.0,
        "max_position_embeddings": 2048, "tie_word_embeddings": false,
        "rope_traditional": true,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    });
    check_mlx_lm_made(
        "llama",
        &config,
        &[
            ("bf16", &[]),
            (
                "mixed_3_6",
                &["--recipe", "mixed_3_6", "--group-size", "32"],
            ),
        ],
        &[tokens(7, 24), tokens(8, 24)],
        10,
    );
}

/// A Qwen3 mlx-lm made with a structure of its own: tied embeddings, head_dim 40 (q/k
/// norms over 40), 4 heads on 2 KV heads, YaRN (factor 4, so an input scale of
/// 1 + 0.1 ln 4) in `rope_parameters` nested as transformers 5 writes them; 8-bit group 64 where 64 divides the inputs (`o_proj`'s 160 does not: it
/// stays float), and mlx-lm's mixed 4/6-bit recipe at group 32.
#[test]
fn a_qwen3_mlx_lm_made_with_a_structure_of_its_own_matches_mlx_lm() {
    let config = serde_json::json!({
        "model_type": "qwen3", "vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 4,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 40, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
        "tie_word_embeddings": true,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                            "original_max_position_embeddings": 64}
    });
    check_mlx_lm_made(
        "qwen3",
        &config,
        &[
            ("q8", &["--bits", "8", "--group-size", "64"]),
            (
                "mixed_4_6",
                &["--recipe", "mixed_4_6", "--group-size", "32"],
            ),
        ],
        &[tokens(9, 22)],
        12,
    );
}

/// The text config of the Gemma 4 cases below.
fn gemma4_own_text_config() -> serde_json::Value {
    serde_json::json!({
        "model_type": "gemma4_text", "vocab_size": 384, "vocab_size_per_layer_input": 384,
        "hidden_size": 64, "num_hidden_layers": 6, "intermediate_size": 96,
        "num_attention_heads": 2, "num_key_value_heads": 2, "num_global_key_value_heads": 1,
        "head_dim": 32, "global_head_dim": 64, "num_kv_shared_layers": 2,
        "hidden_size_per_layer_input": 16, "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                        "sliding_attention", "full_attention", "sliding_attention"],
        "attention_k_eq_v": true, "max_position_embeddings": 4096,
        "use_double_wide_mlp": true, "final_logit_softcapping": 30.0,
        "enable_moe_block": false, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                               "partial_rotary_factor": 0.25}
        }
    })
}

/// A Gemma 4 mlx-lm made (`gemma4_text`) with a structure of its own: six layers laid
/// out sliding, full, sliding, sliding, full, sliding by `layer_types`, a window of 8
/// (the 16-token prompt and the decode steps wrap it), the last two layers sharing KV,
/// per-layer inputs of width 16, head dims 32 sliding / 64 full with two KV heads and
/// one global one, keys as values on full layers, the double-wide MLP on the sharing
/// layers; bf16, 4-bit group 32 and mlx-lm's mixed 3/6-bit recipe. Every key whose default differs between mlx-lm and
/// transformers is spelled out (our loader refuses a config that leaves one out, naming
/// the key: gemma4.md §1).
#[test]
fn a_gemma4_mlx_lm_made_with_a_structure_of_its_own_matches_mlx_lm() {
    let config = gemma4_own_text_config();
    check_mlx_lm_made(
        "gemma4_text",
        &config,
        &[
            ("bf16", &[]),
            ("q4", &["--bits", "4", "--group-size", "32"]),
            (
                "mixed_3_6",
                &["--recipe", "mixed_3_6", "--group-size", "32"],
            ),
        ],
        &[tokens(11, 28), tokens(12, 28)],
        16,
    );
}

/// The Gemma 4 above inside mlx-lm's multimodal wrapper (`gemma4`: the text config
/// nested in `text_config`, a top-level `vocab_size`, weights saved as
/// `language_model.model.*`), 4-bit group 64.
#[test]
fn a_gemma4_in_mlx_lm_s_wrapper_matches_mlx_lm() {
    let mut text = gemma4_own_text_config();
    text.as_object_mut().unwrap().remove("model_type");
    let config = serde_json::json!({
        "model_type": "gemma4", "vocab_size": 384, "text_config": text
    });
    check_mlx_lm_made(
        "gemma4_wrapped",
        &config,
        &[("q4", &["--bits", "4", "--group-size", "64"])],
        &[tokens(15, 26)],
        16,
    );
}

/// A Gemma 4 with MoE blocks mlx-lm made (`gemma4_text`): four layers (full, sliding,
/// sliding, full), 4 experts keeping 2 beside the dense MLP on every layer, no per-layer
/// inputs, no KV sharing, keys as values with one global KV head, no logit softcap, an
/// untied head; float32 (MLX's CPU `gather_mm` takes float32 only) and 4-bit group 32 in
/// bf16 (every expert projection quantized: `gather_qmm`).
#[test]
fn a_gemma4_moe_mlx_lm_made_with_a_structure_of_its_own_matches_mlx_lm() {
    let config = serde_json::json!({
        "model_type": "gemma4_text", "vocab_size": 256, "hidden_size": 64,
        "num_hidden_layers": 4, "intermediate_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_global_key_value_heads": 1, "head_dim": 16,
        "global_head_dim": 32, "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0,
        "sliding_window": 8, "attention_k_eq_v": true, "max_position_embeddings": 4096,
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                        "full_attention"],
        "use_double_wide_mlp": false, "final_logit_softcapping": null,
        "enable_moe_block": true, "num_experts": 4, "top_k_experts": 2,
        "moe_intermediate_size": 32, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                               "partial_rotary_factor": 0.5}
        }
    });
    check_mlx_lm_made(
        "gemma4_text_moe",
        &config,
        &[
            ("f32", &["--dtype", "float32"]),
            ("q4", &["--bits", "4", "--group-size", "32"]),
        ],
        &[tokens(13, 24), tokens(14, 24)],
        12,
    );
}

/// A MiniCPM mlx-lm made (`minicpm`) with scalings of its own (embeddings x 9, residuals
/// x 1.2 / sqrt(layers), the head input / (hidden / 32)), 3 heads on 1 KV head, LongRoPE
/// with per-pair factors past an original context of 16 (an input scale), and
/// `rope_traditional` set, which mlx-lm's LongRoPE ignores (it always rotates halves);
/// bf16 and 4-bit group 32.
#[test]
fn a_minicpm_mlx_lm_made_with_a_structure_of_its_own_matches_mlx_lm() {
    let pairs: Vec<f64> = (0..16).map(|i| 1.0 + i as f64 * 0.25).collect();
    let config = serde_json::json!({
        "model_type": "minicpm", "vocab_size": 288, "hidden_size": 96, "dim_model_base": 32,
        "num_hidden_layers": 3, "intermediate_size": 160, "num_attention_heads": 3,
        "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "scale_depth": 1.2, "scale_emb": 9,
        "max_position_embeddings": 64, "rope_theta": 10000.0, "rope_traditional": true,
        "tie_word_embeddings": false,
        "rope_scaling": {"rope_type": "longrope", "long_factor": pairs, "short_factor": pairs,
                         "original_max_position_embeddings": 16}
    });
    check_mlx_lm_made(
        "minicpm",
        &config,
        &[
            ("bf16", &[]),
            ("q4", &["--bits", "4", "--group-size", "32"]),
        ],
        &[tokens(17, 24), tokens(18, 24)],
        10,
    );
}
