//! The MoE block of Gemma 4 26B-A4B (gemma4.md §3.9): router, SwitchGLU experts over
//! `gather_qmm` / `gather_mm`, combined in argpartition order.

use mlx_rs::Array;

use crate::error::Result;
use crate::nn::activation::geglu;
use crate::nn::linear::{Linear, QuantizedWeight};
use crate::nn::norm::rms_norm;
use crate::nn::scalar;

/// A per-expert linear layer `[E, out, in]`.
#[derive(Debug, Clone)]
pub enum SwitchLinear {
    /// Float weights.
    Float {
        /// `[E, out, in]`.
        weight: Array,
    },
    /// Affine-quantized weights.
    Quantized(QuantizedWeight),
}

impl SwitchLinear {
    /// `x` through the experts in `indices` (`sorted` when the pairs were sorted).
    pub fn forward(&self, x: &Array, indices: &Array, sorted: bool) -> Result<Array> {
        Ok(match self {
            SwitchLinear::Float { weight } => {
                mlx_rs::ops::gather_mm(x, weight.swap_axes(-1, -2)?, None, indices, sorted)?
            }
            SwitchLinear::Quantized(q) => mlx_rs::ops::gather_qmm(
                x,
                &q.weight,
                &q.scales,
                &q.biases,
                None,
                indices,
                true,
                q.spec.group_size as i32,
                q.spec.bits as i32,
                sorted,
            )?,
        })
    }

    /// Bytes held by the weight arrays.
    pub fn nbytes(&self) -> usize {
        match self {
            SwitchLinear::Float { weight } => weight.nbytes(),
            SwitchLinear::Quantized(q) => q.nbytes(),
        }
    }
}

/// Router and experts of one layer.
#[derive(Debug, Clone)]
pub struct Moe {
    /// router.proj (H -> E).
    pub router_proj: Linear,
    /// router.scale `[H]`.
    pub router_scale: Array,
    /// router.per_expert_scale `[E]`.
    pub per_expert_scale: Array,
    /// Experts' gate projection.
    pub gate: SwitchLinear,
    /// Experts' up projection.
    pub up: SwitchLinear,
    /// Experts' down projection.
    pub down: SwitchLinear,
    /// top_k_experts.
    pub top_k: i32,
}

impl Moe {
    /// The router on the raw residual `h`: top-K expert indices (argpartition order) and
    /// their weights.
    pub fn route(&self, h: &Array, eps: f32) -> Result<(Array, Array)> {
        let hidden = self.router_scale.dim(-1) as f64;
        // The scalar is folded into the norm weight, as mlx-lm 0.32 composes it.
        let w = scalar::mul(&self.router_scale, hidden.powf(-0.5))?;
        let x = rms_norm(h, Some(&w), eps)?;
        let scores = self.router_proj.forward(&x)?;
        let k = self.top_k;
        let idx = top_k(&scores, k, TopK::for_default_device())?;
        let top = scores.take_along_axis(&idx, -1)?;
        let top = mlx_rs::ops::softmax_axis(&top, -1, false)?;
        let scale = self.per_expert_scale.take_axis(&idx, 0)?;
        Ok((idx, mlx_rs::ops::multiply(&top, &scale)?))
    }

    /// `sum_k w_k * expert_k(x)` (SwitchGLU with GeGLU, compiled when `compiled`), for
    /// `x` the pre-normed input.
    pub fn experts(
        &self,
        x: &Array,
        idx: &Array,
        weights: &Array,
        compiled: bool,
    ) -> Result<Array> {
        let w = weights.expand_dims(-1)?;
        let y = self.switch_glu(x, idx, compiled)?;
        Ok(mlx_rs::ops::multiply(&w, &y)?.sum_axis(-2, None)?)
    }

    fn switch_glu(&self, x: &Array, indices: &Array, compiled: bool) -> Result<Array> {
        switch_glu(
            [&self.gate, &self.up, &self.down],
            x,
            indices,
            |gate, up| geglu(gate, up, compiled),
        )
    }
}

