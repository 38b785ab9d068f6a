//! The safetensors header, parsed and checked before any tensor is read: an 8-byte
//! little-endian length, a JSON map of `name -> {dtype, shape, data_offsets}`, then the
//! data. Every tensor must lie inside the data, match its dtype × shape byte length, and
//! not overlap another.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// The largest header accepted (the format's own limit is 100 MB).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Element types of safetensors files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorDtype {
    /// bool
    Bool,
    /// u8
    U8,
    /// i8
    I8,
    /// u16
    U16,
    /// i16
    I16,
    /// u32
    U32,
    /// i32
    I32,
    /// u64
    U64,
    /// i64
    I64,
    /// f16
    F16,
    /// bf16
    BF16,
    /// f32
    F32,
    /// f64
    F64,
}

impl TensorDtype {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "BOOL" => Self::Bool,
            "U8" => Self::U8,
            "I8" => Self::I8,
            "U16" => Self::U16,
            "I16" => Self::I16,
            "U32" => Self::U32,
            "I32" => Self::I32,
            "U64" => Self::U64,
            "I64" => Self::I64,
            "F16" => Self::F16,
            "BF16" => Self::BF16,
            "F32" => Self::F32,
            "F64" => Self::F64,
            _ => return None,
        })
    }

    /// The safetensors type of an MLX dtype.
    pub fn of(dtype: mlx_rs::Dtype) -> Option<Self> {
        use mlx_rs::Dtype as D;
        Some(match dtype {
            D::Bool => Self::Bool,
            D::Uint8 => Self::U8,
            D::Int8 => Self::I8,
            D::Uint16 => Self::U16,
            D::Int16 => Self::I16,
            D::Uint32 => Self::U32,
            D::Int32 => Self::I32,
            D::Uint64 => Self::U64,
            D::Int64 => Self::I64,
            D::Float16 => Self::F16,
            D::Bfloat16 => Self::BF16,
            D::Float32 => Self::F32,
            D::Float64 => Self::F64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Self::Bool | Self::U8 | Self::I8 => 1,
            Self::U16 | Self::I16 | Self::F16 | Self::BF16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 => 8,
        }
    }

    /// Whether the type is a float a weight or activation can have.
    pub fn is_float(self) -> bool {
        matches!(self, Self::F16 | Self::BF16 | Self::F32)
    }
}

/// One tensor's entry in a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: TensorDtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Byte range inside the data section.
    pub start: u64,
    /// End of the byte range (exclusive).
    pub end: u64,
}

/// A checked header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// Tensors by name.
    pub tensors: BTreeMap<String, TensorInfo>,
    /// `__metadata__`.
    pub metadata: BTreeMap<String, String>,
    /// Bytes before the data section (8 + header length).
    pub data_start: u64,
}

