//! ModelPlan -> Rust source (quote -> syn -> prettyplease).
