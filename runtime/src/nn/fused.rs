//! Projections of one input as one quantized matmul: the packed weights of several
//! linears concatenated along their output axis, the product split back.
//!
//! Every output element is the same dot product over the same input row as in its own
//! matmul, so the bytes are the same as separate projections (`scripts/fusion-probe.py`
//! checks the kernels on a backend; the parity gate checks whole models). What changes
//! is how many kernels a decode step launches: one for q/k/v instead of three, one for
//! gate/up instead of two.

use mlx_rs::Array;
use mlx_rs::ops::indexing::TryIndexOp;

use crate::error::{Error, Result};
use crate::nn::composition::Composition;
use crate::nn::linear::{Linear, QuantizedWeight};
use crate::nn::split::split_sizes;
use crate::options::ExecOptions;

/// Several quantized projections of the same input, fused.
#[derive(Debug, Clone)]
pub struct FusedProjection {
    /// The concatenated weight `[sum(outs), in]`.
    weight: QuantizedWeight,
    /// Output features of each part, in order.
    outs: Vec<i32>,
}

impl FusedProjection {
    /// Fuses `parts` into one weight and returns it with each part as a view of it (the
    /// same values, no second copy in memory). `None` when the parts cannot share one
    /// matmul: any float weight, or different quantization, input width or dtypes.
    pub fn fuse(parts: &[&Linear]) -> Result<Option<(FusedProjection, Vec<Linear>)>> {
        let quant: Option<Vec<&QuantizedWeight>> = parts
            .iter()
            .map(|p| match p {
                Linear::Quantized(q) => Some(q),
                Linear::Float { .. } => None,
            })
            .collect();
        let Some(quant) = quant else {
            return Ok(None);
        };
        let Some(first) = quant.first() else {
            return Ok(None);
        };
        let compatible = |q: &QuantizedWeight| {
            q.spec == first.spec
                && q.weight.ndim() == 2
                && q.scales.ndim() == 2
                && q.biases.ndim() == 2
                && q.weight.dim(1) == first.weight.dim(1)
                && q.scales.dim(1) == first.scales.dim(1)
                && q.weight.dtype() == first.weight.dtype()
                && q.scales.dtype() == first.scales.dtype()
                && q.biases.dtype() == first.biases.dtype()
        };
        if quant.len() < 2 || !quant.iter().all(|q| compatible(q)) {
            return Ok(None);
        }
        let cat = |pick: fn(&QuantizedWeight) -> &Array| -> Result<Array> {
            let arrays: Vec<&Array> = quant.iter().map(|q| pick(q)).collect();
            Ok(mlx_rs::ops::concatenate(&arrays, 0)?)
        };
        let weight = QuantizedWeight {
            weight: cat(|q| &q.weight)?,
            scales: cat(|q| &q.scales)?,
            biases: cat(|q| &q.biases)?,
            spec: first.spec,
        };
        let outs: Vec<i32> = quant.iter().map(|q| q.weight.dim(0)).collect();
        let mut views = Vec::with_capacity(outs.len());
        let mut start = 0;
        for &n in &outs {
            let rows = |a: &Array| a.try_index(start..start + n);
            views.push(QuantizedWeight {
                weight: rows(&weight.weight)?,
                scales: rows(&weight.scales)?,
                biases: rows(&weight.biases)?,
                spec: weight.spec,
            });
            start += n;
        }
        // One evaluation: the fused arrays, and the views as slices of their buffers.
        let mut arrays = vec![&weight.weight, &weight.scales, &weight.biases];
        for v in &views {
            arrays.extend([&v.weight, &v.scales, &v.biases]);
        }
        mlx_rs::transforms::eval(arrays)?;
        let views = views.into_iter().map(Linear::Quantized).collect();
        Ok(Some((FusedProjection { weight, outs }, views)))
    }

    /// [`FusedProjection::fuse`] of the linears in `slots`, each then replaced by its view
    /// of the fused weight; the slots stay as they were when they cannot be fused.
    pub fn fuse_in_place(slots: &mut [&mut Linear]) -> Result<Option<FusedProjection>> {
        let parts: Vec<&Linear> = slots.iter().map(|s| &**s).collect();
        let Some((fused, views)) = Self::fuse(&parts)? else {
            return Ok(None);
        };
        for (slot, view) in slots.iter_mut().zip(views) {
            **slot = view;
        }
        Ok(Some(fused))
    }

    /// The parts' products `x Wᵢᵀ`, in order, from one quantized matmul ([`Self::product`])
    /// split by one `split` (one op for all the parts, where a slice each would be one op
    /// per part).
    pub fn forward(&self, x: &Array, options: &ExecOptions) -> Result<Vec<Array>> {
        split_sizes(&self.product(x, options)?, &self.outs, -1)
    }

    /// The parts' products side by side, unsplit: `x Wᵀ` of the concatenated weight, as
    /// `options` run it ([`QuantizedWeight::matmul_t_with`], whose rule reads only the
    /// input width: a part run on its own, [`Linear::forward_with`], takes the same
    /// kernel).
    pub fn product(&self, x: &Array, options: &ExecOptions) -> Result<Array> {
        self.weight.matmul_t_with(x, options)
    }

    /// [`FusedProjection::forward`] as exactly `N` parts.
    pub fn forward_parts<const N: usize>(
        &self,
        x: &Array,
        options: &ExecOptions,
    ) -> Result<[Array; N]> {
        let parts = self.forward(x, options)?;
        let n = parts.len();
        parts.try_into().map_err(|_| {
            Error::Unsupported(format!(
                "a fused projection of {n} parts where {N} were expected"
            ))
        })
    }

    /// The concatenated weight.
    pub fn weight(&self) -> &QuantizedWeight {
        &self.weight
    }

    /// How many projections are fused.
    pub fn parts(&self) -> usize {
        self.outs.len()
    }
}

/// The products `x Wᵢᵀ` of `linears` as `options` run them: from `fused`, their fused
/// form, where `composition` picks it for `x`, else one matmul each (the same kernel
/// either way, see [`FusedProjection::product`]).
pub fn products<const N: usize>(
    linears: [&Linear; N],
    fused: Option<&FusedProjection>,
    x: &Array,
    composition: Composition,
    options: &ExecOptions,
) -> Result<[Array; N]> {
    match composition.fused(fused, x) {
        Some(f) => f.forward_parts(x, options),
        None => {
            let mut out = Vec::with_capacity(N);
            for l in linears {
                out.push(l.forward_with(x, options)?);
            }
            out.try_into()
                .map_err(|_| Error::Unsupported(format!("other than {N} separate products")))
        }
    }
}