impl Header {
    /// Reads and checks the header of `path` against the file's size.
    pub fn read(path: &Path) -> Result<Header> {
        let name = path.display().to_string();
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut len_bytes = [0u8; 8];
        file.read_exact(&mut len_bytes).map_err(|_| {
            Error::weights(
                &name,
                "(header)",
                format!("file of {file_len} bytes is too short for a safetensors header"),
            )
        })?;
        let header_len = u64::from_le_bytes(len_bytes);
        check_header_len(&name, header_len, file_len)?;
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header)
            .map_err(|e| Error::io(path, e))?;
        Header::parse(&name, &header, file_len)
    }

    /// Parses and checks a whole safetensors file held in memory (length prefix, header,
    /// data); `name` names it in errors. The same checks as [`Header::read`], without a
    /// file: what tests and the fuzz targets call.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Header> {
        let file_len = bytes.len() as u64;
        let len_bytes: [u8; 8] =
            bytes
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| {
                    Error::weights(
                        name,
                        "(header)",
                        format!("file of {file_len} bytes is too short for a safetensors header"),
                    )
                })?;
        let header_len = u64::from_le_bytes(len_bytes);
        check_header_len(name, header_len, file_len)?;
        // check_header_len bounds header_len by the file's length, so the slice exists.
        let header = &bytes[8..8 + header_len as usize];
        Header::parse(name, header, file_len)
    }

    /// Parses the JSON `header` of a file of `file_len` bytes; `name` names it in errors.
    pub fn parse(name: &str, header: &[u8], file_len: u64) -> Result<Header> {
        let data_start = 8 + header.len() as u64;
        let data_len = file_len.checked_sub(data_start).ok_or_else(|| {
            Error::weights(name, "(header)", "the header runs past the end of the file")
        })?;
        let value: Value = serde_json::from_slice(header).map_err(|e| {
            Error::weights(name, "(header)", format!("header is not valid JSON: {e}"))
        })?;
        let map = value
            .as_object()
            .ok_or_else(|| Error::weights(name, "(header)", "header is not a JSON object"))?;
        let mut tensors = BTreeMap::new();
        let mut metadata = BTreeMap::new();
        for (key, entry) in map {
            if key == "__metadata__" {
                // MLX writes `null` when there is no metadata.
                if entry.is_null() {
                    continue;
                }
                let m = entry.as_object().ok_or_else(|| {
                    Error::weights(name, "__metadata__", "expected an object of strings")
                })?;
                for (k, v) in m {
                    let v = v.as_str().ok_or_else(|| {
                        Error::weights(
                            name,
                            "__metadata__",
                            format!("value of {k:?} is not a string"),
                        )
                    })?;
                    metadata.insert(k.clone(), v.to_owned());
                }
                continue;
            }
            tensors.insert(key.clone(), parse_entry(name, key, entry, data_len)?);
        }
        // No two tensors may share bytes.
        let mut spans: Vec<(&String, &TensorInfo)> = tensors.iter().collect();
        spans.sort_by_key(|(_, t)| (t.start, t.end));
        for pair in spans.windows(2) {
            let ((a, ta), (b, tb)) = (pair[0], pair[1]);
            if tb.start < ta.end {
                return Err(Error::weights(
                    name,
                    b.as_str(),
                    format!(
                        "bytes {}..{} overlap tensor `{a}` ({}..{})",
                        tb.start, tb.end, ta.start, ta.end
                    ),
                ));
            }
        }
        Ok(Header {
            tensors,
            metadata,
            data_start,
        })
    }
}

/// The header length must fit the file and the format's limit.
pub fn check_header_len(name: &str, header_len: u64, file_len: u64) -> Result<()> {
    if header_len > MAX_HEADER_BYTES {
        return Err(Error::weights(
            name,
            "(header)",
            format!("header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit"),
        ));
    }
    if header_len.saturating_add(8) > file_len {
        return Err(Error::weights(
            name,
            "(header)",
            format!(
                "header length {header_len} runs past the end of the {file_len}-byte file (truncated?)"
            ),
        ));
    }
    Ok(())
}

fn parse_entry(file: &str, name: &str, entry: &Value, data_len: u64) -> Result<TensorInfo> {
    let bad = |msg: String| Error::weights(file, name, msg);
    let obj = entry
        .as_object()
        .ok_or_else(|| bad("entry is not an object".into()))?;
    let dtype_s = obj
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("missing `dtype`".into()))?;
    let dtype =
        TensorDtype::parse(dtype_s).ok_or_else(|| bad(format!("unknown dtype {dtype_s:?}")))?;
    let shape = obj
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("missing `shape`".into()))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad("`shape` must be a list of non-negative integers".into()))?;
    let offsets = obj
        .get("data_offsets")
        .and_then(Value::as_array)
        .filter(|o| o.len() == 2)
        .and_then(|o| Some((o[0].as_u64()?, o[1].as_u64()?)))
        .ok_or_else(|| bad("`data_offsets` must be [start, end]".into()))?;
    let (start, end) = offsets;
    if start > end {
        return Err(bad(format!("data_offsets [{start}, {end}] run backwards")));
    }
    if end > data_len {
        return Err(bad(format!(
            "data_offsets end at byte {end} but the data section holds {data_len} bytes (truncated file?)"
        )));
    }
    let elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| bad(format!("shape {shape:?} is too large")))?;
    let bytes = elements
        .checked_mul(dtype.size())
        .ok_or_else(|| bad(format!("shape {shape:?} is too large")))?;
    if bytes != end - start {
        return Err(bad(format!(
            "{dtype_s} {shape:?} needs {bytes} bytes but data_offsets give {}",
            end - start
        )));
    }
    if shape.iter().any(|&d| d > i32::MAX as usize) {
        return Err(bad(format!(
            "dimension in {shape:?} exceeds what MLX indexes"
        )));
    }
    Ok(TensorInfo {
        dtype,
        shape,
        start,
        end,
    })
}
