//! One MLX stream on the default device that every thread may use.
//!
//! From MLX 0.32 a stream belongs to the thread that made it: evaluating an array from
//! another thread fails (or aborts). The decode loop's submit thread
//! ([`crate::submitter`]) evaluates steps that the caller's thread built, so both must
//! work on a stream made by `new_thread_unsafe_stream`. Such a stream is safe when one
//! thread at a time evaluates on it, which the submitter guarantees; building graphs
//! never touches the stream's encoder.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The process's shared stream: an `mlx_stream` whose C++ object (an index and a
/// device) is never changed or freed after it is made.
struct Shared(mlx_sys::mlx_stream);

// SAFETY: the wrapped stream is immutable once made and lives for the whole process;
// MLX's stream functions read it only.
unsafe impl Send for Shared {}
// SAFETY: as for Send: shared reads of an immutable value.
unsafe impl Sync for Shared {}

static SHARED: OnceLock<std::result::Result<Shared, String>> = OnceLock::new();

fn shared() -> Result<&'static Shared> {
    SHARED
        .get_or_init(|| {
            // SAFETY: mlx-c calls with valid out-pointers; the device handle is freed
            // after the stream (which copies it) is made.
            unsafe {
                let mut device = mlx_sys::mlx_device_new();
                if mlx_sys::mlx_get_default_device(&mut device) != 0 {
                    mlx_sys::mlx_device_free(device);
                    return Err("MLX could not name its default device".into());
                }
                let stream = mlx_sys::mlx_stream_new_thread_unsafe(device);
                mlx_sys::mlx_device_free(device);
                if stream.ctx.is_null() {
                    return Err("MLX could not make a stream shared between threads".into());
                }
                Ok(Shared(stream))
            }
        })
        .as_ref()
        .map_err(|e| Error::Unsupported(e.clone()))
}

/// Makes the shared stream MLX's default stream of the default device on the calling
/// thread. Everything built on this thread afterwards (compiled functions traced
/// afterwards included) may then be evaluated on any thread that did the same.
/// Idempotent.
pub fn share_default() -> Result<()> {
    let s = shared()?;
    // SAFETY: `s.0` is a valid stream for the whole process.
    if unsafe { mlx_sys::mlx_set_default_stream(s.0) } != 0 {
        return Err(Error::Unsupported(
            "MLX refused the shared stream as this thread's default".into(),
        ));
    }
    Ok(())
}

/// Releases MLX's streams before the process exits: called on the main thread, this
/// destroys the shared stream's command encoder while the device driver is still up.
/// MLX 0.32.2 otherwise destroys it during static destruction, after the CUDA runtime has
/// shut down, and the process aborts ("cudaStreamSynchronize failed: driver shutting
/// down"; fixed upstream after 0.32.2 by leaking it). No MLX work may follow.
pub fn release_at_exit() {
    if matches!(SHARED.get(), Some(Ok(_))) {
        // SAFETY: no arguments; MLX synchronizes and drops its encoders.
        unsafe {
            mlx_sys::mlx_clear_streams();
        }
    }
}

/// Whether the calling thread's default stream is the shared one (see
/// [`share_default`]).
pub fn default_is_shared() -> bool {
    let Ok(s) = shared() else {
        return false;
    };
    // SAFETY: valid out-pointers; the temporary handles are freed before returning.
    unsafe {
        let mut device = mlx_sys::mlx_device_new();
        let mut current = mlx_sys::mlx_stream_new();
        let ok = mlx_sys::mlx_get_default_device(&mut device) == 0
            && mlx_sys::mlx_get_default_stream(&mut current, device) == 0
            && mlx_sys::mlx_stream_equal(current, s.0);
        mlx_sys::mlx_stream_free(current);
        mlx_sys::mlx_device_free(device);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_shares_the_default_has_it_and_others_do_not() {
        std::thread::spawn(|| {
            assert!(!default_is_shared(), "a fresh thread has its own stream");
            share_default().unwrap();
            assert!(default_is_shared());
            share_default().unwrap();
            assert!(default_is_shared(), "sharing twice changes nothing");
        })
        .join()
        .unwrap();
        std::thread::spawn(|| assert!(!default_is_shared()))
            .join()
            .unwrap();
    }

    #[test]
    fn an_array_built_on_one_thread_evaluates_on_another() {
        let built = std::thread::spawn(|| {
            share_default().unwrap();
            let a = mlx_rs::Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
            mlx_rs::ops::multiply(&a, &a).unwrap()
        })
        .join()
        .unwrap();
        let read = std::thread::spawn(move || {
            share_default().unwrap();
            built.eval().unwrap();
            built.as_slice::<f32>().to_vec()
        })
        .join()
        .unwrap();
        assert_eq!(read, vec![1.0, 4.0, 9.0]);
    }
}
