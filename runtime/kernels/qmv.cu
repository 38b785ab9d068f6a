// Affine-quantized matrix-vector products of the `fast` numerics profile:
//   out[m, n] = sum_k x[m, k] * (scales[n, k / GROUP] * q[n, k] + biases[n, k / GROUP])
// for the M (1 to 8) rows of x, over MLX's packed layout: w [N, K * BITS / 32] uint32,
// value j of a word in bits [BITS * j, BITS * (j + 1)), scales and biases [N, K / GROUP].
//
// One warp per output feature n: lane l takes 16-byte loads l, l + 32, ... of the row's
// packed words (32 values at 4 bits, 16 at 8), which lie in one group each, so a load
// needs one scale and one bias: s * sum(x q) + b * sum(x). Sums in f32, then a warp sum.
// Not MLX's arithmetic (it accumulates otherwise); the weights are read once per call
// for all M rows.
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = K / PER_WORD;
constexpr int CHUNK = 4 * PER_WORD;
constexpr int CHUNKS = WORDS / 4;
constexpr int GROUPS = K / GROUP;
constexpr uint32_t MASK = (1u << BITS) - 1u;
static_assert(BITS == 4 || BITS == 8, "4- or 8-bit weights");
static_assert(WORDS % 4 == 0, "a row must fill whole 16-byte loads");
static_assert(GROUP % CHUNK == 0, "a load must lie in one group");

const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
const int lane = threadIdx.x % 32;
if (n < N) {
  const uint4* wr = reinterpret_cast<const uint4*>(w) + static_cast<int64_t>(n) * CHUNKS;
  const T* sr = scales + static_cast<int64_t>(n) * GROUPS;
  const T* br = biases + static_cast<int64_t>(n) * GROUPS;
  const bool x_aligned = (reinterpret_cast<unsigned long long>(x) % 16) == 0;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    acc[m] = 0.0f;
  }
  for (int c = lane; c < CHUNKS; c += 32) {
    const uint4 p = wr[c];
    const uint32_t words[4] = {p.x, p.y, p.z, p.w};
    const int k0 = c * CHUNK;
    const float s = static_cast<float>(sr[k0 / GROUP]);
    const float b = static_cast<float>(br[k0 / GROUP]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const T* xm = x + m * K + k0;
      float qx = 0.0f;
      float xs = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        alignas(16) T xv[PER_WORD];
        if (x_aligned) {
          if constexpr (BITS == 4) {
            *reinterpret_cast<uint4*>(xv) = reinterpret_cast<const uint4*>(xm)[i];
          } else {
            *reinterpret_cast<uint2*>(xv) = reinterpret_cast<const uint2*>(xm)[i];
          }
        } else {
#pragma unroll
          for (int j = 0; j < PER_WORD; ++j) {
            xv[j] = xm[i * PER_WORD + j];
          }
        }
#pragma unroll
        for (int j = 0; j < PER_WORD; ++j) {
          const float xf = static_cast<float>(xv[j]);
          const float q = static_cast<float>((words[i] >> (BITS * j)) & MASK);
          qx = fmaf(xf, q, qx);
          xs += xf;
        }
      }
      acc[m] = fmaf(s, qx, fmaf(b, xs, acc[m]));
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m];
    for (int o = 16; o > 0; o /= 2) {
      v += __shfl_xor_sync(0xffffffff, v, o);
    }
    if (lane == 0) {
      out[static_cast<int64_t>(m) * N + n] = static_cast<T>(v);
    }
  }
}
