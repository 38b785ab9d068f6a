//! The fingerprint rule: whatever generated code bakes is fingerprinted (every structural
//! field moves it), whatever is read at run time is not (no dimension moves it), so a
//! shrunk twin has the real model's fingerprint.

mod common;

use generator::project::PRESETS;
use runtime::config::LayerType;
use runtime::fingerprint::Fingerprint;
use runtime::model::gemma4::Gemma4Config;
use runtime::model::gemma4::plan::WeightFacts;
use runtime::plan::{KvRole, ModelPlan};
use runtime::quantization::QuantSpec;
use runtime::signature::CacheSignature;

fn fp(plan: &ModelPlan) -> String {
    Fingerprint::of(plan).short()
}

/// Asserts that `mutate` applied to `plan` moves the fingerprint.
fn moves(what: &str, plan: &ModelPlan, mutate: impl FnOnce(&mut ModelPlan)) {
    let mut changed = plan.clone();
    mutate(&mut changed);
    assert_ne!(changed, *plan, "{what}: the mutation changed nothing");
    assert_ne!(
        fp(&changed),
        fp(plan),
        "{what} is baked but not fingerprinted"
    );
}

#[test]
fn every_structural_field_moves_the_fingerprint() {
    let e4b = common::preset("gemma4-e4b").plan;
    let q = |bits, group_size| QuantSpec { bits, group_size };

    moves("attention kind", &e4b, |p| {
        p.layers[0].attention = LayerType::Full
    });
    moves("kv role donor -> sharer", &e4b, |p| {
        p.layers[21].kv = KvRole::Sharer { donor: 16 }
    });
    moves("kv role sharer -> donor", &e4b, |p| {
        p.layers[30].kv = KvRole::Donor {
            cache: 30,
            exported: false,
        }
    });
    moves("a sharer's donor", &e4b, |p| {
        p.layers[30].kv = KvRole::Sharer { donor: 21 }
    });
    moves("a donor's cache index", &e4b, |p| {
        p.layers[3].kv = KvRole::Donor {
            cache: 4,
            exported: false,
        }
    });
    moves("exported", &e4b, |p| {
        p.layers[22].kv = KvRole::Donor {
            cache: 22,
            exported: false,
        }
    });
    moves("cache kind", &e4b, |p| {
        p.layers[0].cache = CacheSignature::Quant(q(4, 64))
    });
    moves("cache kind float", &e4b, |p| {
        p.layers[0].cache = CacheSignature::Rotating
    });
    moves("cache bits", &e4b, |p| {
        p.layers[0].cache = CacheSignature::RotatingQuant(q(8, 64))
    });
    moves("cache group size", &e4b, |p| {
        p.layers[0].cache = CacheSignature::RotatingQuant(q(4, 32))
    });
    moves("a sharer's cache signature", &e4b, |p| {
        p.layers[41].cache = CacheSignature::Quant(q(8, 64))
    });
    moves("k_eq_v", &e4b, |p| p.layers[5].flags.k_eq_v = true);
    moves("per_layer_input", &e4b, |p| {
        p.layers[7].flags.per_layer_input = false
    });
    moves("moe", &e4b, |p| p.layers[7].flags.moe = true);
    moves("layer_scalar", &e4b, |p| {
        p.layers[7].flags.layer_scalar = false
    });
    moves("double_wide_mlp", &e4b, |p| {
        p.layers[30].flags.double_wide_mlp = true
    });
    moves("layer count", &e4b, |p| {
        p.layers.pop();
    });
}

/// The plan of `config` with the preset's kv layout and every layer scalar.
fn resolve(config: &Gemma4Config, preset: &generator::ModelSource) -> ModelPlan {
    runtime::model::gemma4::plan::resolve(
        config,
        &preset.kv_layout,
        &WeightFacts::all_scalars(config.num_hidden_layers),
    )
    .expect("the mutated config resolves")
}

/// Asserts that `mutate` applied to the config of `preset` keeps the fingerprint.
fn keeps(what: &str, preset: &str, mutate: impl FnOnce(&mut Gemma4Config)) {
    let source = common::preset(preset);
    let original = source
        .config
        .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
        .expect("a Gemma 4 preset")
        .clone();
    let mut config = original.clone();
    mutate(&mut config);
    assert_ne!(config, original, "{what}: the mutation changed nothing");
    assert_eq!(
        fp(&resolve(&config, &source)),
        source.fingerprint().short(),
        "{what} is read at run time but moved the fingerprint"
    );
}

#[test]
fn no_dimension_moves_the_fingerprint() {
    keeps("hidden_size", "gemma4-e4b", |c| c.hidden_size = 1024);
    keeps("head_dim", "gemma4-e4b", |c| c.head_dim = 128);
    keeps("global_head_dim", "gemma4-e4b", |c| c.global_head_dim = 256);
    keeps("num_attention_heads", "gemma4-e4b", |c| {
        c.num_attention_heads = 16
    });
    keeps("num_key_value_heads", "gemma4-e4b", |c| {
        c.num_key_value_heads = 4
    });
    keeps("num_global_key_value_heads", "gemma4-26b-a4b", |c| {
        c.num_global_key_value_heads = c.num_global_key_value_heads.map(|n| n * 2)
    });
    keeps("vocab_size", "gemma4-e4b", |c| c.vocab_size = 1000);
    keeps("vocab_size_per_layer_input", "gemma4-e4b", |c| {
        c.vocab_size_per_layer_input = 1000
    });
    keeps("hidden_size_per_layer_input", "gemma4-e4b", |c| {
        c.hidden_size_per_layer_input = 128
    });
    keeps("sliding_window", "gemma4-e4b", |c| c.sliding_window = 1024);
    keeps("intermediate_size", "gemma4-e4b", |c| {
        c.intermediate_size = 4096
    });
    keeps("moe intermediate_size", "gemma4-26b-a4b", |c| {
        c.moe.as_mut().expect("moe").intermediate_size = 256
    });
    keeps("num_experts", "gemma4-26b-a4b", |c| {
        c.moe.as_mut().expect("moe").num_experts = 64
    });
    keeps("top_k_experts", "gemma4-26b-a4b", |c| {
        c.moe.as_mut().expect("moe").top_k = 2
    });
    keeps("max_position_embeddings", "gemma4-e4b", |c| {
        c.max_position_embeddings = Some(4096)
    });
    keeps("rms_norm_eps", "gemma4-e4b", |c| c.rms_norm_eps = 1e-5);
}

#[test]
fn the_twin_of_each_preset_has_its_fingerprint() {
    for name in PRESETS {
        let source = common::preset(name);
        // Through the family-neutral config: the twin every family makes.
        let twin = source.config.twin();
        assert_ne!(twin.hidden_size(), source.config.hidden_size());
        let plan = twin
            .resolve(&source.kv_layout, runtime::family::WeightFacts::AsShipped)
            .expect("the twin resolves");
        assert_eq!(
            fp(&plan),
            source.fingerprint().short(),
            "{name}: the shrunk twin's fingerprint differs"
        );
    }
}

#[test]
fn presets_have_distinct_fingerprints() {
    let mut seen: Vec<(String, &str)> = Vec::new();
    for name in PRESETS {
        let f = common::preset(name).fingerprint().short();
        assert_eq!(f.len(), 16);
        assert!(f.chars().all(|c| c.is_ascii_hexdigit()));
        if let Some((_, other)) = seen.iter().find(|(g, _)| *g == f) {
            panic!("{name} and {other} share fingerprint {f}");
        }
        seen.push((f, name));
    }
}
