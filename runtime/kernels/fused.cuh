// Device helpers of mlx-aot's fused single-token kernels (runtime/src/cuda/).
//
// Each fused kernel replaces a run of MLX 0.32.2 CUDA kernels and must give their bytes:
// every operation here rounds where the kernel it replaces rounds, in the same order.
//  - Elementwise ops on 16-bit floats round to the type after every op. A multiply
//    feeding an add inside one kernel may be contracted into an FMA by the compiler (one
//    rounding where MLX's one-op kernels make two), so `mul` and `add` go through
//    __fmul_rn / __fadd_rn, which are never contracted. Computing a bf16 or f16 op in f32
//    and rounding once more gives the correctly rounded result (f32 has more than twice
//    their precision plus two bits), which is what MLX's one-op kernels give.
//  - RMS norms reproduce MLX's rms_norm_small: the row split into vectors of 16 bytes,
//    thread t owning vectors t, t + BLOCK, ..., each thread summing its squares in that
//    order with an FMA, the block's sum taken warp by warp with cooperative groups, then
//    rsqrt(sum / axis + eps), then w * T(x * r).
//  - RoPE reproduces MLX's rope_single kernels for one token.
// The parity gate (parity-tests) compares every logit of a model built on these with the
// unfused reference, byte for byte.

#include <cooperative_groups/reduce.h>

#include "mlx/backend/cuda/device/binary_ops.cuh"
#include "mlx/backend/cuda/device/unary_ops.cuh"

namespace mlx::core::cu::aot {

namespace cg = cooperative_groups;

template <typename T>
__device__ __forceinline__ float f32(T x) {
  return static_cast<float>(x);
}

template <typename T>
__device__ __forceinline__ T to(float x) {
  return static_cast<T>(x);
}

// a * b rounded once to T, never contracted with a neighbouring add.
template <typename T>
__device__ __forceinline__ T mul(T a, T b) {
  return to<T>(__fmul_rn(f32(a), f32(b)));
}

// a + b rounded once to T, never contracted with a neighbouring multiply.
template <typename T>
__device__ __forceinline__ T add(T a, T b) {
  return to<T>(__fadd_rn(f32(a), f32(b)));
}

// a * b + c rounded once to T: the FMA a kernel compiler makes of a multiply feeding an
// add when both are in one kernel (as in MLX's compiled `gelu_approx`).
template <typename T>
__device__ __forceinline__ T fma(T a, T b, T c) {
  if constexpr (cuda::std::is_same_v<T, float>) {
    return __fmaf_rn(a, b, c);
  } else {
    return __hfma(a, b, c);
  }
}

// The sum of every thread's `v` in a block of BLOCK threads, on every thread: each warp
// reduces its own, then every warp reduces the warps' sums (MLX's BlockBroadcastReduce).
// `warp_sums` holds BLOCK / 32 floats of shared memory; it is free again on return.
template <int BLOCK>
__device__ float block_sum(float v, float* warp_sums) {
  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);
  float x = cg::reduce(warp, v, cg::plus<float>());
  if constexpr (BLOCK > 32) {
    if (warp.thread_rank() == 0) {
      warp_sums[warp.meta_group_rank()] = x;
    }
    block.sync();
    x = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()]
                                                    : 0.0f;
    x = cg::reduce(warp, x, cg::plus<float>());
    block.sync();
  }
  return x;
}

// One row of `axis` values held by a block of BLOCK threads as MLX's rms_norm_small holds
// it: CHUNKS vectors of N values per thread, thread t owning vectors t, t + BLOCK, ...
// Values past the row's end read as zero and are never written.
template <typename T, int BLOCK, int CHUNKS, int N = 16 / sizeof(T)>
struct Row {
  AlignedVector<T, N> v[CHUNKS];

  __device__ void load(const T* x, uint32_t axis) {
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
      v[i] = load_vector<N>(x, BLOCK * i + threadIdx.x, axis, T(0));
    }
  }

  __device__ void store(T* out, uint32_t axis) const {
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
      store_vector<N>(out, BLOCK * i + threadIdx.x, v[i], axis);
    }
  }

  // This thread's sum of squares, in MLX's order, each step one FMA (AOT_SQ_FORM 1, what
  // the runtime compiles; 0 leaves the contraction to the compiler, 2 makes none: forms
  // scripts/fused-kernel-probe.py compares).
  __device__ float sum_squares() const {
    float s = 0;
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
#pragma unroll
      for (int j = 0; j < N; j++) {
        float t = f32(v[i][j]);
#if AOT_SQ_FORM == 1
        s = __fmaf_rn(t, t, s);
#elif AOT_SQ_FORM == 2
        s = __fadd_rn(s, __fmul_rn(t, t));
#else
        s += t * t;
#endif
      }
    }
    return s;
  }

  // rms_norm in place: v = w * T(v * r), w read like v with stride `w_stride` (0 for a
  // one-element weight of ones: the weightless norm, as MLX runs it).
  __device__ void
  normalize(const T* w, int64_t w_stride, uint32_t axis, float eps, float* warp_sums) {
    float r = rsqrt(block_sum<BLOCK>(sum_squares(), warp_sums) / axis + eps);
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
      auto wn = load_vector<N>(w, BLOCK * i + threadIdx.x, axis, w_stride, T(0));
#pragma unroll
      for (int j = 0; j < N; j++) {
        v[i][j] = mul(wn[j], to<T>(__fmul_rn(f32(v[i][j]), r)));
      }
    }
  }

  // v = other + v (the residual add: the stream first).
  __device__ void add_to(const Row& other) {
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
#pragma unroll
      for (int j = 0; j < N; j++) {
        v[i][j] = add(other.v[i][j], v[i][j]);
      }
    }
  }

  // v = v * s.
  __device__ void scale(T s) {
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
#pragma unroll
      for (int j = 0; j < N; j++) {
        v[i][j] = mul(v[i][j], s);
      }
    }
  }
};

} // namespace mlx::core::cu::aot
