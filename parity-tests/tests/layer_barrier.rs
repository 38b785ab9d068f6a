//! The layer barrier (an evaluation at the end of every layer of a prefill, on by default
//! on CUDA for models with MoE layers, `runtime::model::barrier`) changes when work runs,
//! never what it computes: with it forced on here, the monolith and the generated code
//! give the bytes the monolith gives without it. And each model takes the barrier its
//! layers call for.

use parity_tests::gate;
use runtime::kv_policy;
use runtime::mlx_rs::{Array, Dtype};
use runtime::model::barrier::Barrier;
use runtime::model::{LanguageModel, Loaded};
use runtime::options::ExecOptions;
use runtime::quantization::QuantSpec;
use runtime::synth::SynthOptions;

fn monolith(model: &Loaded) -> Box<dyn LanguageModel> {
    model.monolith()
}

/// Logits of a float-cache prefill, then (caches converted per the layout) a prefill
/// across the window and two single-token steps.
fn run(lm: &dyn LanguageModel, model: &Loaded, ids: &[u32], window: usize) -> Vec<Vec<u32>> {
    let layout = model.as_ref().kv_layout().clone();
    let mut caches = model.as_ref().float_caches(1);
    let cuts = [0, 5, 5 + window + 3, 5 + window + 4, 5 + window + 5];
    let mut out = Vec::new();
    for (i, w) in cuts.windows(2).enumerate() {
        if i == 1 {
            kv_policy::apply(&mut caches, &layout).unwrap();
        }
        let t: Vec<i32> = ids[w[0]..w[1]].iter().map(|&t| t as i32).collect();
        let tokens = Array::from_slice(&t, &[1, t.len() as i32]);
        let logits = lm.forward(&tokens, &mut caches).unwrap();
        out.push(gate::logit_bits(&logits).unwrap());
    }
    out
}

#[test]
fn the_layer_barrier_leaves_every_byte_alone() {
    let wanted = [
        "gemma4-e4b-generated",
        "gemma4-26b-a4b-generated",
        "llama-3.2-1b-generated",
    ];
    let imps: Vec<_> = generated::implementations()
        .into_iter()
        .filter(|i| wanted.contains(&i.id))
        .collect();
    assert_eq!(imps.len(), wanted.len(), "all three are registered");
    for imp in imps {
        let (preset, layout) = gate::preset_of(&imp).unwrap();
        let config = preset.twin();
        let window = config.sliding_window().unwrap_or(16);
        let quant = Some(QuantSpec {
            bits: 4,
            group_size: 64,
        });
        let (tensors, qmap) = config
            .random_tensors(SynthOptions { seed: 3, quant }, Dtype::Bfloat16)
            .unwrap();
        let config = config.with_quantization(qmap);
        let model =
            Loaded::from_tensors(config.clone(), layout, ExecOptions::default(), tensors).unwrap();
        let ids = gate::tokens(11, 5 + window + 5, config.vocab_size());
        // The same weights under each barrier.
        let with_barrier = |b: Barrier| {
            model.with_options(ExecOptions {
                barrier: Some(b),
                ..ExecOptions::default()
            })
        };
        let (off, both, layers_only) = (
            with_barrier(Barrier::Off),
            with_barrier(Barrier::LayersAndAttention),
            with_barrier(Barrier::Layers),
        );
        let without = run(monolith(&off).as_ref(), &off, &ids, window);
        let with = run(monolith(&both).as_ref(), &both, &ids, window);
        let generated = imp.construct_on(&both).unwrap();
        let fast = run(generated.as_ref(), &both, &ids, window);
        let generated_layers = imp.construct_on(&layers_only).unwrap();
        let layers = run(generated_layers.as_ref(), &layers_only, &ids, window);

        assert_eq!(without.len(), 4);
        assert!(
            without[1].len() > config.vocab_size(),
            "a multi-token prefill"
        );
        assert_eq!(without, with, "{}: the monolith with the barrier", imp.id);
        assert_eq!(without, fast, "{}: generated with the barrier", imp.id);
        assert_eq!(without, layers, "{}: generated, layer barrier only", imp.id);
        // Each ran once: the float prefill falls back, the three converted-cache steps
        // take the fast path.
        for g in [&generated, &generated_layers] {
            assert!(
                g.fast_path_calls() >= 3,
                "{}: the generated code ran the converted-cache steps",
                imp.id
            );
        }
    }
}

/// The barrier each model takes by default: none for dense models on any device; for a
/// model with MoE layers, layer ends and attention on CUDA (where MLX does not repeat its
/// bytes over one large MoE graph) and none elsewhere. A barrier in the options wins.
#[test]
fn the_barrier_is_the_models_choice_unless_set() {
    let on_moe = if runtime::backend::cuda_default() {
        Barrier::LayersAndAttention
    } else {
        Barrier::Off
    };
    let cases = [
        ("gemma4-e4b-generated", false, Barrier::Off),
        ("gemma4-26b-a4b-generated", true, on_moe),
        ("llama-3.2-1b-generated", false, Barrier::Off),
    ];
    for (id, moe, expected) in cases {
        let imp = generated::implementations()
            .into_iter()
            .find(|i| i.id == id)
            .unwrap_or_else(|| panic!("{id} is registered"));
        let (preset, layout) = gate::preset_of(&imp).unwrap();
        let config = preset.twin();
        let (tensors, qmap) = config
            .random_tensors(
                SynthOptions {
                    seed: 3,
                    quant: None,
                },
                Dtype::Bfloat16,
            )
            .unwrap();
        let config = config.with_quantization(qmap);
        let model = Loaded::from_tensors(config, layout, ExecOptions::default(), tensors).unwrap();
        assert_eq!(model.plan().has_moe(), moe, "{id}: MoE layers in the plan");
        assert_eq!(
            model.as_ref().barrier(),
            expected,
            "{id}: the default barrier"
        );
        let forced = model
            .with_options(ExecOptions {
                barrier: Some(Barrier::Layers),
                ..ExecOptions::default()
            })
            .barrier();
        assert_eq!(forced, Barrier::Layers, "{id}: a barrier set by hand");
    }
}
