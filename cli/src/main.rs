//! The `mlx-aot` binary.
fn main() {}
