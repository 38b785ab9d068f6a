//! The parity gate: generated == monolith, byte for byte.

pub mod error;
pub mod gate;
pub mod reference;
