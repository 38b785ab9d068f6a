//! Counting a lazy graph's operations by primitive, as `mlx-aot bench` reports them.

use runtime::graph;
use runtime::mlx_rs::Array;

#[test]
fn histogram_counts_each_primitive_once_per_node() {
    let a = Array::from_slice(&[1.0f32, 2.0], &[2]);
    let b = Array::from_slice(&[3.0f32, 4.0], &[2]);
    let sum = a.add(&b).unwrap();
    let out = sum.multiply(&sum).unwrap().add(&a).unwrap();
    let dot = graph::dot(&[&out]).unwrap();
    let h = graph::histogram(&dot);
    assert_eq!(h.get("Add"), Some(&2), "{h:?}");
    assert_eq!(h.get("Multiply"), Some(&1), "{h:?}");
    assert_eq!(h.len(), 2, "only the three operations, no inputs: {h:?}");
    assert_eq!(graph::count_ops(&[&out]).unwrap(), 3);
    // An evaluated array is a leaf: a graph built on it has only the new operation.
    out.eval().unwrap();
    let next = out.add(&b).unwrap();
    assert_eq!(graph::count_ops(&[&next]).unwrap(), 1);
}
