//! The MLX ops Gemma 4 needs, run through mlx-rs on seeded inputs: shared by
//! `tests/smoke.rs` and `examples/smoke_hash.rs`.
//!
//! [`run`] builds every op's graph twice from scratch, evaluates both, asserts that the two
//! evaluations are bit-identical, checks the exact relations listed in [`check_exact`]
//! (plus a few tolerance checks where no exact answer exists), and returns a sha256 over
//! the bytes of every result. Two processes on the same MLX build must print the same hash.

#![allow(dead_code)] // each includer uses a different part

use std::collections::BTreeSet;

use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops;
use mlx_rs::ops::indexing::{take, take_along_axis, take_axis};
use mlx_rs::transforms::compile::compile;
use mlx_rs::{Array, Dtype, random};
use sha2::{Digest, Sha256};

type R<T> = Result<T, Exception>;

/// Linear layers: `x [M, K] @ w[N, K].T`.
const K: i32 = 128;
const N: i32 = 64;
const M: i32 = 4;
const GROUP: i32 = 64;
/// Mixture of experts: experts, tokens, experts per token.
const EXPERTS: i32 = 4;
const TOKENS: i32 = 6;
const TOP_K: i32 = 2;
/// Attention: query heads, kv heads, sequence, head dim.
const HQ: i32 = 4;
const HKV: i32 = 2;
const L: i32 = 5;
const HD: i32 = 64;

/// One evaluation's results, by name, in insertion order.
pub struct Results {
    items: Vec<(String, Array)>,
}

impl Results {
    fn push(&mut self, name: impl Into<String>, a: Array) {
        self.items.push((name.into(), a));
    }

    fn get(&self, name: &str) -> &Array {
        self.items
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
            .unwrap_or_else(|| panic!("no result named {name}"))
    }
}

/// What one [`run`] produced.
pub struct Outcome {
    /// Name, dtype, shape and raw bytes of every result, in evaluation order.
    pub items: Vec<(String, Dtype, Vec<i32>, Vec<u8>)>,
    /// sha256 over all of `items`, hex.
    pub hash: String,
    /// The exact relations that were checked (for the log).
    pub checks: Vec<String>,
}

/// Runs the whole smoke suite; panics on any failed assertion.
pub fn run() -> Outcome {
    let first = evaluate().expect("first evaluation");
    let second = evaluate().expect("second evaluation");
    assert_eq!(first.items.len(), second.items.len());
    let mut items = Vec::new();
    for ((name, a), (name2, b)) in first.items.iter().zip(&second.items) {
        assert_eq!(name, name2);
        let (ba, bb) = (bytes(a), bytes(b));
        assert!(ba == bb, "{name}: two independent evaluations differ");
        items.push((name.clone(), a.dtype(), a.shape().to_vec(), ba));
    }
    let checks = check_exact(&first).expect("exact checks");
    let hash = hash(&items);
    Outcome {
        items,
        hash,
        checks,
    }
}

