//! Raw bindings to mlx-c 0.7.0, built on the official prebuilt MLX 0.32.2.
//!
//! A drop-in for the crates.io `mlx-sys` 0.7.0 (same items), wired in with
//! `[patch.crates-io]` so that the unmodified `mlx-rs` builds on Linux (CPU, CUDA) and
//! macOS. See `build.rs` for where MLX and the mlx-c sources come from.

#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::all)]

// Checked in, made by `cargo xtask bindings` from the pinned mlx-c headers: building needs
// no bindgen and no libclang.
include!("bindings.rs");

/// IEEE half as 16 bits of storage: what bindgen makes of `__fp16` on aarch64, and what
/// mlx-rs expects of `float16_t` (`.0` is the bit pattern).
#[repr(transparent)]
#[derive(Debug, Default, Copy, Clone, Hash, PartialEq, Eq)]
pub struct __BindgenFloat16(pub u16);

/// The element type of mlx-c's f16 item/data functions.
pub type float16_t = __BindgenFloat16;

/// The element type of mlx-c's bf16 item/data functions: 16 bits of storage, what bindgen
/// makes of `__bf16` and what mlx-rs reads with `bf16::from_bits`.
pub type bfloat16_t = u16;

/// C's `FILE`, only ever behind a pointer (`mlx_export_to_dot`).
#[repr(C)]
pub struct FILE {
    _opaque: [u8; 0],
}

/// mlx-rs seeds its default random key from this macOS function; elsewhere it reads the
/// monotonic clock in nanoseconds, which serves the same purpose.
#[cfg(not(target_vendor = "apple"))]
#[no_mangle]
pub extern "C" fn mach_approximate_time() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    // Offset by wall time so separate processes get different seeds, like mach time.
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    wall.wrapping_add(start.elapsed().as_nanos() as u64)
}
