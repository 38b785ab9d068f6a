//! The generation loop: deterministic greedy decoding, seeded sampling, stop tokens,
//! limits, the kv policy, and clear refusals of bad requests.

use std::path::Path;

use mlx_rs::Array;
use runtime::Error;
use runtime::generate::{self, Flow, GenerateOptions, Pipeline, StopReason};
use runtime::kv_layout::KvLayout;
use runtime::model::gemma4::Gemma4;
use runtime::model::gemma4::Gemma4Config;
use runtime::model::gemma4::monolith::Gemma4Monolith;
use runtime::model::gemma4::synth;
use runtime::model::{LanguageModel, Loaded};
use runtime::sampling::Sampler;
use runtime::synth::SynthOptions;

fn model(kv: bool) -> Gemma4Monolith {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/models/gemma4-e4b");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    v["num_hidden_layers"] = 6.into();
    v["num_kv_shared_layers"] = 2.into();
    v["layer_types"] = serde_json::json!([
        "sliding_attention",
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention"
    ]);
    let config = synth::twin(&Gemma4Config::from_value("tiny.json", &v).unwrap());
    let (tensors, _) = synth::random_tensors(
        &config,
        SynthOptions {
            seed: 11,
            quant: None,
        },
    )
    .unwrap();
    let layout = if kv {
        KvLayout::from_json_str(
            "kv.json",
            r#"[{"layer_idx": 0, "bits": 4}, {"layer_idx": 2, "bits": 8}]"#,
        )
        .unwrap()
    } else {
        KvLayout::float()
    };
    Gemma4Monolith::new(Loaded::typed_from_tensors::<Gemma4>(config, layout, tensors).unwrap())
}

fn options(m: &Gemma4Monolith, max_tokens: usize, sampler: Sampler) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampler,
        stop_tokens: vec![],
        prefill_chunk: 2048,
        kv_layout: m.loaded().kv_layout().clone(),
        pipeline: Pipeline::Ahead,
        memory_limit: None,
    }
}

fn run(m: &Gemma4Monolith, prompt: &[u32], opts: &GenerateOptions) -> Vec<u32> {
    let mut caches = m.loaded().float_caches(1);
    generate::generate(m, &mut caches, prompt, opts, |_| Flow::Continue)
        .unwrap()
        .0
}

const PROMPT: [u32; 20] = [
    5, 17, 42, 99, 3, 250, 7, 8, 311, 12, 13, 400, 15, 16, 17, 18, 19, 20, 21, 22,
];

#[test]
fn greedy_generation_is_deterministic_and_counts_steps() {
    let m = model(false);
    let opts = options(&m, 24, Sampler::Greedy);
    let mut caches = m.loaded().float_caches(1);
    let (a, stats) =
        generate::generate(&m, &mut caches, &PROMPT, &opts, |_| Flow::Continue).unwrap();
    assert_eq!(a.len(), 24);
    assert_eq!(stats.stop, StopReason::MaxTokens);
    assert_eq!(stats.prompt_tokens, 20);
    assert_eq!(stats.decode_steps, 23);
    assert_eq!(caches[0].offset(), 20 + 23);
    assert!(a.iter().all(|&t| (t as usize) < 512));
    assert_eq!(run(&m, &PROMPT, &opts), a);
}

#[test]
fn stop_tokens_end_generation_without_being_emitted() {
    let m = model(false);
    let first = run(&m, &PROMPT, &options(&m, 5, Sampler::Greedy));
    let mut opts = options(&m, 5, Sampler::Greedy);
    opts.stop_tokens = vec![first[2]];
    let mut caches = m.loaded().float_caches(1);
    let (out, stats) =
        generate::generate(&m, &mut caches, &PROMPT, &opts, |_| Flow::Continue).unwrap();
    assert_eq!(stats.stop, StopReason::StopToken);
    let cut = first.iter().position(|&t| t == first[2]).unwrap();
    assert_eq!(out, first[..cut]);
}

/// Tokens, steps run and the first cache's length after generating with `pipeline`.
fn under(
    m: &Gemma4Monolith,
    opts: &GenerateOptions,
    pipeline: Pipeline,
) -> (Vec<u32>, usize, StopReason, usize) {
    let mut opts = opts.clone();
    opts.pipeline = pipeline;
    let mut caches = m.loaded().float_caches(1);
    let (out, stats) =
        generate::generate(m, &mut caches, &PROMPT, &opts, |_| Flow::Continue).unwrap();
    (out, stats.decode_steps, stats.stop, caches[0].offset())
}

#[test]
fn every_pipeline_decodes_the_same_tokens_in_the_same_steps() {
    // Before the model exists, so that everything it builds may move between threads.
    runtime::stream::share_default().unwrap();
    let m = model(true);
    let opts = options(&m, 12, Sampler::top_p(0.9, 0.95, 5).unwrap());
    let ahead = under(&m, &opts, Pipeline::Ahead);
    assert_eq!(ahead.0.len(), 12);
    assert_eq!(under(&m, &opts, Pipeline::Off), ahead);
    assert_eq!(under(&m, &opts, Pipeline::Threaded), ahead);
    assert_eq!(under(&m, &opts, Pipeline::Threaded), ahead, "and again");
}

