//! Fault scenarios: each ends in a clear error or a correct fallback, never wrong numbers.

use std::path::Path;
use std::rc::Rc;

use parity_tests::gate;
use runtime::Error;
use runtime::kv_layout::KvLayout;
use runtime::kv_policy;
use runtime::mlx_rs::Array;
use runtime::model::gemma4::Gemma4;
use runtime::model::gemma4::monolith::Gemma4Monolith;
use runtime::model::gemma4::synth;
use runtime::model::gemma4::weights::{Gemma4Weights, weight_facts};
use runtime::model::{LanguageModel, Loaded};
use runtime::quantization::QuantSpec;
use runtime::registry::{ImplChoice, Implementation, Registry};
use runtime::synth::SynthOptions;
use runtime::weights::catalog::Catalog;

fn e4b() -> Implementation {
    generated::implementations()
        .into_iter()
        .find(|i| i.id == "gemma4-e4b-generated")
        .unwrap()
}

/// The e4b twin with its kv layout, in memory.
fn twin() -> Rc<Gemma4> {
    let (preset, layout) = gate::preset_of(&e4b()).unwrap();
    let preset = preset
        .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
        .expect("a Gemma 4 preset")
        .clone();
    let config = synth::twin(&preset);
    let (tensors, _) = synth::random_tensors(
        &config,
        SynthOptions {
            seed: 9,
            quant: None,
        },
    )
    .unwrap();
    Loaded::typed_from_tensors::<Gemma4>(config, layout, tensors).unwrap()
}

fn bits(a: &Array) -> Vec<u32> {
    gate::logit_bits(a).unwrap()
}

fn tokens(ids: &[i32]) -> Array {
    Array::from_slice(ids, &[1, ids.len() as i32])
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mlx-aot-faults-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn write_twin(dir: &Path) -> runtime::model::gemma4::Gemma4Config {
    let (preset, _) = gate::preset_of(&e4b()).unwrap();
    let preset = preset
        .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
        .expect("a Gemma 4 preset")
        .clone();
    let config = synth::twin(&preset);
    let (tensors, _) = synth::random_tensors(
        &config,
        SynthOptions {
            seed: 4,
            quant: None,
        },
    )
    .unwrap();
    synth::write_folder(dir, &config, &tensors, None).unwrap();
    config
}

#[test]
fn weights_truncated_while_loading_end_in_an_error() {
    let dir = scratch("truncated");
    let config = write_twin(&dir);
    // The headers are checked, then the file shrinks before the tensors are read.
    let catalog = Catalog::open(&dir).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("model.safetensors"))
        .unwrap();
    file.set_len(4096).unwrap();
    let err = Gemma4Weights::load(&config, &catalog, |_, _| {})
        .expect_err("a truncated file cannot load");
    assert!(matches!(err, Error::Weights { .. }), "{err}");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn weights_deleted_while_loading_end_in_an_error() {
    let dir = scratch("deleted");
    let config = write_twin(&dir);
    let catalog = Catalog::open(&dir).unwrap();
    let facts = weight_facts(&config, &catalog);
    assert!(facts.layer_scalar.iter().all(|&s| s));
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let err =
        Gemma4Weights::load(&config, &catalog, |_, _| {}).expect_err("a deleted file cannot load");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hand_edited_fingerprint_is_never_selected_and_never_wrong() {
    let model = twin();
    let mut edited = e4b();
    edited.id = "gemma4-e4b-edited";
    edited.fingerprint = "0123456789abcdef";
    let registry = Registry::new(vec![edited]).unwrap();
    // Auto does not pick it: the monolith runs.
    let auto = registry
        .select(Loaded::shared(model.clone()), &ImplChoice::Auto)
        .unwrap();
    assert_eq!(auto.implementation(), "gemma4-monolith");
    // Declaring it is refused.
    let err = registry
        .select(
            Loaded::shared(model.clone()),
            &ImplChoice::Declared(edited.id.into()),
        )
        .err()
        .unwrap();
    assert!(err.to_string().contains("refusing to fall back"), "{err}");
    // Built anyway over a plan it was not generated for, it only ever runs the monolith.
    let (preset, _) = gate::preset_of(&e4b()).unwrap();
    let mut preset = preset
        .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
        .expect("a Gemma 4 preset")
        .clone();
    preset.layer_types.swap(0, 5);
    let other = synth::twin(&preset);
    let (tensors, _) = synth::random_tensors(
        &other,
        SynthOptions {
            seed: 9,
            quant: None,
        },
    )
    .unwrap();
    let other = Loaded::typed_from_tensors::<Gemma4>(other, KvLayout::float(), tensors).unwrap();
    let generated = e4b().construct_on(&Loaded::shared(other.clone())).unwrap();
    let monolith = Gemma4Monolith::new(other.clone());
    let (mut a, mut b) = (other.float_caches(1), other.float_caches(1));
    let x = generated.forward(&tokens(&[1, 2, 3]), &mut a).unwrap();
    let y = monolith.forward(&tokens(&[1, 2, 3]), &mut b).unwrap();
    assert_eq!(bits(&x), bits(&y));
    assert_eq!(generated.fast_path_calls(), 0);
}

#[test]
fn a_declared_implementation_missing_from_the_registry_is_refused() {
    let registry = Registry::new(generated::implementations()).unwrap();
    let err = registry
        .select(
            Loaded::shared(twin()),
            &ImplChoice::Declared("gemma4-e9b-generated".into()),
        )
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("not registered") && msg.contains("refusing to fall back"),
        "{msg}"
    );
    let empty = Registry::new(Vec::new()).unwrap();
    let err = empty
        .select(Loaded::shared(twin()), &ImplChoice::Generated)
        .err()
        .unwrap();
    assert!(err.to_string().contains("refusing to fall back"), "{err}");
}

#[test]
fn a_kv_config_change_between_calls_falls_back_with_the_same_bits() {
    let model = twin();
    let generated = e4b().construct_on(&Loaded::shared(model.clone())).unwrap();
    let monolith = Gemma4Monolith::new(model.clone());
    let mut a = model.float_caches(1);
    monolith
        .forward(&tokens(&[5, 6, 7, 8, 9]), &mut a)
        .unwrap()
        .eval()
        .unwrap();
    // The caches are converted under another layout: every cache at 8 bits.
    let other = KvLayout::uniform(
        model.plan.num_caches(),
        QuantSpec {
            bits: 8,
            group_size: 64,
        },
    );
    kv_policy::apply(&mut a, &other).unwrap();
    let mut b = a.clone();
    // Applying the model's own layout afterwards converts nothing (already quantized).
    assert_eq!(kv_policy::apply(&mut b, &model.kv_layout).unwrap(), 0);
    let before = generated.fast_path_calls();
    let x = generated.forward(&tokens(&[10]), &mut b).unwrap();
    let y = monolith.forward(&tokens(&[10]), &mut a).unwrap();
    assert_eq!(
        generated.fast_path_calls(),
        before,
        "the guard refused the other signatures"
    );
    assert_eq!(bits(&x), bits(&y));
}
