//! `Fingerprint`: sha256 over exactly what generated code bakes in.
//!
//! The rule: whatever is baked is fingerprinted; whatever is not fingerprinted is read at
//! run time. The plan holds only structure (no dimensions), so a shrunk twin of a model
//! shares the real model's fingerprint.

use std::fmt;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::plan::{FamilyId, LayerPlan, ModelPlan};
use crate::signature::CacheSignature;

/// A model plan's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

/// The canonical form hashed: field order fixed by declaration, serde_json compact.
#[derive(Serialize)]
struct Canonical<'a> {
    family: FamilyId,
    layers: &'a [LayerPlan],
    caches: Vec<CacheSignature>,
}

impl Fingerprint {
    /// The fingerprint of `plan`.
    pub fn of(plan: &ModelPlan) -> Self {
        let canonical = Canonical {
            family: plan.family,
            layers: &plan.layers,
            caches: plan.cache_signatures(),
        };
        let bytes = serde_json::to_vec(&canonical).expect("a plan always serializes");
        Fingerprint(Sha256::digest(&bytes).into())
    }

    /// The 16 hex characters shown to users and written into generated code.
    pub fn short(&self) -> String {
        self.0[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The whole digest.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}
