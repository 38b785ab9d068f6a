//! The parity gate: generated == monolith, byte for byte.

pub mod gate;
pub mod reference;
