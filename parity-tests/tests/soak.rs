//! The long run (ignored by default; `cargo xtask soak`): 10,000 single-token steps on
//! the e4b twin with its quantized rotating caches (the 16-row ring wraps hundreds of
//! times), the generated model and the monolith on twin caches side by side. Memory is
//! sampled every 500 steps: after warm-up, MLX's live arrays besides the caches must not
//! grow (no leak), the resident set may grow only with the caches (the twin's
//! full-attention layers keep every token), and the two paths' logits must stay
//! byte-equal at every step.

use parity_tests::gate;
use runtime::cache::AnyCache;
use runtime::kv_policy;
use runtime::mlx_rs::Array;
use runtime::model::gemma4::Gemma4;
use runtime::model::gemma4::monolith::Gemma4Monolith;
use runtime::model::gemma4::synth;
use runtime::model::{LanguageModel, Loaded};
use runtime::quantization::QuantSpec;
use runtime::synth::SynthOptions;

const STEPS: usize = 10_000;
const SAMPLE_EVERY: usize = 500;
/// Allowed growth of MLX's live arrays beyond the caches' own bytes, from the first sample
/// after warm-up to any later one: anything kept alive per step (a leak) would exceed it
/// within a few hundred steps.
const LIVE_BOUND: u64 = 2 << 20;
/// Allowed growth of the resident set beyond [`RSS_PER_KV_BYTE`] times the caches' growth.
const RSS_BOUND: u64 = 32 << 20;
/// The e4b twin's full-attention layers keep every token (1,408 bytes per token per cache
/// set at its shapes), so the caches grow by design; they grow in steps of 256 tokens,
/// each a new buffer, and the allocator does not hand every freed smaller buffer back:
/// resident memory grew about 3 bytes per cache byte in a 2,000-step look.
const RSS_PER_KV_BYTE: u64 = 4;

/// The number of steps: [`STEPS`], or `MLX_AOT_SOAK_STEPS` for a shorter look.
fn steps() -> usize {
    std::env::var("MLX_AOT_SOAK_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(STEPS)
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn bits(a: &Array) -> Vec<u32> {
    gate::logit_bits(a).unwrap()
}

#[test]
#[ignore = "a long run: cargo xtask soak"]
fn ten_thousand_steps_stay_equal_and_bounded() {
    let imp = generated::implementations()
        .into_iter()
        .find(|i| i.id == "gemma4-e4b-generated")
        .unwrap();
    let (preset, layout) = gate::preset_of(&imp).unwrap();
    let preset = preset
        .downcast_ref::<runtime::model::gemma4::Gemma4Config>()
        .expect("a Gemma 4 preset")
        .clone();
    let config = synth::twin(&preset);
    let quant = Some(QuantSpec {
        bits: 4,
        group_size: 64,
    });
    let (tensors, qmap) = synth::random_tensors(&config, SynthOptions { seed: 77, quant }).unwrap();
    let mut config = config;
    config.quantization = qmap;
    let model = Loaded::typed_from_tensors::<Gemma4>(config, layout.clone(), tensors).unwrap();
    let generated = imp.construct_on(&Loaded::shared(model.clone())).unwrap();
    let monolith = Gemma4Monolith::new(model.clone());
    let (mut a, mut b) = (model.float_caches(1), model.float_caches(1));
    let prompt: Vec<i32> = (0..20).map(|i| (i * 37 + 11) % 512).collect();
    let p = Array::from_slice(&prompt, &[1, 20]);
    generated.forward(&p, &mut a).unwrap().eval().unwrap();
    monolith.forward(&p, &mut b).unwrap().eval().unwrap();
    let mut token = 7i32;
    let mut equal = 0usize;
    let mut samples = Vec::new();
    let steps = steps();
    for step in 1..=steps {
        kv_policy::apply(&mut a, &layout).unwrap();
        kv_policy::apply(&mut b, &layout).unwrap();
        let t = Array::from_slice(&[token], &[1, 1]);
        let x = generated.forward(&t, &mut a).unwrap();
        let y = monolith.forward(&t, &mut b).unwrap();
        let (xb, yb) = (bits(&x), bits(&y));
        assert_eq!(xb, yb, "step {step}: generated and monolith logits differ");
        equal += 1;
        // Feed the argmax back, so the run is a real greedy decode.
        let row = &xb;
        let best = (0..row.len())
            .max_by(|&i, &j| f32::from_bits(row[i]).total_cmp(&f32::from_bits(row[j])))
            .unwrap();
        token = best as i32;
        if step % SAMPLE_EVERY == 0 {
            let s = Sample::now(step, &a, &b);
            eprintln!(
                "step {step:>6}: RSS {:.1} MB, MLX live {:.1} MB of which caches {:.1} MB, MLX \
                 buffer cache {:.1} MB, {equal} steps byte-equal",
                mb(s.rss),
                mb(s.live),
                mb(s.kv),
                runtime::mlx_rs::memory::cache_memory().unwrap_or(0) as f64 / 1e6,
            );
            if let Some(warm) = samples.get(1) {
                // Fail as soon as a bound breaks, not after the whole run.
                check(warm, &s);
            }
            samples.push(s);
        }
    }
    assert_eq!(equal, steps);
    assert_eq!(
        generated.fast_path_calls(),
        steps as u64,
        "every decode step took the fast path"
    );
    // After warm-up (the first two samples): no live array beyond the caches accumulates,
    // and the resident set grows only with the caches.
    let warm = samples[1];
    let at = |n: usize| {
        samples
            .iter()
            .find(|s| s.step == n)
            .map_or("-".to_string(), |s| format!("{:.1} MB", mb(s.rss)))
    };
    eprintln!(
        "RSS at 500: {}, 5000: {}, 10000: {}; {equal} steps byte-equal",
        at(500),
        at(5000),
        at(10_000)
    );
    for s in &samples[1..] {
        check(&warm, s);
    }
}

/// Asserts that sample `s` is within the bounds relative to the warm-up sample.
fn check(warm: &Sample, s: &Sample) {
    let non_kv = |x: &Sample| x.live.saturating_sub(x.kv);
    assert!(
        non_kv(s) <= non_kv(warm) + LIVE_BOUND,
        "step {}: MLX arrays besides the caches grew from {} to {} bytes",
        s.step,
        non_kv(warm),
        non_kv(s)
    );
    let kv_growth = s.kv.saturating_sub(warm.kv);
    assert!(
        s.rss <= warm.rss + RSS_PER_KV_BYTE * kv_growth + RSS_BOUND,
        "step {}: resident memory grew from {} to {} bytes while the caches grew by {}",
        s.step,
        warm.rss,
        s.rss,
        kv_growth
    );
}

/// Memory at one step.
#[derive(Debug, Clone, Copy)]
struct Sample {
    step: usize,
    /// Resident set of the process.
    rss: u64,
    /// MLX's live (active) array memory.
    live: u64,
    /// Bytes held by both cache sets.
    kv: u64,
}

impl Sample {
    fn now(step: usize, a: &[AnyCache], b: &[AnyCache]) -> Self {
        let kv = a.iter().chain(b).map(|c| c.nbytes() as u64).sum();
        Sample {
            step,
            rss: rss_bytes(),
            live: runtime::mlx_rs::memory::active_memory().unwrap_or(0) as u64,
            kv,
        }
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}
