//! Reading weights: safetensors headers checked up front, catalogs of model folders,
//! and the expectations models check them against.

pub mod catalog;
pub mod expect;
pub mod header;
