//! The parity gate: generated == monolith, byte for byte.

pub mod distance;
pub mod error;
pub mod gate;
pub mod reference;
