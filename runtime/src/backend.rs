//! Which MLX backend the default device runs on, for the few places where a backend
//! lacks a kernel the reference computation uses.

use std::sync::OnceLock;

/// Whether MLX's default device is a CUDA GPU.
///
/// MLX 0.32.2's CUDA backend has no `quantized_matmul` kernel for the shapes attention
/// over quantized K/V produces (the kv length is rarely a multiple of the kernels'
/// tiles, and V is multiplied untransposed), so [`crate::nn::attention`] dequantizes
/// there instead. Metal and the CPU run the reference's kernels.
pub fn cuda_default() -> bool {
    cuda_available() && default_is_gpu()
}

fn cuda_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let mut available = false;
        // SAFETY: writes one bool through a valid pointer; no other state is touched.
        let status = unsafe { mlx_sys::mlx_cuda_is_available(&mut available) };
        status == 0 && available
    })
}

/// Whether MLX's default device is the CPU.
pub fn cpu_default() -> bool {
    default_type().is_some_and(|t| matches!(t, mlx_rs::DeviceType::Cpu))
}

fn default_is_gpu() -> bool {
    default_type().is_some_and(|t| matches!(t, mlx_rs::DeviceType::Gpu))
}

fn default_type() -> Option<mlx_rs::DeviceType> {
    mlx_rs::Device::try_default()
        .and_then(|d| d.get_type())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_wheel_is_not_cuda() {
        // The tests run on the CPU build of MLX (mlx-cpu), whose default device is the CPU.
        assert!(!cuda_default());
    }
}
