// Affine-quantized matrix-vector products of the `fast` numerics profile:
//   y[m, n] = sum_k x[m, k] * (scales[n, k / GROUP] * q[n, k] + biases[n, k / GROUP])
// for the M (1 to 8) rows of x, over MLX's packed layout: w [rows, K * BITS / 32] uint32,
// value j of a word in bits [BITS * j, BITS * (j + 1)), scales and biases [rows, K / GROUP].
// AOT_QMV_MODE picks what is written (all in f32 from the f32 sums, rounded once):
//   0: y;
//   1: gelu_approx(y[gate]) * y[up], w the gate rows then the up rows (a fused gate/up);
//   2: gelu_approx(y) * g, g [M, rows] (Gemma 4's per-layer-input gate);
//   3: silu(y[gate]) * y[up] (SwiGLU).
//
// One warp per R output features (two weight rows each in modes 1 and 3): lane l takes
// 16-byte loads l, l + 32, ... of each row (32 values at 4 bits, 16 at 8), all issued
// before any arithmetic (R rows at once keep more bytes in flight per warp and share
// each load of x), each inside one group, so a load needs one scale and one bias:
// s * sum(x q) + b * sum(x). The block sums x over each load's span once, for all its
// warps. N comes from w's shape, so one compiled kernel serves every output width.
#if AOT_QMV_MODE == 1 || AOT_QMV_MODE == 3
constexpr int PARTS = 2;
#else
constexpr int PARTS = 1;
#endif
constexpr int PER_WORD = 32 / BITS;
constexpr int VALS = 4 * PER_WORD;
constexpr int CHUNKS = K / VALS;
constexpr int ITERS = (CHUNKS + 31) / 32;
constexpr int GROUPS = K / GROUP;
constexpr int PER_GROUP = GROUP / VALS;
constexpr uint32_t MASK = (1u << BITS) - 1u;
static_assert(BITS == 4 || BITS == 8, "4- or 8-bit weights");
static_assert(K % VALS == 0, "a row must fill whole 16-byte loads");
static_assert(GROUP % VALS == 0, "a load must lie in one group");

__shared__ float xsum[M * CHUNKS];
for (int i = threadIdx.x; i < M * CHUNKS; i += blockDim.x) {
  const T* xp = x + (i / CHUNKS) * K + (i % CHUNKS) * VALS;
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < VALS; ++j) {
    s += static_cast<float>(xp[j]);
  }
  xsum[i] = s;
}
__syncthreads();

const int outs = w_shape[0] / PARTS;
const int n0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * R;
const int lane = threadIdx.x % 32;
if (n0 < outs) {
  const bool x_aligned = (reinterpret_cast<unsigned long long>(x) % 16) == 0;
  uint4 wv[R][PARTS][ITERS];
  float sv[R][PARTS][ITERS];
  float bv[R][PARTS][ITERS];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int p = 0; p < PARTS; ++p) {
      const int64_t row = n0 + r + static_cast<int64_t>(p) * outs;
      const uint4* wr = reinterpret_cast<const uint4*>(w) + row * CHUNKS;
#pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const int c = lane + 32 * it;
        if (c < CHUNKS && n0 + r < outs) {
          wv[r][p][it] = wr[c];
          sv[r][p][it] = static_cast<float>(scales[row * GROUPS + c / PER_GROUP]);
          bv[r][p][it] = static_cast<float>(biases[row * GROUPS + c / PER_GROUP]);
        } else {
          wv[r][p][it] = make_uint4(0u, 0u, 0u, 0u);
          sv[r][p][it] = 0.0f;
          bv[r][p][it] = 0.0f;
        }
      }
    }
  }
  float acc[R][PARTS][M];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int p = 0; p < PARTS; ++p) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        acc[r][p][m] = 0.0f;
      }
    }
  }
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int c = lane + 32 * it;
    if (c < CHUNKS) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const T* xm = x + m * K + c * VALS;
        float xf[VALS];
        if (x_aligned) {
#pragma unroll
          for (int i = 0; i < VALS * static_cast<int>(sizeof(T)) / 16; ++i) {
            const uint4 v = reinterpret_cast<const uint4*>(xm)[i];
            const T* vs = reinterpret_cast<const T*>(&v);
#pragma unroll
            for (int j = 0; j < 16 / static_cast<int>(sizeof(T)); ++j) {
              xf[i * (16 / sizeof(T)) + j] = static_cast<float>(vs[j]);
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < VALS; ++j) {
            xf[j] = static_cast<float>(xm[j]);
          }
        }
        const float xs = xsum[m * CHUNKS + c];
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int p = 0; p < PARTS; ++p) {
            const uint4 wq = wv[r][p][it];
            const uint32_t words[4] = {wq.x, wq.y, wq.z, wq.w};
            float qx = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
              for (int j = 0; j < PER_WORD; ++j) {
                const float q = static_cast<float>((words[i] >> (BITS * j)) & MASK);
                qx = fmaf(xf[i * PER_WORD + j], q, qx);
              }
            }
            acc[r][p][m] = fmaf(sv[r][p][it], qx, fmaf(bv[r][p][it], xs, acc[r][p][m]));
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int n = n0 + r;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v[PARTS];
#pragma unroll
      for (int p = 0; p < PARTS; ++p) {
        v[p] = acc[r][p][m];
        for (int o = 16; o > 0; o /= 2) {
          v[p] += __shfl_xor_sync(0xffffffff, v[p], o);
        }
      }
      if (lane == 0 && n < outs) {
        const float a = v[0];
#if AOT_QMV_MODE == 0
        const float y = a;
#elif AOT_QMV_MODE == 3
        const float y = a / (1.0f + expf(-a)) * v[PARTS - 1];
#else
        const float gelu = 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a)));
#if AOT_QMV_MODE == 1
        const float y = gelu * v[PARTS - 1];
#else
        const float y = gelu * static_cast<float>(g[static_cast<int64_t>(m) * outs + n]);
#endif
#endif
        out[static_cast<int64_t>(m) * outs + n] = static_cast<T>(y);
      }
    }
  }
}
