//! The identifiers a model name gives: module (`gemma4_e4b`), type (`Gemma4E4b`) and
//! implementation id (`gemma4-e4b-generated`).

use crate::error::{Error, Result};

/// A checked model name and the identifiers derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelName {
    name: String,
}

impl ModelName {
    /// Checks `name`: lowercase ASCII letters, digits, single dashes and dots between
    /// two digits (`llama-3.2-1b`), starting with a letter (it names a folder, a module,
    /// a type and an id).
    pub fn new(name: &str) -> Result<Self> {
        let invalid = |why: &str| Error::InvalidName {
            name: name.to_owned(),
            why: why.to_owned(),
        };
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(invalid("must start with a lowercase letter"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        {
            return Err(invalid(
                "may hold only lowercase letters, digits, dashes and dots between digits",
            ));
        }
        let bytes = name.as_bytes();
        let dot_between_digits = |i: usize| {
            i > 0
                && i + 1 < bytes.len()
                && bytes[i - 1].is_ascii_digit()
                && bytes[i + 1].is_ascii_digit()
        };
        if (0..bytes.len()).any(|i| bytes[i] == b'.' && !dot_between_digits(i)) {
            return Err(invalid("a dot must stand between two digits"));
        }
        if name.ends_with('-') || name.contains("--") {
            return Err(invalid("dashes must separate words"));
        }
        Ok(ModelName {
            name: name.to_owned(),
        })
    }

    /// The name itself (the folder under `generated/models/`).
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The module: dashes and dots become underscores.
    pub fn module(&self) -> String {
        self.name.replace(['-', '.'], "_")
    }

    /// The model type: each word capitalized, an underscore only between two digits
    /// (`gemma4-26b-a4b` -> `Gemma4_26bA4b`, which is still upper camel case).
    pub fn type_name(&self) -> String {
        let mut out = String::new();
        for word in self.name.split('-') {
            let digit_meets_digit = out.ends_with(|c: char| c.is_ascii_digit())
                && word.starts_with(|c: char| c.is_ascii_digit());
            if digit_meets_digit {
                out.push('_');
            }
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.push(first.to_ascii_uppercase());
                out.extend(chars.map(|c| if c == '.' { '_' } else { c }));
            }
        }
        out
    }

    /// The implementation id.
    pub fn implementation_id(&self) -> String {
        format!("{}-generated", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        let n = ModelName::new("gemma4-e4b").unwrap();
        assert_eq!(n.module(), "gemma4_e4b");
        assert_eq!(n.type_name(), "Gemma4E4b");
        let l = ModelName::new("llama-3.2-1b").unwrap();
        assert_eq!(
            (l.module().as_str(), l.type_name().as_str()),
            ("llama_3_2_1b", "Llama3_2_1b")
        );
        assert_eq!(
            ModelName::new("qwen3-0.6b").unwrap().type_name(),
            "Qwen3_0_6b"
        );
        assert!(ModelName::new("a.b").is_err() && ModelName::new("a-1.").is_err());
        assert_eq!(n.implementation_id(), "gemma4-e4b-generated");
        let n = ModelName::new("gemma4-26b-a4b").unwrap();
        assert_eq!(n.type_name(), "Gemma4_26bA4b");
        assert_eq!(
            ModelName::new("gemma4-12b").unwrap().type_name(),
            "Gemma4_12b"
        );
    }

    #[test]
    fn bad_names() {
        for bad in ["", "Gemma", "4b", "a_b", "a--b", "a-", "a b"] {
            assert!(ModelName::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
