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
// SPLIT warps (1, 2, 4 or 8, consecutive in a block) per R output features (two weight
// rows each in modes 1 and 3). The unit of work is 8 consecutive values (one word at 4
// bits, two at 8; 16 bytes of x): lane l of the group's warp s takes units
// l + 32 s, l + 32 (s + SPLIT), ..., so a warp's loads of a row and of x are contiguous
// (one 128-byte line of 4-bit weights, 512 bytes of x). A lane issues BATCH units' loads
// of every row before their arithmetic, for bytes in flight. With SPLIT > 1 (narrow
// outputs over a long K, where one warp per feature set leaves the GPU short of warps)
// each warp's sum goes through shared memory and the group's first warp adds them in
// warp order, so the result does not depend on scheduling.
//
// Dequantizing without int-to-float conversions: a value q of BITS bits placed in the
// top of an f32 mantissa of 1.0 reads as f = 1 + q / 2^BITS, exactly, so over a unit
//   sum x q = 2^BITS (sum x f - sum x),
// one shift, one logic op and one FMA a value; sum x (the bias term's) is shared by the
// rows and the f32 error of the difference is far under the output's bf16 rounding.
#if AOT_QMV_MODE == 1 || AOT_QMV_MODE == 3
constexpr int PARTS = 2;
#else
constexpr int PARTS = 1;
#endif
constexpr int PER_WORD = 32 / BITS;
constexpr int UNIT_WORDS = 8 / PER_WORD;
constexpr int UNITS = K / 8;
constexpr int ITERS = (UNITS + 32 * SPLIT - 1) / (32 * SPLIT);
constexpr int BATCH_MAX = 16 / (R * PARTS) > 0 ? 16 / (R * PARTS) : 1;
constexpr int BATCH = ITERS < BATCH_MAX ? ITERS : BATCH_MAX;
constexpr int GROUPS = K / GROUP;
constexpr int UNITS_PER_GROUP = GROUP / 8;
constexpr uint32_t MASK = (1u << BITS) - 1u;
constexpr uint32_t ONE = 0x3f800000u;
constexpr int TOP = 23 - BITS;
constexpr float SCALE = static_cast<float>(1 << BITS);
static_assert(BITS == 4 || BITS == 8, "4- or 8-bit weights");
static_assert(K % 8 == 0, "a row must fill whole units");
static_assert(GROUP % 8 == 0, "a unit must lie in one group");
static_assert(SPLIT == 1 || SPLIT == 2 || SPLIT == 4 || SPLIT == 8, "1, 2, 4 or 8 warps a feature set");

const int outs = w_shape[0] / PARTS;
const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
const int n0 = warp / SPLIT * R;
const int s = warp % SPLIT;
const int lane = threadIdx.x % 32;
// A split group's warps meet at a barrier, so past the end they run empty instead.
const bool live = n0 < outs;
if (SPLIT == 1 && !live) {
  return;
}
const bool x_aligned = (reinterpret_cast<unsigned long long>(x) % 16) == 0;
int64_t rows[R][PARTS];
#pragma unroll
for (int r = 0; r < R; ++r) {
#pragma unroll
  for (int p = 0; p < PARTS; ++p) {
    // A warp's last features past the end read the first one's row (never written).
    const int n = n0 + r < outs ? n0 + r : live ? n0 : 0;
    rows[r][p] = n + static_cast<int64_t>(p) * outs;
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
#pragma unroll 1
for (int b0 = 0; live && b0 < ITERS; b0 += BATCH) {
  uint32_t wv[R][PARTS][BATCH][UNIT_WORDS];
  float sv[R][PARTS][BATCH];
  float bv[R][PARTS][BATCH];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int p = 0; p < PARTS; ++p) {
#pragma unroll
      for (int i = 0; i < BATCH; ++i) {
        const int u = lane + 32 * (s + SPLIT * (b0 + i));
        const bool in = b0 + i < ITERS && u < UNITS;
        const int64_t row = rows[r][p];
#pragma unroll
        for (int j = 0; j < UNIT_WORDS; ++j) {
          wv[r][p][i][j] = in ? w[row * (UNITS * UNIT_WORDS) + u * UNIT_WORDS + j] : 0u;
        }
        const int64_t gi = row * GROUPS + u / UNITS_PER_GROUP;
        sv[r][p][i] = in ? static_cast<float>(scales[gi]) * SCALE : 0.0f;
        bv[r][p][i] = in ? static_cast<float>(biases[gi]) : 0.0f;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < BATCH; ++i) {
    const int u = lane + 32 * (s + SPLIT * (b0 + i));
    if (b0 + i < ITERS && u < UNITS) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const T* xm = x + m * K + u * 8;
        float xf[8];
        if (x_aligned) {
          const uint4 v = *reinterpret_cast<const uint4*>(xm);
          const T* vs = reinterpret_cast<const T*>(&v);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            xf[j] = static_cast<float>(vs[j]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            xf[j] = static_cast<float>(xm[j]);
          }
        }
        float xs = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          xs += xf[j];
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int p = 0; p < PARTS; ++p) {
            float d = -xs;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const uint32_t word = wv[r][p][i][j / PER_WORD];
              const int at = BITS * (j % PER_WORD);
              const uint32_t top = at <= TOP ? word << (TOP - at) : word >> (at - TOP);
              const float f = __uint_as_float(ONE | (top & (MASK << TOP)));
              d = fmaf(xf[j], f, d);
            }
            acc[r][p][m] = fmaf(sv[r][p][i], d, fmaf(bv[r][p][i], xs, acc[r][p][m]));
          }
        }
      }
    }
  }
}
// The warp's sums, then (SPLIT > 1) the group's, in warp order.
float tot[R][PARTS][M];
#pragma unroll
for (int r = 0; r < R; ++r) {
#pragma unroll
  for (int p = 0; p < PARTS; ++p) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v = acc[r][p][m];
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        v += __shfl_xor_sync(0xffffffff, v, o);
      }
      tot[r][p][m] = v;
    }
  }
}
if (SPLIT > 1) {
  __shared__ float part[32][R * PARTS * M];
  const int at = threadIdx.x / 32;
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int p = 0; p < PARTS; ++p) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
          part[at][(r * PARTS + p) * M + m] = tot[r][p][m];
        }
      }
    }
  }
  __syncthreads();
  if (s != 0) {
    return;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int p = 0; p < PARTS; ++p) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float v = part[at][(r * PARTS + p) * M + m];
        for (int q = 1; q < SPLIT; ++q) {
          v += part[at + q][(r * PARTS + p) * M + m];
        }
        tot[r][p][m] = v;
      }
    }
  }
}
if (!live) {
  return;
}
#pragma unroll
for (int r = 0; r < R; ++r) {
  const int n = n0 + r;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v[PARTS];
#pragma unroll
    for (int p = 0; p < PARTS; ++p) {
      v[p] = tot[r][p][m];
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
