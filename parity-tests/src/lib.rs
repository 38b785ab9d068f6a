//! The parity gate: generated == monolith, byte for byte.

pub mod reference;
