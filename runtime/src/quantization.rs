//! The weight quantization map of MLX-style configs: a global `{group_size, bits, mode}`
//! plus per-module overrides keyed by module path (gemma4.md §7).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::error::Result;
use crate::json::Obj;

/// Affine quantization parameters of one module (or one KV cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuantSpec {
    /// Bits per element: 2, 3, 4, 5, 6 or 8.
    pub bits: u32,
    /// Elements sharing one scale and bias: 32, 64 or 128.
    pub group_size: u32,
}

impl QuantSpec {
    /// The bit widths MLX's affine quantization supports.
    pub const BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];
    /// The group sizes MLX's affine quantization supports.
    pub const GROUPS: [u32; 3] = [32, 64, 128];

    /// Checks bits and group size against what MLX supports.
    pub fn validate(self) -> std::result::Result<Self, String> {
        if !Self::BITS.contains(&self.bits) {
            return Err(format!(
                "bits must be one of {:?}, found {}",
                Self::BITS,
                self.bits
            ));
        }
        if !Self::GROUPS.contains(&self.group_size) {
            return Err(format!(
                "group_size must be one of {:?}, found {}",
                Self::GROUPS,
                self.group_size
            ));
        }
        Ok(self)
    }

    /// Columns of the packed uint32 weight for `in_dims` inputs.
    pub fn packed_cols(self, in_dims: usize) -> usize {
        in_dims * self.bits as usize / 32
    }

    /// Columns of scales and biases for `in_dims` inputs.
    pub fn group_cols(self, in_dims: usize) -> usize {
        in_dims / self.group_size as usize
    }
}

impl fmt::Display for QuantSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-bit group {}", self.bits, self.group_size)
    }
}

/// Module-path prefixes of mlx-community (`language_model.model.`) and flat text
/// (`model.`) checkpoints; paths are stored without them.
const PREFIXES: [&str; 2] = ["language_model.model.", "model."];

/// Strips a checkpoint prefix from a module path or tensor name.
pub fn strip_prefix(path: &str) -> &str {
    PREFIXES
        .iter()
        .find_map(|p| path.strip_prefix(p))
        .unwrap_or(path)
}

/// The `quantization` block of a config.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuantizationMap {
    /// The default for every quantizable module.
    pub global: Option<QuantSpec>,
    /// Per-module entries (paths without checkpoint prefix); `None` = left in float.
    pub overrides: BTreeMap<String, Option<QuantSpec>>,
}

impl QuantizationMap {
    /// Reads the block at `key` of `file`.
    pub fn from_value(file: &str, key: &str, value: &Value) -> Result<Self> {
        let obj = Obj::new(file, key, value)?;
        let mut map = QuantizationMap::default();
        let mut global_bits = None;
        let mut global_group = None;
        for (k, v) in obj.entries() {
            match k.as_str() {
                "bits" => global_bits = Some(obj.u32("bits")?),
                "group_size" => global_group = Some(obj.u32("group_size")?),
                "mode" => check_mode(&obj, "mode", obj.str("mode")?)?,
                "quant_method" | "linear_class" | "quantize_activations" => {}
                path => {
                    let spec = match v {
                        Value::Bool(false) => None,
                        Value::Object(_) => Some(read_entry(&obj.child(path, "an object")?)?),
                        other => {
                            return Err(obj.err(
                                path,
                                format!(
                                    "expected {{bits, group_size}} or false, found {}",
                                    crate::json::kind(other)
                                ),
                            ));
                        }
                    };
                    map.overrides.insert(strip_prefix(path).to_owned(), spec);
                }
            }
        }
        match (global_bits, global_group) {
            (Some(bits), Some(group_size)) => {
                let spec = QuantSpec { bits, group_size };
                map.global = Some(spec.validate().map_err(|m| obj.err("bits", m))?);
            }
            (None, None) => {}
            (Some(_), None) => return Err(obj.err("group_size", "missing beside `bits`")),
            (None, Some(_)) => return Err(obj.err("bits", "missing beside `group_size`")),
        }
        Ok(map)
    }

    /// The quantization of `module` (a path without checkpoint prefix), if any entry or
    /// the global default applies. Whether the module *is* quantized is decided by the
    /// presence of its `scales` tensor (the mlx-lm loader rule).
    pub fn lookup(&self, module: &str) -> Option<QuantSpec> {
        match self.overrides.get(module) {
            Some(spec) => *spec,
            None => self.global,
        }
    }

    /// Whether `module` has an explicit entry.
    pub fn has_override(&self, module: &str) -> bool {
        self.overrides.contains_key(module)
    }
}

fn read_entry(o: &Obj<'_>) -> Result<QuantSpec> {
    if let Some(mode) = o.opt_str("mode")? {
        check_mode(o, "mode", mode)?;
    }
    let bits = o.u32("bits")?;
    let group_size = o.opt_u32("group_size")?.unwrap_or(64);
    QuantSpec { bits, group_size }
        .validate()
        .map_err(|m| o.err("bits", m))
}

fn check_mode(o: &Obj<'_>, key: &str, mode: &str) -> Result<()> {
    if mode == "affine" {
        Ok(())
    } else {
        Err(o.err(
            key,
            format!("only affine quantization is supported, found {mode:?}"),
        ))
    }
}
