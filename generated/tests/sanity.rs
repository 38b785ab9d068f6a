//! A quick check that every generated module computes what the monolith computes: on its
//! preset's shrunk twin (seeded random float weights), a float prefill (the guard falls
//! back, unless the module was generated for float caches), then decode steps on the
//! preset's kv layout through both on separate caches, logits compared bit for bit.
//! (The full parity gate lives in parity-tests.)

use runtime::cache::AnyCache;
use runtime::fingerprint::Fingerprint;
use runtime::kv_layout::KvLayout;
use runtime::mlx_rs::{Array, Dtype};
use runtime::model::{AnyConfig, Loaded};
use runtime::registry::Implementation;
use runtime::synth::SynthOptions;
use std::path::{Path, PathBuf};

const PREFILL: usize = 20;
const DECODE: usize = 3;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("generated/ lives in the repository root")
        .to_owned()
}

/// The twin of an implementation's preset, with the preset's kv layout (bf16 weights;
/// float32 for MoE models).
fn twin_model(imp: &Implementation) -> (Loaded, KvLayout) {
    let folder = repo_root().join(imp.source);
    let config = AnyConfig::from_file(&folder.join("config.json")).expect("preset config");
    let kv_path = folder.join("kv_config.json");
    let kv = if kv_path.exists() {
        KvLayout::from_file(&kv_path).expect("preset kv_config")
    } else {
        KvLayout::float()
    };
    let twin = config.twin();
    let opts = SynthOptions {
        seed: 1,
        quant: None,
    };
    let (mut tensors, _) = twin
        .random_tensors(opts, Dtype::Bfloat16)
        .expect("random tensors");
    if twin.has_moe() {
        // MLX's CPU `gather_mm` (the experts) only takes float32.
        for t in tensors.values_mut() {
            *t = t.as_dtype(Dtype::Float32).expect("cast to f32");
        }
    }
    let model =
        Loaded::from_tensors(twin, kv.clone(), Default::default(), tensors).expect("twin model");
    (model, kv)
}

fn tokens(ids: &[i32]) -> Array {
    Array::from_slice(ids, &[1, ids.len() as i32])
}

fn bits(logits: &Array) -> Vec<u32> {
    let f = logits.as_dtype(Dtype::Float32).expect("cast to f32");
    f.eval().expect("eval logits");
    f.as_slice::<f32>().iter().map(|x| x.to_bits()).collect()
}

fn check(imp: &Implementation) {
    let (model, kv) = twin_model(imp);
    assert_eq!(
        Fingerprint::of(model.plan()).short(),
        imp.fingerprint,
        "{}: the twin's plan does not have the generated fingerprint",
        imp.id
    );
    let generated = imp.construct_on(&model).unwrap();
    let monolith = model.monolith();
    assert_eq!(generated.implementation(), imp.id);

    // Prefill on float caches. The guard falls back to the monolith unless the module
    // was generated for float caches (a preset without kv_config.json).
    let vocab = model.as_ref().vocab_size() as i32;
    let prompt: Vec<i32> = (0..PREFILL as i32).map(|i| (i * 37 + 11) % vocab).collect();
    let mut generated_caches = model.as_ref().float_caches(1);
    let mut monolith_caches = model.as_ref().float_caches(1);
    let g = generated
        .forward(&tokens(&prompt), &mut generated_caches)
        .unwrap_or_else(|e| panic!("{}: generated prefill: {e}", imp.id));
    let m = monolith
        .forward(&tokens(&prompt), &mut monolith_caches)
        .unwrap_or_else(|e| panic!("{}: monolith prefill: {e}", imp.id));
    assert!(bits(&g) == bits(&m), "{}: prefill logits differ", imp.id);
    let prefill_fast = u64::from(kv.is_float());
    assert_eq!(
        generated.fast_path_calls(),
        prefill_fast,
        "{}: float prefill: fast path calls",
        imp.id
    );

    // The kv layout's caches, then decode through both on separate copies.
    let to_layout = |caches: Vec<AnyCache>| -> Vec<AnyCache> {
        caches
            .into_iter()
            .enumerate()
            .map(|(i, c)| match kv.get(i) {
                Some(q) => c.to_quantized(i, q).expect("quantize cache"),
                None => c,
            })
            .collect()
    };
    let mut generated_caches = to_layout(generated_caches);
    let mut monolith_caches = to_layout(monolith_caches);
    for step in 0..DECODE {
        let token = tokens(&[(step as i32 * 101 + 5) % vocab]);
        let g = generated
            .forward(&token, &mut generated_caches)
            .unwrap_or_else(|e| panic!("{}: generated decode step {step}: {e}", imp.id));
        let m = monolith
            .forward(&token, &mut monolith_caches)
            .unwrap_or_else(|e| panic!("{}: monolith decode step {step}: {e}", imp.id));
        assert_eq!(g.shape(), m.shape(), "{}: step {step} logits shape", imp.id);
        assert!(
            bits(&g) == bits(&m),
            "{}: decode step {step}: generated logits differ from the monolith's",
            imp.id
        );
    }
    assert_eq!(
        generated.fast_path_calls(),
        prefill_fast + DECODE as u64,
        "{}: the decode steps did not all take the fast path",
        imp.id
    );
}

#[test]
fn every_generated_model_computes_the_monolith_bits_on_its_twin() {
    let implementations = generated::implementations();
    assert!(!implementations.is_empty());
    for imp in &implementations {
        check(imp);
        eprintln!("{}: {} decode steps bit-identical", imp.id, DECODE);
    }
}

#[test]
fn the_registry_accepts_every_generated_model() {
    let registry = generated::registry().expect("unique ids");
    assert_eq!(
        registry.implementations().len(),
        generated::IMPLEMENTATIONS.len()
    );
}
