// Single-token attention of the `fast` numerics profile, part 1 of 2: each block
// attends one query head of one sequence over one slice of the cached rows and leaves
// its partial softmax (running maximum, sum, weighted sum of values) in f32; part 2
// (decode_attention_merge.cu) combines a head's slices. Together:
// out = softmax(SCALE * q k^T) v for one query token per sequence, over every row.
//
// q [B, HEADS, 1, D], k and v [B, KV_HEADS, rows, D] (any strides: the caches' views are
// read in place, never copied); part [B * HEADS, SPLITS, D + 2]: per slice m, l, then
// acc[D]. Block (b * HEADS + h) * SPLITS + s computes head h of sequence b against K/V
// head h / (HEADS / KV_HEADS) over rows [s * chunk, (s + 1) * chunk). Its WARPS warps take
// every WARPS-th row, two at a time (both rows' loads in flight before either's sums);
// a warp reads a row with 16-byte loads spread over its lanes, so q . k is a warp sum.
// Not MLX's arithmetic: MLX 0.32.2 has no fused CUDA kernel at head dims 256 and 512 and
// runs two matmuls and a softmax, rounding scores and probabilities to 16 bits.
constexpr int VEC = 16 / sizeof(T);
constexpr int PER_LANE = D / (32 * VEC);
constexpr int N = PER_LANE * VEC;
constexpr int GROUP = HEADS / KV_HEADS;
static_assert(D % (32 * VEC) == 0, "the head dim must fill whole 16-byte loads per lane");
const float NEG_INF = __int_as_float(static_cast<int>(0xff800000u));

__shared__ float s_max[WARPS];
__shared__ float s_sum[WARPS];
__shared__ float s_acc[WARPS][D];

// The launch has B * HEADS * SPLITS blocks (outputs come without their shapes).
const int splits = gridDim.x / (q_shape[0] * HEADS);
const int bh = blockIdx.x / splits;
const int split = blockIdx.x % splits;
const int b = bh / HEADS;
const int h = bh % HEADS;
const int kvh = h / GROUP;
const int warp = threadIdx.x / 32;
const int lane = threadIdx.x % 32;
const int rows = k_shape[2];
const int chunk = (rows + splits - 1) / splits;
const int r0 = split * chunk;
const int r1 = min(rows, r0 + chunk);
const float scale = __int_as_float(SCALE_BITS);

const T* qp = q + b * q_strides[0] + h * q_strides[1];
const T* kp = k + b * k_strides[0] + kvh * k_strides[1];
const T* vp = v + b * v_strides[0] + kvh * v_strides[1];
const int64_t qd = q_strides[3], kd = k_strides[3], vd = v_strides[3];
const int64_t kr = k_strides[2], vr = v_strides[2];
// Vector loads need unit strides along D and 16-byte aligned rows; anything else (never
// seen from the caches, but strides are the caller's) reads value by value.
const bool vec_ok = qd == 1 && kd == 1 && vd == 1 && kr % VEC == 0 && vr % VEC == 0 &&
    (reinterpret_cast<unsigned long long>(kp) % 16) == 0 &&
    (reinterpret_cast<unsigned long long>(vp) % 16) == 0;

// This lane's share of a row: values (i * 32 + lane) * VEC .. + VEC for i < PER_LANE.
float qf[N];
for (int i = 0; i < PER_LANE; ++i) {
  for (int j = 0; j < VEC; ++j) {
    const int d = (i * 32 + lane) * VEC + j;
    qf[i * VEC + j] = static_cast<float>(qp[d * qd]) * scale;
  }
}

float m = NEG_INF;
float l = 0.0f;
float acc[N];
#pragma unroll
for (int j = 0; j < N; ++j) {
  acc[j] = 0.0f;
}

// Row r's K and V values of this lane, as f32.
auto load = [&](int r, float* kf, float* vf) {
  const T* krow = kp + r * kr;
  const T* vrow = vp + r * vr;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d0 = (i * 32 + lane) * VEC;
    if (vec_ok) {
      const uint4 k4 = *reinterpret_cast<const uint4*>(krow + d0);
      const uint4 v4 = *reinterpret_cast<const uint4*>(vrow + d0);
      const T* ks = reinterpret_cast<const T*>(&k4);
      const T* vs = reinterpret_cast<const T*>(&v4);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        kf[i * VEC + j] = static_cast<float>(ks[j]);
        vf[i * VEC + j] = static_cast<float>(vs[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        kf[i * VEC + j] = static_cast<float>(krow[(d0 + j) * kd]);
        vf[i * VEC + j] = static_cast<float>(vrow[(d0 + j) * vd]);
      }
    }
  }
};
// Folds one row's score and values into the running softmax.
auto fold = [&](const float* kf, const float* vf) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    s = fmaf(qf[j], kf[j], s);
  }
  for (int o = 16; o > 0; o /= 2) {
    s += __shfl_xor_sync(0xffffffff, s, o);
  }
  const float m_new = fmaxf(m, s);
  const float keep = expf(m - m_new);
  const float p = expf(s - m_new);
  l = fmaf(l, keep, p);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    acc[j] = fmaf(acc[j], keep, p * vf[j]);
  }
  m = m_new;
};

int r = r0 + warp;
for (; r + WARPS < r1; r += 2 * WARPS) {
  float k0[N], v0[N], k1[N], v1[N];
  load(r, k0, v0);
  load(r + WARPS, k1, v1);
  fold(k0, v0);
  fold(k1, v1);
}
if (r < r1) {
  float k0[N], v0[N];
  load(r, k0, v0);
  fold(k0, v0);
}

if (lane == 0) {
  s_max[warp] = m;
  s_sum[warp] = l;
}
for (int i = 0; i < PER_LANE; ++i) {
  for (int j = 0; j < VEC; ++j) {
    s_acc[warp][(i * 32 + lane) * VEC + j] = acc[i * VEC + j];
  }
}
__syncthreads();

// A warp (or a whole slice) with no rows holds m = -inf and l = 0: it weighs nothing.
float top = NEG_INF;
for (int w = 0; w < WARPS; ++w) {
  top = fmaxf(top, s_max[w]);
}
float* out = part + static_cast<int64_t>(blockIdx.x) * (D + 2);
if (threadIdx.x == 0) {
  float total = 0.0f;
  for (int w = 0; w < WARPS; ++w) {
    total += top == NEG_INF ? 0.0f : s_sum[w] * expf(s_max[w] - top);
  }
  out[0] = top;
  out[1] = total;
}
for (int d = threadIdx.x; d < D; d += blockDim.x) {
  float o = 0.0f;
  if (top != NEG_INF) {
    for (int w = 0; w < WARPS; ++w) {
      o = fmaf(s_acc[w][d], expf(s_max[w] - top), o);
    }
  }
  out[2 + d] = o;
}
