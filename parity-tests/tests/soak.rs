//! The long run (ignored by default; `cargo xtask soak`): 10,000 single-token steps on
//! the e4b twin with its quantized rotating caches (the 16-row ring wraps hundreds of
//! times), the generated model and the monolith on twin caches side by side. Resident
//! memory, sampled every 500 steps, must not grow after warm-up, and the two paths'
//! logits must stay byte-equal at every step.

use std::rc::Rc;

use parity_tests::gate;
use runtime::kv_policy;
use runtime::mlx_rs::{Array, Dtype};
use runtime::model::gemma4::Gemma4;
use runtime::model::gemma4::monolith::Gemma4Monolith;
use runtime::model::{LanguageModel, Loaded};
use runtime::quantization::QuantSpec;
use runtime::synth::{self, SynthOptions};

const STEPS: usize = 10_000;
const SAMPLE_EVERY: usize = 500;
/// Allowed growth of the resident set from the first sample after warm-up to the last.
const RSS_BOUND: u64 = 32 << 20;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn bits(a: &Array) -> Vec<u32> {
    let f = a
        .as_dtype(Dtype::Float32)
        .unwrap()
        .flatten(None, None)
        .unwrap();
    f.eval().unwrap();
    f.as_slice::<f32>().iter().map(|v| v.to_bits()).collect()
}

#[test]
#[ignore = "a long run: cargo xtask soak"]
fn ten_thousand_steps_stay_equal_and_bounded() {
    let imp = generated::implementations()
        .into_iter()
        .find(|i| i.id == "gemma4-e4b-generated")
        .unwrap();
    let (preset, layout) = gate::preset_of(&imp).unwrap();
    let preset = preset.gemma4().expect("a Gemma 4 preset").clone();
    let config = synth::twin(&preset);
    let quant = Some(QuantSpec {
        bits: 4,
        group_size: 64,
    });
    let (tensors, qmap) = synth::random_tensors(&config, SynthOptions { seed: 77, quant }).unwrap();
    let mut config = config;
    config.quantization = qmap;
    let model = Rc::new(Gemma4::from_tensors(config, layout.clone(), tensors).unwrap());
    let generated = imp.construct_on(&Loaded::Gemma4(model.clone())).unwrap();
    let monolith = Gemma4Monolith::new(model.clone());
    let (mut a, mut b) = (model.float_caches(1), model.float_caches(1));
    let prompt: Vec<i32> = (0..20).map(|i| (i * 37 + 11) % 512).collect();
    let p = Array::from_slice(&prompt, &[1, 20]);
    generated.forward(&p, &mut a).unwrap().eval().unwrap();
    monolith.forward(&p, &mut b).unwrap().eval().unwrap();
    let mut token = 7i32;
    let mut equal = 0usize;
    let mut samples = Vec::new();
    for step in 1..=STEPS {
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
            samples.push((step, rss_bytes()));
            eprintln!(
                "step {step:>6}: RSS {:.1} MB, {equal} steps byte-equal",
                rss_bytes() as f64 / 1e6
            );
        }
    }
    assert_eq!(equal, STEPS);
    assert_eq!(
        generated.fast_path_calls(),
        STEPS as u64,
        "every decode step took the fast path"
    );
    // After warm-up (the first two samples), no growth beyond the bound.
    let after_warmup = samples[1].1;
    let last = samples.last().unwrap().1;
    let peak = samples[1..].iter().map(|s| s.1).max().unwrap();
    eprintln!(
        "RSS at 500: {:.1} MB, 5000: {:.1} MB, 10000: {:.1} MB",
        samples[0].1 as f64 / 1e6,
        samples[9].1 as f64 / 1e6,
        last as f64 / 1e6
    );
    assert!(
        last <= after_warmup + RSS_BOUND && peak <= after_warmup + RSS_BOUND,
        "resident memory grew from {after_warmup} to {last} bytes (peak {peak})"
    );
}