#[test]
fn a_stop_token_ends_the_threaded_pipeline_where_it_ends_the_others() {
    runtime::stream::share_default().unwrap();
    let m = model(false);
    let mut opts = options(&m, 8, Sampler::Greedy);
    let first = under(&m, &opts, Pipeline::Ahead).0;
    opts.stop_tokens = vec![first[3]];
    let ahead = under(&m, &opts, Pipeline::Ahead);
    assert_eq!(ahead.2, StopReason::StopToken);
    assert_eq!(under(&m, &opts, Pipeline::Threaded), ahead);
}

#[test]
fn the_threaded_pipeline_refuses_a_thread_without_the_shared_stream() {
    let m = model(false);
    let mut opts = options(&m, 4, Sampler::Greedy);
    opts.pipeline = Pipeline::Threaded;
    let mut caches = m.loaded().float_caches(1);
    let err = generate::generate(&m, &mut caches, &PROMPT, &opts, |_| Flow::Continue).unwrap_err();
    assert!(err.to_string().contains("share_default"), "{err}");
    assert_eq!(caches[0].offset(), 0, "nothing ran");
}

#[test]
fn requests_beyond_the_memory_plan_are_refused_before_any_work() {
    let m = model(false);
    let mut opts = options(&m, 10_000_000, Sampler::Greedy);
    opts.memory_limit = Some(1_000_000_000);
    let mut caches = m.loaded().float_caches(1);
    let err = generate::generate(&m, &mut caches, &PROMPT, &opts, |_| Flow::Continue).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("10000020 tokens") && msg.contains("largest safe context"),
        "{msg}"
    );
    assert_eq!(caches[0].offset(), 0, "nothing ran");
    opts.max_tokens = 4;
    assert_eq!(
        generate::generate(&m, &mut caches, &PROMPT, &opts, |_| Flow::Continue)
            .unwrap()
            .0
            .len(),
        4
    );
}

#[test]
fn the_caller_can_stop() {
    let m = model(false);
    let mut caches = m.loaded().float_caches(1);
    let mut seen = 0;
    let (out, stats) = generate::generate(
        &m,
        &mut caches,
        &PROMPT,
        &options(&m, 50, Sampler::Greedy),
        |_| {
            seen += 1;
            if seen == 3 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        },
    )
    .unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(stats.stop, StopReason::Caller);
}

#[test]
fn seeded_sampling_repeats() {
    let m = model(false);
    let sampler = Sampler::top_p(0.8, 0.9, 1234).unwrap();
    let a = run(&m, &PROMPT, &options(&m, 16, sampler));
    let b = run(&m, &PROMPT, &options(&m, 16, sampler));
    assert_eq!(a, b);
    assert!(a.iter().all(|&t| (t as usize) < 512));
    // With top_p so small only the most likely token survives: sampling is greedy.
    let narrow = Sampler::top_p(1.0, 1e-6, 99).unwrap();
    assert_eq!(
        run(&m, &PROMPT, &options(&m, 8, narrow)),
        run(&m, &PROMPT, &options(&m, 8, Sampler::Greedy))
    );
}

#[test]
fn kv_layout_quantizes_after_the_first_prefill() {
    let m = model(true);
    let mut caches = m.loaded().float_caches(1);
    let opts = options(&m, 4, Sampler::Greedy);
    generate::generate(&m, &mut caches, &PROMPT, &opts, |_| Flow::Continue).unwrap();
    let sigs: Vec<String> = caches.iter().map(|c| c.signature().to_string()).collect();
    assert_eq!(
        sigs,
        [
            "kv:rotating-quant:4:64",
            "kv:rotating",
            "kv:quant:8:64",
            "kv:rotating"
        ]
    );
}

#[test]
fn chunked_prefill_fills_the_caches_like_one_prefill() {
    let m = model(false);
    let mut opts = options(&m, 3, Sampler::Greedy);
    opts.prefill_chunk = 7;
    let mut caches = m.loaded().float_caches(1);
    let (out, stats) =
        generate::generate(&m, &mut caches, &PROMPT, &opts, |_| Flow::Continue).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(stats.prompt_tokens, 20);
    assert_eq!(caches[2].offset(), 22);
}

#[test]
fn bad_requests_are_refused_before_any_work() {
    let m = model(false);
    let opts = options(&m, 4, Sampler::Greedy);
    let mut caches = m.loaded().float_caches(1);
    let err = generate::generate(&m, &mut caches, &[], &opts, |_| Flow::Continue).unwrap_err();
    assert!(matches!(err, Error::Request(_)), "{err}");
    let err =
        generate::generate(&m, &mut caches, &[1, 512], &opts, |_| Flow::Continue).unwrap_err();
    assert!(err.to_string().contains("token 512 at position 1"), "{err}");
    assert_eq!(caches[0].offset(), 0, "nothing ran");
    assert!(
        Sampler::top_p(0.7, 2.0, 0)
            .unwrap_err()
            .to_string()
            .contains("top-p")
    );
    assert!(Sampler::top_p(-1.0, 0.9, 0).is_err());
    assert_eq!(Sampler::top_p(0.0, 0.9, 0).unwrap(), Sampler::Greedy);
}

