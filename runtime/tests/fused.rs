//! Fused projections: one quantized matmul over concatenated weights gives the bytes of
//! the separate matmuls, and the separate weights become views of the fused one.

use runtime::mlx_rs::{Array, Dtype};
use runtime::nn::Composition;
use runtime::nn::Linear;
use runtime::nn::fused::FusedProjection;
use runtime::nn::linear::QuantizedWeight;
use runtime::options::ExecOptions;
use runtime::quantization::QuantSpec;

fn quantized(out: i32, input: i32, seed: u64) -> Linear {
    let key = runtime::mlx_rs::random::key(seed).unwrap();
    let w = runtime::mlx_rs::random::normal::<f32>(&[out, input], None, None, &key)
        .unwrap()
        .as_dtype(Dtype::Bfloat16)
        .unwrap();
    let (weight, scales, biases) = runtime::mlx_rs::ops::quantize(&w, 64, 4).unwrap();
    Linear::Quantized(QuantizedWeight {
        weight,
        scales,
        biases,
        spec: QuantSpec {
            bits: 4,
            group_size: 64,
        },
    })
}

fn bytes(a: &Array) -> Vec<u16> {
    let a = a.as_dtype(Dtype::Bfloat16).unwrap().contiguous().unwrap();
    a.eval().unwrap();
    a.as_slice::<half::bf16>()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn fused_parts_equal_separate_matmuls_byte_for_byte() {
    let parts = [
        quantized(256, 128, 1),
        quantized(64, 128, 2),
        quantized(64, 128, 3),
    ];
    let key = runtime::mlx_rs::random::key(9).unwrap();
    for rows in [1, 5] {
        let x = runtime::mlx_rs::random::normal::<f32>(&[2, rows, 128], None, None, &key)
            .unwrap()
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        let refs: Vec<&Linear> = parts.iter().collect();
        let (fused, views) = FusedProjection::fuse(&refs).unwrap().expect("fusable");
        assert_eq!(fused.parts(), 3);
        let options = ExecOptions::default();
        let together = fused.forward(&x, &options).unwrap();
        for ((p, v), t) in parts.iter().zip(&views).zip(&together) {
            let alone = bytes(&p.forward_with(&x, &options).unwrap());
            assert_eq!(alone, bytes(t), "fused part differs ({rows} rows)");
            assert_eq!(
                alone,
                bytes(&v.forward_with(&x, &options).unwrap()),
                "view differs"
            );
        }
    }
}

#[test]
fn float_or_mismatched_weights_are_not_fused() {
    let float = Linear::Float {
        weight: runtime::mlx_rs::ops::zeros::<f32>(&[8, 64]).unwrap(),
    };
    let q = quantized(64, 128, 4);
    assert!(FusedProjection::fuse(&[&float, &q]).unwrap().is_none());
    let other_width = quantized(64, 192, 5);
    assert!(
        FusedProjection::fuse(&[&q, &other_width])
            .unwrap()
            .is_none()
    );
    assert!(FusedProjection::fuse(&[&q]).unwrap().is_none());
}

#[test]
fn fused_form_is_picked_only_for_single_token_steps() {
    let parts = [quantized(64, 128, 6), quantized(64, 128, 7)];
    let (fused, _) = FusedProjection::fuse(&[&parts[0], &parts[1]])
        .unwrap()
        .expect("fusable");
    let one = runtime::mlx_rs::ops::zeros::<f32>(&[2, 1, 128]).unwrap();
    let many = runtime::mlx_rs::ops::zeros::<f32>(&[1, 7, 128]).unwrap();
    assert!(Composition::SingleToken.fused(Some(&fused), &one).is_some());
    assert!(
        Composition::SingleToken
            .fused(Some(&fused), &many)
            .is_none()
    );
    assert!(Composition::Reference.fused(Some(&fused), &one).is_none());
}

#[test]
fn fused_product_is_split_by_one_op() {
    let parts = [
        quantized(128, 128, 8),
        quantized(64, 128, 9),
        quantized(64, 128, 10),
    ];
    let refs: Vec<&Linear> = parts.iter().collect();
    let (fused, _) = FusedProjection::fuse(&refs).unwrap().expect("fusable");
    let x = runtime::mlx_rs::ops::zeros_dtype(&[1, 1, 128], Dtype::Bfloat16).unwrap();
    x.eval().unwrap();
    let together = fused.forward(&x, &ExecOptions::default()).unwrap();
    let outputs: Vec<&Array> = together.iter().collect();
    let ops = runtime::graph::histogram(&runtime::graph::dot(&outputs).unwrap());
    assert_eq!(ops.get("QuantizedMatmul"), Some(&1), "{ops:?}");
    assert_eq!(ops.get("Split"), Some(&1), "{ops:?}");
    assert_eq!(
        ops.values().sum::<usize>(),
        2,
        "only the matmul and the split: {ops:?}"
    );
}

fn takes_fast_plain(l: &Linear) -> bool {
    match l {
        Linear::Quantized(q) => q.takes_fast_plain(),
        Linear::Float { .. } => panic!("a float weight"),
    }
}

/// The parity gate compares the generated single-token step (one fused q/k/v product)
/// with the monolith (three separate ones): under `fast` each part must take the kernel
/// the whole takes, whatever its own size.
#[test]
fn parts_of_a_fused_projection_route_as_the_whole() {
    use runtime::nn::linear::FAST_PLAIN_MIN_INPUT;
    for input in [FAST_PLAIN_MIN_INPUT - 64, FAST_PLAIN_MIN_INPUT] {
        let parts = [
            quantized(256, input, 1),
            quantized(8, input, 2),
            quantized(8, input, 3),
        ];
        let refs: Vec<&Linear> = parts.iter().collect();
        let (fused, views) = FusedProjection::fuse(&refs).unwrap().expect("fusable");
        let whole = fused.weight().takes_fast_plain();
        assert_eq!(whole, input >= FAST_PLAIN_MIN_INPUT, "input {input}");
        for (part, view) in parts.iter().zip(&views) {
            assert_eq!(takes_fast_plain(part), whole, "input {input}: a part alone");
            assert_eq!(
                takes_fast_plain(view),
                whole,
                "input {input}: a part's view"
            );
        }
    }
}
