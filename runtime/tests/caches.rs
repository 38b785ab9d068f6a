//! The cache zoo's semantics (gemma4.md §4): growth, ring order, conversion, trimming,
//! signatures, bytes per token, masks and the kv policy.

use mlx_rs::{Array, Dtype};
use runtime::cache::{AnyCache, CacheGeometry, Kv, QuantTriple};
use runtime::kv_layout::KvLayout;
use runtime::kv_policy;
use runtime::nn::AttnMask;
use runtime::quantization::QuantSpec;
use runtime::signature::CacheSignature;

const Q4: QuantSpec = QuantSpec {
    bits: 4,
    group_size: 64,
};
const GEO: CacheGeometry = CacheGeometry {
    batch: 1,
    kv_heads: 2,
    head_dim: 64,
    dtype_bytes: 2,
};

/// `[1, 2, n, 64]` whose row `r` holds the value `first + r` (plus a per-column ramp so
/// quantization has something to do).
fn rows(first: usize, n: usize) -> Array {
    let mut data = Vec::with_capacity(2 * n * 64);
    for _h in 0..2 {
        for r in 0..n {
            for c in 0..64 {
                data.push((first + r) as f32 + c as f32 / 64.0);
            }
        }
    }
    // f32: bf16 cannot hold the row numbers above 256 exactly.
    Array::from_slice(&data, &[1, 2, n as i32, 64])
}

/// The first element of each row of head 0, as the token number it encodes.
fn row_ids(x: &Array) -> Vec<i64> {
    let x = x.as_dtype(Dtype::Float32).unwrap();
    let n = x.dim(2) as usize;
    let flat = x.flatten(None, None).unwrap();
    flat.eval().unwrap();
    let v = flat.as_slice::<f32>();
    (0..n).map(|r| v[r * 64].floor() as i64).collect()
}

fn float_kv(kv: Kv) -> (Array, Array) {
    match kv {
        Kv::Float { keys, values } => (keys, values),
        Kv::Quant { .. } => panic!("expected float K/V"),
    }
}

fn quant_kv(kv: Kv) -> (QuantTriple, QuantTriple, QuantSpec) {
    match kv {
        Kv::Quant { keys, values, spec } => (keys, values, spec),
        Kv::Float { .. } => panic!("expected quantized K/V"),
    }
}

fn bytes(a: &Array) -> Vec<u8> {
    let a = a.flatten(None, None).unwrap();
    a.eval().unwrap();
    match a.dtype() {
        Dtype::Uint32 => a
            .as_slice::<u32>()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        _ => {
            let f = a.as_dtype(Dtype::Float32).unwrap();
            f.eval().unwrap();
            f.as_slice::<f32>()
                .iter()
                .flat_map(|v| v.to_bits().to_le_bytes())
                .collect()
        }
    }
}

#[test]
fn plain_cache_grows_by_256_rows_and_fetches_the_valid_rows() {
    let mut c = AnyCache::new(CacheSignature::Plain, GEO, 16);
    let (k, _) = float_kv(c.update_and_fetch(&rows(0, 3), &rows(0, 3)).unwrap());
    assert_eq!(k.dim(2), 3);
    assert_eq!(row_ids(&k), [0, 1, 2]);
    for t in 3..300 {
        let (k, _) = float_kv(c.update_and_fetch(&rows(t, 1), &rows(t, 1)).unwrap());
        assert_eq!(k.dim(2) as usize, t + 1);
    }
    assert_eq!(c.offset(), 300);
    let (k, _) = float_kv(c.update_and_fetch(&rows(300, 1), &rows(300, 1)).unwrap());
    assert_eq!(row_ids(&k), (0..=300).collect::<Vec<_>>());
    assert_eq!(
        c.nbytes(),
        2 * 512 * 2 * 64 * 4,
        "two f32 buffers of 512 rows"
    );
}

