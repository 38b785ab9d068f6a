//! Tokens -> text: parsed by `syn` (so emitted code is checked as Rust), printed by
//! `prettyplease` one item at a time, with a blank line between items (and between
//! groups of `use` items of different crates) so the output reads like hand-formatted code.

use proc_macro2::TokenStream;

use crate::error::{Error, Result};

/// The printed text of `tokens` (a whole file); `what` names it in errors.
pub fn file(what: &str, tokens: TokenStream) -> Result<String> {
    let file: syn::File = syn::parse2(tokens).map_err(|e| Error::Emit {
        model: what.to_owned(),
        message: e.to_string(),
    })?;
    let mut chunks: Vec<syn::File> = Vec::new();
    if !file.attrs.is_empty() {
        chunks.push(syn::File {
            shebang: None,
            attrs: file.attrs,
            items: Vec::new(),
        });
    }
    let mut last_use_root: Option<String> = None;
    for item in file.items {
        let use_root = match &item {
            syn::Item::Use(u) => Some(use_root(&u.tree)),
            _ => None,
        };
        let joins = use_root.is_some() && use_root == last_use_root;
        last_use_root = use_root;
        match chunks.last_mut() {
            Some(chunk) if joins => chunk.items.push(item),
            _ => chunks.push(syn::File {
                shebang: None,
                attrs: Vec::new(),
                items: vec![item],
            }),
        }
    }
    Ok(chunks
        .iter()
        .map(prettyplease::unparse)
        .collect::<Vec<_>>()
        .join("\n"))
}

fn use_root(tree: &syn::UseTree) -> String {
    match tree {
        syn::UseTree::Path(p) => p.ident.to_string(),
        syn::UseTree::Name(n) => n.ident.to_string(),
        syn::UseTree::Rename(r) => r.ident.to_string(),
        syn::UseTree::Glob(_) => "*".to_owned(),
        syn::UseTree::Group(_) => "{}".to_owned(),
    }
}
