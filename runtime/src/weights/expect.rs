//! Checking a catalog against what a model expects, before loading: presence, dtype and
//! shape of every tensor, and the quantization of every quantized module.

use std::collections::HashMap;

use mlx_rs::Array;

use super::catalog::Catalog;
use super::header::TensorDtype;
use crate::error::{Error, Result};
use crate::nn::linear::QuantizedWeight;
use crate::nn::moe::SwitchLinear;
use crate::nn::multi_linear::MultiLinear;
use crate::nn::{Embedding, Linear};
use crate::quantization::{QuantSpec, QuantizationMap};

/// How a module's weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// A float `weight`.
    Float,
    /// `weight` (u32), `scales`, `biases`.
    Quantized(QuantSpec),
}

/// Collects the tensors a model needs, checking each against the catalog.
pub struct Expect<'a> {
    catalog: &'a Catalog,
    quantization: Option<&'a QuantizationMap>,
    wanted: Vec<String>,
    file: String,
}

impl<'a> Expect<'a> {
    /// Starts checking `catalog`, with the config's quantization map if any.
    pub fn new(catalog: &'a Catalog, quantization: Option<&'a QuantizationMap>) -> Self {
        Expect {
            catalog,
            quantization,
            wanted: Vec::new(),
            file: catalog.dir.display().to_string(),
        }
    }

    fn file_of(&self, name: &str) -> String {
        self.catalog
            .get(name)
            .map_or_else(|| self.file.clone(), |e| e.file.display().to_string())
    }

    /// A float tensor of exactly `shape`.
    pub fn float(&mut self, name: &str, shape: &[usize]) -> Result<()> {
        let entry = self.catalog.get(name).ok_or_else(|| {
            Error::weights(
                &self.file,
                name,
                format!("missing; expected a float tensor {shape:?}"),
            )
        })?;
        if !entry.info.dtype.is_float() {
            return Err(Error::weights(
                self.file_of(name),
                name,
                format!("dtype {:?}, expected bf16, f16 or f32", entry.info.dtype),
            ));
        }
        if entry.info.shape != shape {
            return Err(Error::weights(
                self.file_of(name),
                name,
                format!("shape {:?}, expected {shape:?}", entry.info.shape),
            ));
        }
        self.wanted.push(name.to_owned());
        Ok(())
    }

    /// Whether a tensor exists.
    pub fn has(&self, name: &str) -> bool {
        self.catalog.contains(name)
    }

    /// The module `module` (`layers.0.self_attn.q_proj`) with weight `[.., out, in]`
    /// (`lead` = leading expert dims): float, or quantized when `module.scales` exists
    /// (per-module entry of the config, else bits/group inferred from the shapes).
    pub fn module(
        &mut self,
        module: &str,
        lead: &[usize],
        out_dims: usize,
        in_dims: usize,
    ) -> Result<Storage> {
        let weight = format!("{module}.weight");
        let scales = format!("{module}.scales");
        let biases = format!("{module}.biases");
        let mut shape = lead.to_vec();
        shape.extend([out_dims, in_dims]);
        if !self.catalog.contains(&scales) {
            self.float(&weight, &shape)?;
            return Ok(Storage::Float);
        }
        let s = self.catalog.get(&scales).expect("checked").info.clone();
        let w = self
            .catalog
            .get(&weight)
            .ok_or_else(|| {
                Error::weights(&self.file, weight.as_str(), "missing beside its `scales`")
            })?
            .info
            .clone();
        if !self.catalog.contains(&biases) {
            return Err(Error::weights(
                self.file_of(&scales),
                biases.as_str(),
                "missing: only affine quantization (weight, scales, biases) is supported",
            ));
        }
        let groups = *s.shape.last().unwrap_or(&0);
        let packed = *w.shape.last().unwrap_or(&0);
        let inferred =
            (groups > 0 && in_dims.is_multiple_of(groups) && (packed * 32).is_multiple_of(in_dims))
                .then(|| QuantSpec {
                    bits: (packed * 32 / in_dims) as u32,
                    group_size: (in_dims / groups) as u32,
                });
        // The config's entry (per module, else global) wins, as in mlx-lm's loader; the
        // shapes must then agree with it. Without a quantization block the shapes decide.
        let spec = match (self.quantization.and_then(|q| q.lookup(module)), inferred) {
            (Some(spec), _) | (None, Some(spec)) => spec,
            (None, None) => {
                return Err(Error::weights(
                    self.file_of(&scales),
                    scales.as_str(),
                    format!(
                        "shape {:?} with weight {:?} does not describe an affine quantization \
                         of {in_dims} inputs",
                        s.shape, w.shape
                    ),
                ));
            }
        };
        let spec = spec
            .validate()
            .map_err(|m| Error::weights(self.file_of(&scales), scales.as_str(), m))?;
        if !in_dims.is_multiple_of(spec.group_size as usize) {
            return Err(Error::weights(
                self.file_of(&weight),
                weight.as_str(),
                format!(
                    "{in_dims} inputs are not a multiple of group size {}",
                    spec.group_size
                ),
            ));
        }
        if w.dtype != TensorDtype::U32 {
            return Err(Error::weights(
                self.file_of(&weight),
                weight.as_str(),
                format!("dtype {:?}, expected U32 (packed)", w.dtype),
            ));
        }
        let mut packed_shape = lead.to_vec();
        packed_shape.extend([out_dims, spec.packed_cols(in_dims)]);
        if w.shape != packed_shape {
            return Err(Error::weights(
                self.file_of(&weight),
                weight.as_str(),
                format!(
                    "shape {:?}, expected {packed_shape:?} ({spec} of [{out_dims}, {in_dims}])",
                    w.shape
                ),
            ));
        }
        let mut group_shape = lead.to_vec();
        group_shape.extend([out_dims, spec.group_cols(in_dims)]);
        self.wanted.push(weight);
        self.float(&scales, &group_shape)?;
        self.float(&biases, &group_shape)?;
        Ok(Storage::Quantized(spec))
    }

