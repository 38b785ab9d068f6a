//! Typed reads from JSON objects, each failure naming the file and the key path.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A JSON object being read, with where it came from.
#[derive(Clone)]
pub struct Obj<'a> {
    file: &'a str,
    prefix: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    /// Wraps `value`, which must be an object.
    pub fn new(file: &'a str, prefix: impl Into<String>, value: &'a Value) -> Result<Self> {
        let prefix = prefix.into();
        let map = value.as_object().ok_or_else(|| {
            let key = if prefix.is_empty() {
                "(top level)"
            } else {
                prefix.as_str()
            };
            Error::config(
                file,
                key,
                format!("expected a JSON object, found {}", kind(value)),
            )
        })?;
        Ok(Self { file, prefix, map })
    }

    /// The object under `key`, which must be present.
    pub fn child(&self, key: &str, what: &str) -> Result<Obj<'a>> {
        let value = self.required(key, what)?;
        Obj::new(self.file, self.path(key), value)
    }

    /// The file name used in errors.
    pub fn file(&self) -> &'a str {
        self.file
    }

    /// The full key path of `key` inside this object.
    pub fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    /// An error about `key`.
    pub fn err(&self, key: &str, message: impl Into<String>) -> Error {
        Error::config(self.file, self.path(key), message)
    }

    /// The raw value, `None` when absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// The raw value, `None` when absent or null.
    pub fn get_non_null(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn required(&self, key: &str, what: &str) -> Result<&'a Value> {
        match self.map.get(key) {
            None => Err(self.err(key, format!("missing; expected {what}"))),
            Some(v) => Ok(v),
        }
    }

    /// A required non-negative integer.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.required(key, "a non-negative integer")?;
        self.as_usize(key, v)
    }

    /// A required integer that must be at least 1.
    pub fn positive(&self, key: &str) -> Result<usize> {
        let n = self.usize(key)?;
        if n == 0 {
            return Err(self.err(key, "must be at least 1, found 0"));
        }
        Ok(n)
    }

    /// An optional (absent or null) non-negative integer.
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get_non_null(key) {
            None => Ok(None),
            Some(v) => self.as_usize(key, v).map(Some),
        }
    }

    /// A required non-negative integer of at most 32 bits (bit widths, group sizes): a
    /// larger one is refused rather than truncated into a valid-looking value.
    pub fn u32(&self, key: &str) -> Result<u32> {
        let v = self.required(key, "a non-negative integer")?;
        self.as_u32(key, v)
    }

    /// An optional (absent or null) [`Obj::u32`].
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        match self.get_non_null(key) {
            None => Ok(None),
            Some(v) => self.as_u32(key, v).map(Some),
        }
    }

    fn as_u32(&self, key: &str, v: &Value) -> Result<u32> {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                self.err(
                    key,
                    format!("expected a non-negative integer below 2^32, found {v}"),
                )
            })
    }

    fn as_usize(&self, key: &str, v: &Value) -> Result<usize> {
        v.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.err(key, format!("expected a non-negative integer, found {v}")))
    }

    /// A required number.
    pub fn f64(&self, key: &str) -> Result<f64> {
        let v = self.required(key, "a number")?;
        v.as_f64()
            .ok_or_else(|| self.err(key, format!("expected a number, found {v}")))
    }

    /// An optional (absent or null) number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get_non_null(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(key, format!("expected a number or null, found {v}"))),
        }
    }

    /// A required boolean.
    pub fn bool(&self, key: &str) -> Result<bool> {
        let v = self.required(key, "true or false")?;
        v.as_bool()
            .ok_or_else(|| self.err(key, format!("expected true or false, found {v}")))
    }

    /// An optional boolean.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get_non_null(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.err(key, format!("expected true or false, found {v}"))),
        }
    }

    /// A required string.
    pub fn str(&self, key: &str) -> Result<&'a str> {
        let v = self.required(key, "a string")?;
        v.as_str()
            .ok_or_else(|| self.err(key, format!("expected a string, found {v}")))
    }

    /// An optional string.
    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get_non_null(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(key, format!("expected a string, found {v}"))),
        }
    }

    /// A required array.
    pub fn array(&self, key: &str) -> Result<&'a [Value]> {
        let v = self.required(key, "a list")?;
        v.as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| self.err(key, format!("expected a list, found {}", kind(v))))
    }

    /// The entries of this object.
    pub fn entries(&self) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.map.iter()
    }
}

/// A short description of a JSON value's kind, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses `text` as JSON, naming `file` on failure.
pub fn parse(file: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| Error::config(file, "(syntax)", format!("not valid JSON: {e}")))
}