/// mlx-lm's `SwitchGLU` over `[gate, up, down]`: `x` (`[.., H]`) through the experts of
/// `indices` (`[.., K]`), `down(activation(gate(x), up(x)))` per pair, `[.., K, H]`. With
/// 64 or more pairs they are sorted by expert first (and unsorted after), as the
/// reference sorts them.
pub fn switch_glu(
    [gate, up, down]: [&SwitchLinear; 3],
    x: &Array,
    indices: &Array,
    activation: impl Fn(&Array, &Array) -> Result<Array>,
) -> Result<Array> {
    let x = x.expand_dims_axes(&[-2, -3])?;
    // Many pairs: sort them so each expert's rows are contiguous.
    let sort = indices.size() >= 64;
    let (x, idx, inv) = if sort {
        let m = indices.dim(-1);
        let flat = indices.flatten(None, None)?;
        let order = mlx_rs::ops::argsort_axis(&flat, -1)?;
        let inv = mlx_rs::ops::argsort_axis(&order, -1)?;
        let rows = mlx_rs::ops::floor_divide(&order, Array::from_int(m).as_dtype(order.dtype())?)?;
        let x = x.flatten(0, -3)?.take_axis(&rows, 0)?;
        (x, flat.take_axis(&order, 0)?, Some(inv))
    } else {
        (x, indices.clone(), None)
    };
    let u = up.forward(&x, &idx, sort)?;
    let g = gate.forward(&x, &idx, sort)?;
    let mut y = down.forward(&activation(&g, &u)?, &idx, sort)?;
    if let Some(inv) = inv {
        y = y.take_axis(&inv, 0)?;
        y = mlx_rs::ops::unflatten(&y, 0, indices.shape())?;
    }
    Ok(y.squeeze_axes(&[-2])?)
}

/// How the router picks its K experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopK {
    /// `argpartition`, as the reference does: its order is the order the weighted sum
    /// over experts runs in, so the CPU and Metal keep it for bit-exactness with mlx-lm.
    Partition,
    /// The last K of a stable `argsort`. MLX's CUDA `argpartition` (a radix select)
    /// writes its output positions with shared-memory atomics, so nothing fixes the order
    /// of the experts, nor the choice among tied scores, from one evaluation to the next,
    /// and the MoE sum rounds by that order; CUDA's sort is a merge sort with a fixed
    /// order, so routing there uses it. (In 4 runs at 1,027 tokens the partition happened
    /// to repeat; this removes the chance.) Same experts as `Partition` up to ties, in
    /// ascending score order.
    Sort,
}

impl TopK {
    /// [`TopK::Sort`] where the default device is a CUDA GPU, else [`TopK::Partition`].
    pub fn for_default_device() -> TopK {
        if crate::backend::cuda_default() {
            TopK::Sort
        } else {
            TopK::Partition
        }
    }
}

/// The indices of the `k` largest scores along the last axis.
pub fn top_k(scores: &Array, k: i32, how: TopK) -> Result<Array> {
    let e = scores.dim(-1);
    let ranked = match how {
        TopK::Partition => mlx_rs::ops::argpartition_axis(scores, -k, -1)?,
        TopK::Sort => mlx_rs::ops::argsort_axis(scores, -1)?,
    };
    slice_last(&ranked, e - k, e)
}

/// `x[..., start:stop]`.
fn slice_last(x: &Array, start: i32, stop: i32) -> Result<Array> {
    use mlx_rs::ops::indexing::{Ellipsis, TryIndexOp};
    Ok(x.try_index((Ellipsis, start..stop))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CUDA routing must choose the experts the reference chooses: on distinct
    /// scores both ways give the same set of K.
    #[test]
    fn sorting_and_partitioning_pick_the_same_experts() {
        let scores = mlx_rs::random::normal::<f32>(
            &[37, 128],
            None,
            None,
            Some(&mlx_rs::random::key(7).unwrap()),
        )
        .unwrap();
        let sets = |how| {
            let idx = top_k(&scores, 8, how).unwrap();
            let sorted = mlx_rs::ops::sort_axis(&idx, -1).unwrap();
            sorted
                .as_dtype(mlx_rs::Dtype::Int32)
                .unwrap()
                .as_slice::<i32>()
                .to_vec()
        };
        let partition = sets(TopK::Partition);
        assert_eq!(partition.len(), 37 * 8);
        assert_eq!(partition, sets(TopK::Sort));
        // And they are the largest: the smallest chosen score beats every unchosen one.
        let idx = top_k(&scores, 8, TopK::Sort).unwrap();
        let chosen = scores
            .take_along_axis(&idx, -1)
            .unwrap()
            .min_axis(-1, None)
            .unwrap();
        let kth = mlx_rs::ops::sort_axis(&scores, -1).unwrap();
        let ninth = slice_last(&kth, 119, 120)
            .unwrap()
            .squeeze_axes(&[-1])
            .unwrap();
        let beats = mlx_rs::ops::gt(&chosen, &ninth).unwrap().all(None).unwrap();
        assert!(beats.try_item_exact::<bool>().unwrap());
    }
}
