//! Splitting into many views with few ops: the parts are the slices, in few ops.

use runtime::mlx_rs::Array;
use runtime::mlx_rs::ops::indexing::{Ellipsis, TryIndexOp};
use runtime::nn::split::split_sizes;

fn values(a: &Array) -> Vec<f32> {
    let a = a.contiguous().unwrap();
    a.eval().unwrap();
    a.as_slice::<f32>().to_vec()
}

#[test]
fn parts_are_the_slices_in_few_ops() {
    let x = Array::from_iter(0..2 * 3 * 420, &[2, 3, 420])
        .as_dtype(runtime::mlx_rs::Dtype::Float32)
        .unwrap();
    x.eval().unwrap();
    for (sizes, ops) in [
        (vec![300, 60, 60], 1),
        (vec![10; 42], 6),
        (vec![4; 105], 13),
        (vec![420], 0),
    ] {
        let parts = split_sizes(&x, &sizes, -1).unwrap();
        let refs: Vec<&Array> = parts.iter().collect();
        let counted = runtime::graph::count_ops(&refs).unwrap();
        assert_eq!(counted, ops, "{} parts", sizes.len());
        assert_eq!(parts.len(), sizes.len());
        let mut start = 0;
        for (part, n) in parts.iter().zip(&sizes) {
            let slice = x.try_index((Ellipsis, start..start + n)).unwrap();
            assert_eq!(part.shape(), slice.shape());
            assert_eq!(values(part), values(&slice), "part at {start}");
            start += n;
        }
    }
}