#[test]
fn rotating_cache_keeps_the_window_in_ring_order() {
    let mut c = AnyCache::new(CacheSignature::Rotating, GEO, 4);
    // A long first chunk is stored whole (the mask limits what each query sees).
    let (k, _) = float_kv(c.update_and_fetch(&rows(0, 6), &rows(0, 6)).unwrap());
    assert_eq!(row_ids(&k), [0, 1, 2, 3, 4, 5]);
    // The next single token trims to the window and writes in ring order.
    let (k, _) = float_kv(c.update_and_fetch(&rows(6, 1), &rows(6, 1)).unwrap());
    assert_eq!(row_ids(&k), [6, 3, 4, 5]);
    let (k, _) = float_kv(c.update_and_fetch(&rows(7, 1), &rows(7, 1)).unwrap());
    assert_eq!(row_ids(&k), [6, 7, 4, 5]);
    // A later chunk reorders into temporal order, keeps W-1 rows and appends.
    let (k, _) = float_kv(c.update_and_fetch(&rows(8, 2), &rows(8, 2)).unwrap());
    assert_eq!(row_ids(&k), [5, 6, 7, 8, 9]);
    assert_eq!(c.offset(), 10);
    assert!(!c.is_trimmable());
    assert!(c.trim(0, 1).is_err());
}

#[test]
fn rotating_cache_grows_in_place_before_it_fills() {
    let mut c = AnyCache::new(CacheSignature::Rotating, GEO, 4);
    for t in 0..3 {
        let (k, _) = float_kv(c.update_and_fetch(&rows(t, 1), &rows(t, 1)).unwrap());
        assert_eq!(k.dim(2) as usize, t + 1);
    }
    assert!(c.is_trimmable());
    assert_eq!(c.trim(0, 1).unwrap(), 1);
    assert_eq!(c.offset(), 2);
    let (k, _) = float_kv(c.update_and_fetch(&rows(9, 1), &rows(9, 1)).unwrap());
    assert_eq!(row_ids(&k), [0, 1, 9]);
}

#[test]
fn quantized_ring_equals_the_quantized_float_ring() {
    // Feed a float ring and a converted quantized ring the same tokens: the quantized
    // triples must be exactly the quantization of the float buffer (quantization is
    // per row, so where each row sits is all that matters).
    let mut f = AnyCache::new(CacheSignature::Rotating, GEO, 4);
    f.update_and_fetch(&rows(0, 3), &rows(0, 3)).unwrap();
    let mut q = f.clone().to_quantized(0, Q4).unwrap();
    assert_eq!(q.signature(), CacheSignature::RotatingQuant(Q4));
    assert_eq!(q.offset(), 3);
    for t in 3..11 {
        let (fk, fv) = float_kv(f.update_and_fetch(&rows(t, 1), &rows(t, 1)).unwrap());
        let (qk, qv, spec) = quant_kv(q.update_and_fetch(&rows(t, 1), &rows(t, 1)).unwrap());
        assert_eq!(spec, Q4);
        let ek = QuantTriple::quantize(&fk, Q4).unwrap();
        let ev = QuantTriple::quantize(&fv, Q4).unwrap();
        for (a, b) in [(&qk, &ek), (&qv, &ev)] {
            assert_eq!(bytes(&a.packed), bytes(&b.packed), "packed at step {t}");
            assert_eq!(bytes(&a.scales), bytes(&b.scales), "scales at step {t}");
            assert_eq!(bytes(&a.biases), bytes(&b.biases), "biases at step {t}");
        }
    }
}

#[test]
fn plain_cache_converts_with_its_padded_buffer() {
    let mut c = AnyCache::new(CacheSignature::Plain, GEO, 16);
    c.update_and_fetch(&rows(0, 5), &rows(0, 5)).unwrap();
    let mut q = c
        .to_quantized(
            0,
            QuantSpec {
                bits: 8,
                group_size: 64,
            },
        )
        .unwrap();
    assert_eq!(q.signature().to_string(), "kv:quant:8:64");
    assert_eq!(q.offset(), 5);
    let (k, _, _) = quant_kv(q.update_and_fetch(&rows(5, 1), &rows(5, 1)).unwrap());
    assert_eq!(k.len(), 6);
    assert!(
        q.to_quantized(0, Q4).is_err(),
        "an 8-bit cache cannot become 4-bit"
    );
}

