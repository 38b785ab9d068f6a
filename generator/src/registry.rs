//! The files that list every generated model: `generated/src/models/mod.rs` and the
//! registry `generated/src/registry.rs` (fingerprint -> constructor, via each module's
//! `IMPLEMENTATION`).

use quote::{format_ident, quote};

use crate::error::Result;
use crate::header;
use crate::ident::ModelName;

/// `models/mod.rs`: one `pub mod` per model, in name order.
pub fn models_mod(models: &[ModelName]) -> Result<String> {
    let modules = models.iter().map(|m| format_ident!("{}", m.module()));
    print(
        "models/mod.rs",
        quote! {
            //! The generated models, one module each (`cargo xtask generate` writes them).
            #(pub mod #modules;)*
        },
    )
}

/// `registry.rs`: `implementations()` listing every model's `IMPLEMENTATION`.
pub fn registry(models: &[ModelName]) -> Result<String> {
    let entries = models.iter().map(|m| {
        let module = format_ident!("{}", m.module());
        quote!(crate::models::#module::IMPLEMENTATION)
    });
    let n = proc_macro2::Literal::usize_unsuffixed(models.len());
    print(
        "registry.rs",
        quote! {
            //! Every generated implementation, for `runtime::registry::Registry::new`.

            use runtime::registry::Implementation;

            /// The generated implementations, one per model, in name order.
            pub const IMPLEMENTATIONS: [Implementation; #n] = [#(#entries),*];

            /// [`IMPLEMENTATIONS`] as the list `Registry::new` takes.
            pub fn implementations() -> Vec<Implementation> {
                IMPLEMENTATIONS.to_vec()
            }
        },
    )
}

fn print(what: &str, tokens: proc_macro2::TokenStream) -> Result<String> {
    Ok(header::index() + &crate::print::file(what, tokens)?)
}