#[test]
fn logits_walk_covers_every_position() {
    let m = model(true);
    let rows = vec![PROMPT.to_vec(), PROMPT.iter().rev().copied().collect()];
    let mut caches = m.loaded().float_caches(2);
    let logits = generate::logits_walk(&m, &mut caches, &rows, 18, m.loaded().kv_layout()).unwrap();
    assert_eq!(logits.shape(), [2, 20, 512]);
    assert_eq!(logits.dtype(), mlx_rs::Dtype::Float32);
    let _: &Array = &logits;
    let err = generate::logits_walk(
        &m,
        &mut m.loaded().float_caches(1),
        &[vec![1, 2]],
        3,
        &KvLayout::float(),
    );
    assert!(err.is_err());
}

#[test]
fn top_k_of_one_is_greedy_and_top_k_keeps_sampling_among_the_k_likeliest() {
    let m = model(false);
    let greedy = run(&m, &PROMPT, &options(&m, 8, Sampler::Greedy));
    let one = Sampler::new(1.5, 1.0, 1, 7).unwrap();
    assert_eq!(run(&m, &PROMPT, &options(&m, 8, one)), greedy);
    // On logits with a known order, top-k 3 draws only the three largest.
    let logits = Array::from_slice(&[0.0f32, 5.0, 1.0, 4.0, 3.0, -2.0], &[1, 6]);
    let sampler = Sampler::new(100.0, 1.0, 3, 1).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for step in 0..64 {
        let t = sampler.sample(&logits, step).unwrap();
        seen.insert(t.try_item_exact::<u32>().unwrap());
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 3, 4]);
}

#[test]
fn sequences_advanced_together_give_each_its_tokens_alone() {
    use runtime::sequence::{Advance, Sequence};
    let m = model(true);
    let prompts: [&[u32]; 2] = [&PROMPT, &PROMPT[3..11]];
    let samplers = [Sampler::Greedy, Sampler::new(0.9, 0.95, 40, 5).unwrap()];
    let alone: Vec<Vec<u32>> = (0..2)
        .map(|i| run(&m, prompts[i], &options(&m, 10 + i, samplers[i])))
        .collect();
    let mut seqs: Vec<Sequence> = (0..2)
        .map(|i| Sequence::prefill(&m, prompts[i], &options(&m, 10 + i, samplers[i])).unwrap())
        .collect();
    let mut out = vec![Vec::new(), Vec::new()];
    let mut done = [false; 2];
    while !done.iter().all(|d| *d) {
        let queued: Vec<Array> = seqs
            .iter_mut()
            .zip(done)
            .filter(|(_, d)| !d)
            .filter_map(|(s, _)| s.queue_next(&m).unwrap().cloned())
            .collect();
        mlx_rs::transforms::async_eval(&queued).unwrap();
        for i in 0..2 {
            if done[i] {
                continue;
            }
            match seqs[i].advance(&m).unwrap() {
                Advance::Token(t) => out[i].push(t),
                Advance::Last(t) => {
                    out[i].push(t);
                    done[i] = true;
                }
                Advance::Stopped => done[i] = true,
            }
        }
    }
    assert_eq!(out, alone);
    assert_eq!(seqs[1].generated(), 11);
    assert_eq!(seqs[0].finished(), Some(StopReason::MaxTokens));
}

#[test]
fn a_prefill_run_a_chunk_at_a_time_between_other_steps_gives_the_tokens_of_its_prompt_alone() {
    use runtime::sequence::{Advance, Prefilling, Sequence};
    let m = model(true);
    let greedy = Sampler::Greedy;
    // Chunks of 6: the 20-token prompt goes in as 6 + 6 + 6 + 1 + the last token.
    let chunked = GenerateOptions {
        prefill_chunk: 6,
        ..options(&m, 8, greedy)
    };
    let alone = run(&m, &PROMPT, &chunked);
    let mut other = Sequence::prefill(&m, &PROMPT[2..9], &options(&m, 30, greedy)).unwrap();
    let mut p = Prefilling::start(&m, &PROMPT, &chunked).unwrap();
    let mut parts = 0;
    let mut seq = loop {
        parts += 1;
        if let Some(seq) = p.step(&m).unwrap() {
            break seq;
        }
        // Another request decodes between the prefill's forwards.
        assert!(matches!(other.advance(&m).unwrap(), Advance::Token(_)));
    };
    assert_eq!(parts, 5, "chunks of 6 over 19 tokens, then the last one");
    assert_eq!(p.progress(), (19, 20));
    let mut out = Vec::new();
    loop {
        match seq.advance(&m).unwrap() {
            Advance::Token(t) => out.push(t),
            Advance::Last(t) => {
                out.push(t);
                break;
            }
            Advance::Stopped => break,
        }
    }
    assert_eq!(out, alone);
}