    /// The names collected so far.
    pub fn wanted(&self) -> &[String] {
        &self.wanted
    }

    /// Ends checking: the names to load.
    pub fn finish(self) -> Vec<String> {
        self.wanted
    }
}

/// Tensors loaded by name, taken out as typed layers.
pub struct Loaded {
    arrays: HashMap<String, Array>,
}

impl Loaded {
    /// Wraps loaded arrays.
    pub fn new(arrays: HashMap<String, Array>) -> Self {
        Loaded { arrays }
    }

    /// Takes a tensor (checked present by [`Expect`]).
    pub fn take(&mut self, name: &str) -> Result<Array> {
        self.arrays
            .remove(name)
            .ok_or_else(|| Error::weights("(loaded weights)", name, "was not loaded"))
    }

    fn quantized(&mut self, module: &str, spec: QuantSpec) -> Result<QuantizedWeight> {
        Ok(QuantizedWeight {
            weight: self.take(&format!("{module}.weight"))?,
            scales: self.take(&format!("{module}.scales"))?,
            biases: self.take(&format!("{module}.biases"))?,
            spec,
        })
    }

    /// A linear layer.
    pub fn linear(&mut self, module: &str, storage: Storage) -> Result<Linear> {
        Ok(match storage {
            Storage::Float => Linear::Float {
                weight: self.take(&format!("{module}.weight"))?,
            },
            Storage::Quantized(spec) => Linear::Quantized(self.quantized(module, spec)?),
        })
    }

    /// An embedding table.
    pub fn embedding(&mut self, module: &str, storage: Storage) -> Result<Embedding> {
        Ok(match storage {
            Storage::Float => Embedding::Float {
                weight: self.take(&format!("{module}.weight"))?,
            },
            Storage::Quantized(spec) => Embedding::Quantized(self.quantized(module, spec)?),
        })
    }

    /// A per-expert linear layer.
    pub fn switch_linear(&mut self, module: &str, storage: Storage) -> Result<SwitchLinear> {
        Ok(match storage {
            Storage::Float => SwitchLinear::Float {
                weight: self.take(&format!("{module}.weight"))?,
            },
            Storage::Quantized(spec) => SwitchLinear::Quantized(self.quantized(module, spec)?),
        })
    }

    /// A per-head linear layer.
    pub fn multi_linear(&mut self, module: &str, storage: Storage) -> Result<MultiLinear> {
        Ok(match storage {
            Storage::Float => MultiLinear::Float {
                weight: self.take(&format!("{module}.weight"))?,
            },
            Storage::Quantized(spec) => MultiLinear::Quantized(self.quantized(module, spec)?),
        })
    }

    /// Every array still held (to evaluate them together).
    pub fn remaining(&self) -> usize {
        self.arrays.len()
    }
}
