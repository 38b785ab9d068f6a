//! Doc comments for emitted items, wrapped so no line runs long.

use proc_macro2::TokenStream;
use quote::quote;

/// The widest doc line (prettyplease indents items by at most one level here).
const WIDTH: usize = 88;

/// `text` as `#[doc]` attributes (printed as `///` lines), wrapped at word boundaries.
pub fn lines(text: &str) -> TokenStream {
    attrs(text, |line| quote!(#[doc = #line]))
}

/// `text` as inner `#![doc]` attributes (printed as `//!` lines).
pub fn inner(text: &str) -> TokenStream {
    attrs(text, |line| quote!(#![doc = #line]))
}

fn attrs(text: &str, attr: impl Fn(String) -> TokenStream) -> TokenStream {
    let mut out = TokenStream::new();
    for paragraph in text.split("\n\n") {
        if !out.is_empty() {
            out.extend(attr(String::new()));
        }
        for line in wrap(paragraph) {
            out.extend(attr(format!(" {line}")));
        }
    }
    out
}

fn wrap(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > WIDTH {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}
