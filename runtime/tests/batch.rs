//! Continuous batching on a llama-3.2-1b twin (4-bit weights, the preset's 8/4-bit KV
//! layout): a batch of one decodes exactly what a request alone does, and rows that
//! join and leave at different steps each get a well-formed token stream, compared with
//! their streams alone.

use std::path::Path;

use mlx_rs::Dtype;
use runtime::batch::Batch;
use runtime::family::{AnyConfig, Loaded};
use runtime::generate::{self, Flow, GenerateOptions, Pipeline};
use runtime::kv_layout::KvLayout;
use runtime::options::ExecOptions;
use runtime::quantization::QuantSpec;
use runtime::sampling::Sampler;
use runtime::sequence::Advance;
use runtime::synth::SynthOptions;

fn llama() -> (Loaded, KvLayout) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/models/llama-3.2-1b");
    let config = AnyConfig::from_file(&dir.join("config.json"))
        .unwrap()
        .twin();
    let layout = KvLayout::from_file(&dir.join("kv_config.json")).unwrap();
    let quant = Some(QuantSpec {
        bits: 4,
        group_size: 64,
    });
    let (tensors, qmap) = config
        .random_tensors(SynthOptions { seed: 3, quant }, Dtype::Bfloat16)
        .unwrap();
    let config = config.with_quantization(qmap);
    let model =
        Loaded::from_tensors(config, layout.clone(), ExecOptions::default(), tensors).unwrap();
    (model, layout)
}

fn options(layout: &KvLayout, max_tokens: usize, sampler: Sampler) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampler,
        stop_tokens: vec![],
        prefill_chunk: 2048,
        kv_layout: layout.clone(),
        pipeline: Pipeline::Ahead,
        memory_limit: None,
    }
}

fn prompt(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + seed * 101 + 5) % 500 + 3)
        .collect()
}

fn alone(model: &Loaded, p: &[u32], opts: &GenerateOptions) -> Vec<u32> {
    let m = model.monolith();
    let mut caches = model.as_ref().float_caches(1);
    generate::generate(m.as_ref(), &mut caches, p, opts, |_| Flow::Continue)
        .unwrap()
        .0
}

#[test]
fn a_batch_of_one_decodes_what_a_request_alone_does() {
    let (model, layout) = llama();
    let m = model.monolith();
    let opts = options(&layout, 12, Sampler::new(0.8, 0.9, 20, 9).unwrap());
    let p = prompt(1, 11);
    let want = alone(&model, &p, &opts);
    let mut batch = Batch::new(layout.clone());
    batch.join(m.as_ref(), &p, &opts).unwrap();
    let mut got = Vec::new();
    while !batch.is_empty() {
        for a in batch.step(m.as_ref()).unwrap() {
            match a {
                Advance::Token(t) | Advance::Last(t) => got.push(t),
                Advance::Stopped => {}
            }
        }
    }
    assert_eq!(got, want);
}

#[test]
fn rows_that_join_and_leave_each_get_their_stream() {
    let (model, layout) = llama();
    let m = model.monolith();
    // (prompt length, max tokens, the step it joins at)
    let plan = [(7usize, 10usize, 0usize), (13, 6, 0), (4, 9, 3), (20, 5, 5)];
    let opts: Vec<GenerateOptions> = plan
        .iter()
        .enumerate()
        // Sampled at temperature 1 (seeded): every logit counts, not only the largest.
        .map(|(i, &(_, n, _))| {
            options(
                &layout,
                n,
                Sampler::new(1.0, 1.0, 0, 40 + i as u64).unwrap(),
            )
        })
        .collect();
    let prompts: Vec<Vec<u32>> = plan
        .iter()
        .enumerate()
        .map(|(i, &(len, _, _))| prompt(i as u32 + 2, len))
        .collect();
    let solo: Vec<Vec<u32>> = (0..plan.len())
        .map(|i| alone(&model, &prompts[i], &opts[i]))
        .collect();
    let mut batch = Batch::new(layout.clone());
    let mut order: Vec<usize> = Vec::new();
    let mut out = vec![Vec::new(); plan.len()];
    let mut step = 0;
    while step == 0 || !batch.is_empty() {
        for (i, &(_, _, at)) in plan.iter().enumerate() {
            if at == step {
                batch.join(m.as_ref(), &prompts[i], &opts[i]).unwrap();
                order.push(i);
            }
        }
        let advances = batch.step(m.as_ref()).unwrap();
        assert_eq!(advances.len(), order.len());
        let mut still = Vec::new();
        for (a, &i) in advances.iter().zip(&order) {
            match *a {
                Advance::Token(t) => {
                    out[i].push(t);
                    still.push(i);
                }
                Advance::Last(t) => out[i].push(t),
                Advance::Stopped => {}
            }
        }
        order = still;
        step += 1;
    }
    for i in 0..plan.len() {
        assert_eq!(out[i].len(), plan[i].1, "row {i}: {:?}", out[i]);
        let same = out[i]
            .iter()
            .zip(&solo[i])
            .take_while(|(a, b)| a == b)
            .count();
        eprintln!(
            "row {i}: {same} of {} tokens as alone (batched {:?}, alone {:?})",
            plan[i].1, out[i], solo[i]
        );
    }
    assert_eq!(out, solo, "rows batched vs alone on this backend");
}
