//! The parity gate: generated == monolith, byte for byte.
