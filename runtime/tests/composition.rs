//! The single-token composition of attention: the bytes of `fast::scaled_dot_product_attention`
//! where MLX runs its op-by-op fallback, with two ops fewer, and the reference's call
//! wherever the single-token form does not apply.

use runtime::mlx_rs::{Array, Dtype};
use runtime::nn::{AttnMask, Composition, sdpa, sdpa_with};
use runtime::options::ExecOptions;

fn normal(shape: &[i32], seed: u64) -> Array {
    let key = runtime::mlx_rs::random::key(seed).unwrap();
    let a = runtime::mlx_rs::random::normal::<f32>(shape, None, None, &key)
        .unwrap()
        .as_dtype(Dtype::Bfloat16)
        .unwrap();
    a.eval().unwrap();
    a
}

fn bytes(a: &Array) -> Vec<u16> {
    let a = a.contiguous().unwrap();
    a.eval().unwrap();
    a.as_slice::<half::bf16>()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn ops(a: &Array) -> usize {
    runtime::graph::count_ops(&[a]).unwrap()
}

/// Keys and values of `rows` cached rows: a whole buffer (a full ring) or the first rows
/// of a larger one (a growing cache's view).
fn kv(kv_heads: i32, rows: i32, d: i32, view: bool, seed: u64) -> (Array, Array) {
    let cap = if view { rows + 37 } else { rows };
    let k = normal(&[1, kv_heads, cap, d], seed);
    let v = normal(&[1, kv_heads, cap, d], seed + 1);
    if !view {
        return (k, v);
    }
    use runtime::mlx_rs::ops::indexing::TryIndexOp;
    let k = k.try_index((.., .., 0..rows, ..)).unwrap();
    let v = v.try_index((.., .., 0..rows, ..)).unwrap();
    (k, v)
}

#[test]
fn single_token_attention_has_the_fallbacks_bytes_with_two_ops_fewer() {
    let mut seed = 1;
    for (heads, kv_heads, d) in [(8, 2, 64), (8, 2, 128), (4, 4, 64), (16, 8, 32)] {
        for (rows, view) in [(16, false), (23, true), (300, true)] {
            seed += 3;
            let q = normal(&[1, heads, 1, d], seed);
            let (k, v) = kv(kv_heads, rows, d, view, seed + 10);
            let reference = sdpa(&q, &k, &v, &AttnMask::None).unwrap();
            let lean = sdpa_with(
                &q,
                &k,
                &v,
                &AttnMask::None,
                Composition::SingleToken,
                &ExecOptions::default(),
            )
            .unwrap();
            // MLX's CPU backend always decomposes; the multiply by 1.0 and its broadcast
            // are the ops left out. (Counted before evaluation detaches the graphs.)
            assert_eq!(ops(&lean) + 2, ops(&reference), "heads {heads}/{kv_heads}");
            assert_eq!(
                bytes(&reference),
                bytes(&lean),
                "heads {heads}/{kv_heads}, D {d}, {rows} rows"
            );
        }
    }
}

#[test]
fn attention_keeps_the_reference_call_where_the_single_token_form_does_not_apply() {
    let q1 = normal(&[1, 8, 1, 64], 50);
    let q5 = normal(&[1, 8, 5, 64], 51);
    let (k, v) = kv(2, 20, 64, false, 52);
    let same = |q: &Array, mask: &AttnMask, c: Composition| {
        let reference = sdpa(q, &k, &v, mask).unwrap();
        let with = sdpa_with(q, &k, &v, mask, c, &ExecOptions::default()).unwrap();
        assert_eq!(ops(&reference), ops(&with));
        assert_eq!(bytes(&reference), bytes(&with));
    };
    same(&q1, &AttnMask::None, Composition::Reference);
    same(&q5, &AttnMask::Causal, Composition::SingleToken);
    same(&q1, &AttnMask::Causal, Composition::SingleToken);
}