#[test]
fn bytes_per_token_follow_kind_bits_and_group() {
    let plain = AnyCache::new(CacheSignature::Plain, GEO, 16);
    assert_eq!(plain.bytes_per_token(), 2 * 2 * 64 * 2);
    let q4 = AnyCache::new(CacheSignature::Quant(Q4), GEO, 16);
    // Per vector: 64 * 4 / 8 bytes packed + one bf16 scale and bias per group.
    assert_eq!(q4.bytes_per_token(), 2 * 2 * (32 + 4));
    let q8 = AnyCache::new(
        CacheSignature::RotatingQuant(QuantSpec {
            bits: 8,
            group_size: 32,
        }),
        GEO,
        16,
    );
    assert_eq!(q8.bytes_per_token(), 2 * 2 * (64 + 2 * 2 * 2));
}

#[test]
fn masks_follow_the_reference_rules() {
    let full = AnyCache::new(CacheSignature::Plain, GEO, 8);
    assert!(matches!(full.make_mask(1, 8).unwrap(), AttnMask::None));
    assert!(matches!(full.make_mask(5, 8).unwrap(), AttnMask::Causal));
    let mut ring = AnyCache::new(CacheSignature::Rotating, GEO, 8);
    assert!(matches!(ring.make_mask(5, 8).unwrap(), AttnMask::Causal));
    match ring.make_mask(10, 8).unwrap() {
        AttnMask::Array(m) => assert_eq!(m.shape(), [10, 10]),
        other => panic!("{other:?}"),
    }
    ring.update_and_fetch(&rows(0, 6), &rows(0, 6)).unwrap();
    // offset 6 + 3 tokens > window 8: an explicit window mask over 6 + 3 columns.
    match ring.make_mask(3, 8).unwrap() {
        AttnMask::Array(m) => {
            assert_eq!(m.shape(), [3, 9]);
            let m = m.as_dtype(Dtype::Int32).unwrap();
            m.eval().unwrap();
            let v = m.as_slice::<i32>();
            // Row 2 (position 8) sees columns 1..=8, not column 0 (8 - 0 >= 8).
            assert_eq!(&v[18..27], &[0, 1, 1, 1, 1, 1, 1, 1, 1]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(ring.make_mask(1, 8).unwrap(), AttnMask::None));
}

#[test]
fn kv_policy_converts_listed_caches_once_they_hold_tokens() {
    let layout = KvLayout::from_json_str(
        "kv.json",
        r#"[{"layer_idx": 0, "bits": 4}, {"layer_idx": 1, "bits": 8}]"#,
    )
    .unwrap();
    let mut caches = vec![
        AnyCache::new(CacheSignature::Rotating, GEO, 8),
        AnyCache::new(CacheSignature::Plain, GEO, 8),
        AnyCache::new(CacheSignature::Plain, GEO, 8),
    ];
    assert_eq!(
        kv_policy::apply(&mut caches, &layout).unwrap(),
        0,
        "empty caches stay float"
    );
    for c in &mut caches {
        c.update_and_fetch(&rows(0, 2), &rows(0, 2)).unwrap();
    }
    assert_eq!(kv_policy::apply(&mut caches, &layout).unwrap(), 2);
    let sigs: Vec<String> = caches.iter().map(|c| c.signature().to_string()).collect();
    assert_eq!(
        sigs,
        ["kv:rotating-quant:4:64", "kv:quant:8:64", "kv:plain"]
    );
    assert_eq!(
        kv_policy::apply(&mut caches, &layout).unwrap(),
        0,
        "converted once"
    );
}