/// sha256 over name, dtype, shape and bytes of every item.
fn hash(items: &[(String, Dtype, Vec<i32>, Vec<u8>)]) -> String {
    let mut h = Sha256::new();
    for (name, dtype, shape, bytes) in items {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(format!("{dtype:?}{shape:?}").as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------------------
// Host access
// ---------------------------------------------------------------------------------------

/// The raw bytes of `a` in row-major order (made contiguous and evaluated first; read
/// through a same-width unsigned view, so no value conversion happens).
pub fn bytes(a: &Array) -> Vec<u8> {
    let c = a.contiguous().expect("contiguous");
    c.eval().expect("eval");
    let out: Vec<u8> = match c.item_size() {
        1 => c.view::<u8>().expect("view").as_slice::<u8>().to_vec(),
        2 => c
            .view::<u16>()
            .expect("view")
            .as_slice::<u16>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        4 => c
            .view::<u32>()
            .expect("view")
            .as_slice::<u32>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        8 => c
            .view::<u64>()
            .expect("view")
            .as_slice::<u64>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        n => panic!("item size {n}"),
    };
    assert_eq!(out.len(), a.nbytes());
    out
}

/// The values of a float array as f32 (bf16 -> f32 is exact).
fn host_f32(a: &Array) -> Vec<f32> {
    let c = a
        .as_dtype(Dtype::Float32)
        .expect("as f32")
        .contiguous()
        .expect("contiguous");
    c.eval().expect("eval");
    c.as_slice::<f32>().to_vec()
}

fn host_u32(a: &Array) -> Vec<u32> {
    let c = a
        .as_dtype(Dtype::Uint32)
        .expect("as u32")
        .contiguous()
        .expect("contiguous");
    c.eval().expect("eval");
    c.as_slice::<u32>().to_vec()
}

/// f32 -> nearest bf16 (ties to even), as f32: what every bf16 operation of MLX's CPU
/// kernels does to its float result.
fn bf16_round(v: f32) -> f32 {
    let b = v.to_bits();
    f32::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
}

fn bits_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Affine dequantization of `[N, K]` packed weights on the host: `round(round(s*q) + b)`.
fn host_dequantize(
    wq: &[u32],
    scales: &[f32],
    biases: &[f32],
    bits: i32,
    round: fn(f32) -> f32,
) -> Vec<f32> {
    let per_word = (32 / bits) as usize;
    let (n, k) = (N as usize, K as usize);
    let mut out = vec![0f32; n * k];
    for row in 0..n {
        for col in 0..k {
            let word = wq[row * (k / per_word) + col / per_word];
            let q = ((word >> (bits as usize * (col % per_word))) & ((1 << bits) - 1)) as f32;
            let g = row * (k / GROUP as usize) + col / GROUP as usize;
            out[row * k + col] = round(round(scales[g] * q) + biases[g]);
        }
    }
    out
}

/// `x [m, K] @ w[N, K].T` summed in order k = 0, 1, ..., rounding every product and
/// every partial sum with `round`.
fn host_matmul_in_order(x: &[f32], w: &[f32], round: fn(f32) -> f32) -> Vec<f32> {
    let k = K as usize;
    x.chunks(k)
        .flat_map(|xr| {
            w.chunks(k).map(move |wr| {
                xr.iter()
                    .zip(wr)
                    .fold(0f32, |s, (a, b)| round(s + round(a * b)))
            })
        })
        .collect()
}

/// A 0-d array of `dtype`, like a weakly typed Python scalar in MLX (a plain f32 scalar
/// would promote a bf16 operand to f32).
fn scalar(v: f32, dtype: Dtype) -> R<Array> {
    Array::from_f32(v).as_dtype(dtype)
}

fn normal(shape: &[i32], seed: u64, dtype: Dtype) -> R<Array> {
    let key = random::key(seed)?;
    random::normal::<f32>(shape, None, None, &key)?.as_dtype(dtype)
}

fn u32s(v: &[u32], shape: &[i32]) -> Array {
    Array::from_slice(v, shape)
}

fn name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::Float32 => "f32",
        Dtype::Bfloat16 => "bf16",
        _ => "other",
    }
}

// ---------------------------------------------------------------------------------------
// The ops
// ---------------------------------------------------------------------------------------

/// gelu, tanh approximation, composed as mlx-lm writes it:
/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`, scalars in x's dtype.
pub fn gelu_approx(x: &Array) -> R<Array> {
    let dt = x.dtype();
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    let x3 = ops::power(x, scalar(3.0, dt)?)?;
    let inner = ops::add(x, ops::multiply(scalar(0.044715, dt)?, &x3)?)?;
    let t = ops::tanh(ops::multiply(scalar(c, dt)?, &inner)?)?;
    ops::multiply(
        ops::multiply(scalar(0.5, dt)?, x)?,
        ops::add(scalar(1.0, dt)?, &t)?,
    )
}

/// The closure that is compiled: a GeGLU-like elementwise chain with a residual add.
fn gated(x: &Array) -> R<Array> {
    let g = gelu_approx(x)?;
    ops::add(ops::multiply(&g, x)?, x)
}

/// Integer-valued matrix: entries in -2..=2 from a formula (exact in f32 and bf16).
fn small_ints(rows: i32, cols: i32, a: i32, b: i32) -> Vec<f32> {
    (0..rows)
        .flat_map(|i| (0..cols).map(move |j| ((i * a + j * b) % 5 - 2) as f32))
        .collect()
}

/// Builds and evaluates every op from freshly made inputs.
fn evaluate() -> R<Results> {
    let mut r = Results { items: Vec::new() };

    for dt in [Dtype::Float32, Dtype::Bfloat16] {
        let t = name(dt);
        let x = normal(&[M, K], 1, dt)?;
        let x1 = normal(&[1, K], 2, dt)?;
        let w = ops::multiply(normal(&[N, K], 3, dt)?, scalar(0.1, dt)?)?;
        r.push(format!("input.x.{t}"), x.clone());
        r.push(format!("input.x1.{t}"), x1.clone());
        r.push(format!("input.w.{t}"), w.clone());

        // matmul against a transposed (non-contiguous) view, as Linear does.
        r.push(format!("matmul.{t}"), ops::matmul(&x, w.t())?);
        // Integer-valued operands: the exact answer is known on the host.
        let xi = Array::from_slice(&small_ints(M, 32, 3, 7), &[M, 32]).as_dtype(dt)?;
        let wi = Array::from_slice(&small_ints(N, 32, 5, 2), &[N, 32]).as_dtype(dt)?;
        r.push(format!("matmul_int.{t}"), ops::matmul(&xi, wi.t())?);

        // quantize / quantized_matmul / dequantize; 8-bit only for bf16.
        let bit_widths: &[i32] = if dt == Dtype::Bfloat16 { &[4, 8] } else { &[4] };
        for &bits in bit_widths {
            let q = format!("q{bits}.{t}");
            let (wq, scales, biases) = ops::quantize(&w, GROUP, bits)?;
            let deq = ops::dequantize(&wq, &scales, &biases, GROUP, bits)?;
            let qmm =
                |x: &Array| ops::quantized_matmul(x, &wq, &scales, &biases, true, GROUP, bits);
            r.push(format!("{q}.wq"), wq.clone());
            r.push(format!("{q}.scales"), scales.clone());
            r.push(format!("{q}.biases"), biases.clone());
            r.push(format!("{q}.dequantized"), deq.clone());
            r.push(format!("{q}.qmm"), qmm(&x)?);
            r.push(format!("{q}.qmv"), qmm(&x1)?);
            r.push(format!("{q}.matmul_deq"), ops::matmul(&x, deq.t())?);
            r.push(format!("{q}.matmul_deq1"), ops::matmul(&x1, deq.t())?);
        }

        // gather_qmm: experts [E, N, K], one token per row, TOP_K experts each.
        let we = ops::multiply(normal(&[EXPERTS, N, K], 4, dt)?, scalar(0.1, dt)?)?;
        let (weq, wes, web) = ops::quantize(&we, GROUP, 4)?;
        let xt = normal(&[TOKENS, 1, 1, K], 5, dt)?;
        let idx: Vec<u32> = (0..TOKENS * TOP_K)
            .map(|i| ((i * 3 + i / 2) % EXPERTS) as u32)
            .collect();
        let indices = u32s(&idx, &[TOKENS, TOP_K]);
        r.push(format!("gather_qmm.{t}.x"), xt.clone());
        r.push(format!("gather_qmm.{t}.wq"), weq.clone());
        r.push(
            format!("gather_qmm.{t}"),
            ops::gather_qmm(&xt, &weq, &wes, &web, None, &indices, true, GROUP, 4, false)?,
        );
        // Per (token, expert) quantized_matmul: the exact expectation.
        for (row, &e) in idx.iter().enumerate() {
            let token = row as i32 / TOP_K;
            let sel = |a: &Array, i: i32| take_axis(a, u32s(&[i as u32], &[1]), 0);
            let xr = sel(&xt, token)?.reshape(&[1, K])?;
            let e = e as i32;
            let (wq_e, s_e, b_e) = (sel(&weq, e)?, sel(&wes, e)?, sel(&web, e)?);
            let (wq_e, s_e, b_e) = (
                wq_e.reshape(&[N, -1])?,
                s_e.reshape(&[N, -1])?,
                b_e.reshape(&[N, -1])?,
            );
            r.push(
                format!("gather_qmm.{t}.ref{row}"),
                ops::quantized_matmul(&xr, &wq_e, &s_e, &b_e, true, GROUP, 4)?,
            );
        }
        // The sorted form mlx-lm uses for large batches: rows sorted by expert.
        let mut pairs: Vec<(u32, u32)> = idx
            .iter()
            .enumerate()
            .map(|(row, &e)| (e, (row as i32 / TOP_K) as u32))
            .collect();
        pairs.sort_by_key(|&(e, _)| e);
        let tokens: Vec<u32> = pairs.iter().map(|&(_, tok)| tok).collect();
        let experts: Vec<u32> = pairs.iter().map(|&(e, _)| e).collect();
        let xs = take_axis(
            xt.reshape(&[TOKENS, K])?,
            u32s(&tokens, &[TOKENS * TOP_K]),
            0,
        )?
        .reshape(&[TOKENS * TOP_K, 1, K])?;
        let rhs = u32s(&experts, &[TOKENS * TOP_K]);
        r.push(
            format!("gather_qmm_sorted.{t}"),
            ops::gather_qmm(&xs, &weq, &wes, &web, None, &rhs, true, GROUP, 4, true)?,
        );

        // fast rms_norm with a weight.
        let weight: Vec<f32> = (0..K).map(|i| 1.0 + 0.01 * i as f32).collect();
        let weight = Array::from_slice(&weight, &[K]).as_dtype(dt)?;
        r.push(
            format!("rms_norm.{t}"),
            fast::rms_norm(&x, Some(&weight), 1e-6)?,
        );

        // fast rope: full, partial rotary, custom freqs, offset.
        let xa = normal(&[1, HQ, L, HD], 6, dt)?;
        r.push(format!("rope.{t}.x"), xa.clone());
        r.push(
            format!("rope.{t}"),
            fast::rope(&xa, HD, false, 10000.0, 1.0, 0, None)?,
        );
        r.push(
            format!("rope_partial.{t}"),
            fast::rope(&xa, HD / 2, false, 10000.0, 1.0, 0, None)?,
        );
        let freqs: Vec<f32> = (0..HD / 2)
            .map(|i| 1e6f32.powf(2.0 * i as f32 / HD as f32))
            .collect();
        let freqs = Array::from_slice(&freqs, &[HD / 2]);
        r.push(
            format!("rope_freqs.{t}"),
            fast::rope(&xa, HD, false, None, 1.0, 0, &freqs)?,
        );
        r.push(
            format!("rope_traditional.{t}"),
            fast::rope(&xa, HD, true, 10000.0, 1.0, 0, None)?,
        );
        // The same vector at every position: rope at offset p of position 0 must equal
        // rope at offset 0 of position p.
        let xrep = ops::broadcast_to(take_axis(&xa, u32s(&[0], &[1]), 2)?, &[1, HQ, L, HD])?;
        r.push(
            format!("rope_rep.{t}"),
            fast::rope(&xrep, HD, false, 10000.0, 1.0, 0, None)?,
        );
        for p in 1..L {
            r.push(
                format!("rope_rep.{t}.offset{p}"),
                fast::rope(&xrep, HD, false, 10000.0, 1.0, p, None)?,
            );
        }

        // fast scaled_dot_product_attention: GQA, causal, explicit mask, decode.
        let q = normal(&[1, HQ, L, HD], 7, dt)?;
        let k = normal(&[1, HKV, L, HD], 8, dt)?;
        let v = normal(&[1, HKV, L, HD], 9, dt)?;
        r.push(format!("sdpa.{t}.v"), v.clone());
        let scale = 1.0 / (HD as f32).sqrt();
        r.push(
            format!("sdpa_causal.{t}"),
            fast::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                scale,
                ScaledDotProductAttentionMask::Causal,
                None,
            )?,
        );
        let causal: Vec<bool> = (0..L * L).map(|i| i % L <= i / L).collect();
        let causal = Array::from_slice(&causal, &[L, L]);
        r.push(
            format!("sdpa_mask.{t}"),
            fast::scaled_dot_product_attention(&q, &k, &v, scale, &causal, None)?,
        );
        let q1 = normal(&[1, HQ, 1, HD], 10, dt)?;
        r.push(
            format!("sdpa_decode.{t}"),
            fast::scaled_dot_product_attention(&q1, &k, &v, scale, None, None)?,
        );

        // softmax, precise and not.
        let logits = ops::multiply(normal(&[TOKENS, 50], 11, dt)?, scalar(3.0, dt)?)?;
        r.push(
            format!("softmax.{t}"),
            ops::softmax_axis(&logits, -1, false)?,
        );
        r.push(
            format!("softmax_precise.{t}"),
            ops::softmax_axis(&logits, -1, true)?,
        );

        // gelu (tanh approximation), eager and compiled.
        let xg = normal(&[M, K], 12, dt)?;
        r.push(format!("gelu.{t}.x"), xg.clone());
        r.push(format!("gelu.{t}"), gelu_approx(&xg)?);
        r.push(format!("gated.{t}"), gated(&xg)?);
        let mut compiled = compile(gated, None);
        r.push(format!("gated_compiled.{t}"), compiled(&xg)?);
        r.push(format!("gated_compiled_again.{t}"), compiled(&xg)?);

        // Router: argpartition for the top-k set, take_along_axis for its scores.
        let scores = normal(&[TOKENS, 32], 13, dt)?;
        r.push(format!("router.{t}.scores"), scores.clone());
        let part = ops::argpartition_axis(&scores, 32 - 4, -1)?;
        r.push(format!("argpartition.{t}"), part.clone());
        let last: Vec<u32> = (28..32).collect();
        let top = take_axis(&part, u32s(&last, &[4]), -1)?;
        r.push(
            format!("take_along_axis.{t}"),
            take_along_axis(&scores, &top, -1)?,
        );

        // take: embedding rows, and flat take.
        let table = normal(&[50, 16], 14, dt)?;
        r.push(format!("take.{t}.table"), table.clone());
        let ids = u32s(&[3, 0, 49, 7, 7, 21, 30], &[7]);
        r.push(format!("take_axis.{t}"), take_axis(&table, &ids, 0)?);
        r.push(
            format!("take_flat.{t}"),
            take(&table, u32s(&[0, 17, 799, 400], &[2, 2]))?,
        );
    }

    let all: Vec<&Array> = r.items.iter().map(|(_, a)| a).collect();
    mlx_rs::transforms::eval(all)?;
    Ok(r)
}

// ---------------------------------------------------------------------------------------
// Exact expectations
// ---------------------------------------------------------------------------------------

fn same(r: &Results, a: &str, b: &str) {
    assert!(bytes(r.get(a)) == bytes(r.get(b)), "{a} != {b} (bytes)");
}

/// Checks the relations that hold exactly (and a few tolerances where none does);
/// returns a line per check.
fn check_exact(r: &Results) -> R<Vec<String>> {
    let mut done = Vec::new();
    let mut note = |s: String| done.push(s);

    for dt in [Dtype::Float32, Dtype::Bfloat16] {
        let t = name(dt);

        // matmul of integer-valued operands equals the host integer product.
        let xi = small_ints(M, 32, 3, 7);
        let wi = small_ints(N, 32, 5, 2);
        let want: Vec<f32> = (0..M as usize)
            .flat_map(|i| {
                let (xi, wi) = (&xi, &wi);
                (0..N as usize).map(move |j| (0..32).map(|k| xi[i * 32 + k] * wi[j * 32 + k]).sum())
            })
            .collect();
        assert_eq!(
            host_f32(r.get(&format!("matmul_int.{t}"))),
            want,
            "matmul_int.{t}"
        );
        note(format!("matmul_int.{t} == host integer matmul"));

        // Affine quantization, exactly (M = 4 and M = 1):
        // - dequantize(w) == scale * q + bias with each operation rounded to the dtype;
        // - f32: quantized_matmul(x, w) == matmul(x, dequantize(w).T), and both equal the
        //   host dot product summed in order k = 0, 1, ... in f32;
        // - bf16: quantized_matmul accumulates in bf16 (every product and every partial
        //   sum rounded to bf16), so it equals that host emulation, not the bf16 matmul
        //   (which accumulates in f32 and rounds once).
        let round: fn(f32) -> f32 = if dt == Dtype::Bfloat16 {
            bf16_round
        } else {
            |v| v
        };
        let bit_widths: &[i32] = if dt == Dtype::Bfloat16 { &[4, 8] } else { &[4] };
        for &bits in bit_widths {
            let q = format!("q{bits}.{t}");
            let wq = host_u32(r.get(&format!("{q}.wq")));
            let scales = host_f32(r.get(&format!("{q}.scales")));
            let biases = host_f32(r.get(&format!("{q}.biases")));
            let deq = host_f32(r.get(&format!("{q}.dequantized")));
            let own = host_dequantize(&wq, &scales, &biases, bits, round);
            assert!(
                bits_eq(&deq, &own),
                "{q}: dequantize != round(round(scale*q) + bias)"
            );
            // Dequantized weights lie within one quantization step of the originals (MLX
            // snaps the bias so that zero is representable, which can cost up to a step),
            // plus a few roundings to the dtype (of the scale, the bias, s*q and the sum),
            // each at most 2^-8 (bf16) of twice the group's largest magnitude.
            let w = host_f32(r.get(&format!("input.w.{t}")));
            let eps = if dt == Dtype::Float32 {
                1e-6
            } else {
                1.0 / 256.0
            };
            for (i, (a, b)) in w.iter().zip(&deq).enumerate() {
                let g = i / GROUP as usize;
                let step = scales[g].abs();
                let absmax = w[g * GROUP as usize..(g + 1) * GROUP as usize]
                    .iter()
                    .fold(0f32, |m, v| m.max(v.abs()));
                let tol = step * 1.01 + eps * 8.0 * absmax;
                assert!(
                    (a - b).abs() <= tol,
                    "{q}: dequantize[{i}] off by more than a step"
                );
            }
            for (x, out, mm) in [
                ("input.x", "qmm", "matmul_deq"),
                ("input.x1", "qmv", "matmul_deq1"),
            ] {
                let xs = host_f32(r.get(&format!("{x}.{t}")));
                let want = host_matmul_in_order(&xs, &deq, round);
                let got = host_f32(r.get(&format!("{q}.{out}")));
                assert!(
                    bits_eq(&got, &want),
                    "{q}.{out} != in-order host dot product"
                );
                if dt == Dtype::Float32 {
                    same(r, &format!("{q}.{out}"), &format!("{q}.{mm}"));
                }
            }
            if dt == Dtype::Float32 {
                note(format!(
                    "{q}: qmm == matmul(x, dequantize(w).T) == in-order f32 host dot; dequantize == s*q+b"
                ));
            } else {
                note(format!(
                    "{q}: qmm == host dot accumulated in {t}; dequantize == r(r(s*q)+b)"
                ));
            }
        }

        // gather_qmm == per-(token, expert) quantized_matmul; sorted form == unsorted rows.
        let g = bytes(r.get(&format!("gather_qmm.{t}")));
        let row_bytes = g.len() / (TOKENS * TOP_K) as usize;
        for row in 0..(TOKENS * TOP_K) as usize {
            let want = bytes(r.get(&format!("gather_qmm.{t}.ref{row}")));
            assert!(
                g[row * row_bytes..(row + 1) * row_bytes] == want[..],
                "gather_qmm.{t} row {row}"
            );
        }
        note(format!("gather_qmm.{t} == per-expert quantized_matmul"));
        let idx: Vec<u32> = (0..TOKENS * TOP_K)
            .map(|i| ((i * 3 + i / 2) % EXPERTS) as u32)
            .collect();
        let mut order: Vec<usize> = (0..idx.len()).collect();
        order.sort_by_key(|&row| idx[row]);
        let gs = bytes(r.get(&format!("gather_qmm_sorted.{t}")));
        for (pos, &row) in order.iter().enumerate() {
            assert!(
                gs[pos * row_bytes..(pos + 1) * row_bytes]
                    == g[row * row_bytes..(row + 1) * row_bytes],
                "gather_qmm_sorted.{t} row {pos}"
            );
        }
        note(format!(
            "gather_qmm_sorted.{t} == gather_qmm.{t} rows in expert order"
        ));

        // rms_norm within tolerance of the host formula.
        let x = host_f32(r.get(&format!("input.x.{t}")));
        let y = host_f32(r.get(&format!("rms_norm.{t}")));
        let tol = if dt == Dtype::Float32 {
            1e-5
        } else {
            1.0 / 64.0
        };
        for (row, (xr, yr)) in x.chunks(K as usize).zip(y.chunks(K as usize)).enumerate() {
            let ms: f64 = xr.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / K as f64;
            let inv = 1.0 / (ms + 1e-6).sqrt();
            for (i, (&a, &b)) in xr.iter().zip(yr).enumerate() {
                let want = a as f64 * inv * (1.0 + 0.01 * i as f64);
                assert!(
                    (b as f64 - want).abs() <= tol * (want.abs() + 1e-3),
                    "rms_norm.{t}[{row},{i}]"
                );
            }
        }
        note(format!("rms_norm.{t} ≈ host formula (rel {tol})"));

        // rope: position 0 at offset 0 is the identity; the unrotated half of a partial
        // rope is the input; rope at offset p of position 0 == offset 0 of position p.
        let xa = bytes(r.get(&format!("rope.{t}.x")));
        let item = xa.len() / (HQ * L * HD) as usize;
        let vec = HD as usize * item;
        for name in ["rope", "rope_partial", "rope_freqs", "rope_traditional"] {
            let y = bytes(r.get(&format!("{name}.{t}")));
            for h in 0..HQ as usize {
                let at = h * L as usize * vec;
                assert!(
                    y[at..at + vec] == xa[at..at + vec],
                    "{name}.{t}: position 0 is not identity"
                );
            }
        }
        let yp = bytes(r.get(&format!("rope_partial.{t}")));
        for row in 0..(HQ * L) as usize {
            let tail = row * vec + vec / 2..(row + 1) * vec;
            assert!(
                yp[tail.clone()] == xa[tail],
                "rope_partial.{t}: unrotated half changed"
            );
        }
        let rep = bytes(r.get(&format!("rope_rep.{t}")));
        for p in 1..L as usize {
            let off = bytes(r.get(&format!("rope_rep.{t}.offset{p}")));
            for h in 0..HQ as usize {
                let base = h * L as usize * vec;
                assert!(
                    off[base..base + vec] == rep[base + p * vec..base + (p + 1) * vec],
                    "rope_rep.{t}: offset {p} != position {p}"
                );
            }
        }
        note(format!(
            "rope.{t}: pos 0 identity; partial tail untouched; offset p == position p"
        ));

        // sdpa: causal query 0 attends only to key 0, so its output is v[0] exactly;
        // Causal mode == explicit boolean causal mask.
        let v = bytes(r.get(&format!("sdpa.{t}.v")));
        let out = bytes(r.get(&format!("sdpa_causal.{t}")));
        for h in 0..HQ as usize {
            let kv = h / (HQ / HKV) as usize;
            let o = h * L as usize * vec;
            let vv = kv * L as usize * vec;
            assert!(
                out[o..o + vec] == v[vv..vv + vec],
                "sdpa_causal.{t}: head {h} query 0 != v[0]"
            );
        }
        same(r, &format!("sdpa_causal.{t}"), &format!("sdpa_mask.{t}"));
        note(format!(
            "sdpa.{t}: causal query 0 == v[0]; causal mode == boolean mask"
        ));

        // softmax rows sum to 1.
        for name in ["softmax", "softmax_precise"] {
            let s = host_f32(r.get(&format!("{name}.{t}")));
            let tol = if dt == Dtype::Float32 { 1e-5 } else { 2e-2 };
            for (row, chunk) in s.chunks(50).enumerate() {
                let sum: f64 = chunk.iter().map(|&v| v as f64).sum();
                assert!(
                    (sum - 1.0).abs() <= tol,
                    "{name}.{t} row {row} sums to {sum}"
                );
            }
        }
        note(format!("softmax.{t} rows sum to 1"));

        // gelu within tolerance of the tanh formula in f64 (the error of `1 + tanh` in
        // the dtype is absolute, so the bound scales with |x|); compiled == eager bits.
        let xg = host_f32(r.get(&format!("gelu.{t}.x")));
        let yg = host_f32(r.get(&format!("gelu.{t}")));
        let eps = if dt == Dtype::Float32 {
            1e-6
        } else {
            1.0 / 256.0
        };
        for (i, (&a, &b)) in xg.iter().zip(&yg).enumerate() {
            let a = a as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let want = 0.5 * a * (1.0 + (c * (a + 0.044715 * a * a * a)).tanh());
            let tol = eps * (4.0 * a.abs() + 2.0 * want.abs());
            assert!(
                (b as f64 - want).abs() <= tol,
                "gelu.{t}[{i}]: {b} vs {want}"
            );
        }
        same(r, &format!("gated.{t}"), &format!("gated_compiled.{t}"));
        same(
            r,
            &format!("gated.{t}"),
            &format!("gated_compiled_again.{t}"),
        );
        note(format!(
            "gelu.{t} ≈ formula; compiled closure == eager bits (twice)"
        ));

        // argpartition: last 4 indices are the host top-4 set; take_along_axis reads them.
        let scores = host_f32(r.get(&format!("router.{t}.scores")));
        let part = host_u32(r.get(&format!("argpartition.{t}")));
        let vals = host_f32(r.get(&format!("take_along_axis.{t}")));
        for row in 0..TOKENS as usize {
            let s = &scores[row * 32..(row + 1) * 32];
            let mut sorted: Vec<usize> = (0..32).collect();
            sorted.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
            // Ties at the boundary make the set ambiguous; seeded inputs have none.
            assert!(
                s[sorted[3]] != s[sorted[4]],
                "router.{t}: tie at the top-4 boundary"
            );
            let want: BTreeSet<u32> = sorted[..4].iter().map(|&i| i as u32).collect();
            let got: BTreeSet<u32> = part[row * 32 + 28..(row + 1) * 32]
                .iter()
                .copied()
                .collect();
            assert_eq!(got, want, "argpartition.{t} row {row}");
            for (j, &i) in part[row * 32 + 28..(row + 1) * 32].iter().enumerate() {
                assert_eq!(
                    vals[row * 4 + j].to_bits(),
                    s[i as usize].to_bits(),
                    "take_along_axis.{t}"
                );
            }
        }
        note(format!(
            "argpartition.{t} top-4 set == host top-4; take_along_axis == host lookup"
        ));

        // take == host gather, with axis and flat.
        let table = bytes(r.get(&format!("take.{t}.table")));
        let item = table.len() / (50 * 16);
        let rowb = 16 * item;
        let got = bytes(r.get(&format!("take_axis.{t}")));
        for (j, id) in [3usize, 0, 49, 7, 7, 21, 30].iter().enumerate() {
            assert!(
                got[j * rowb..(j + 1) * rowb] == table[id * rowb..(id + 1) * rowb],
                "take_axis.{t}"
            );
        }
        let got = bytes(r.get(&format!("take_flat.{t}")));
        for (j, id) in [0usize, 17, 799, 400].iter().enumerate() {
            assert!(
                got[j * item..(j + 1) * item] == table[id * item..(id + 1) * item],
                "take_flat.{t}"
            );
        }
        note(format!("take.{t} == host gather (axis 0 and flat)"));
    }
    Ok(done)
}
