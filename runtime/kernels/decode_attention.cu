// Single-token attention of the `fast` numerics profile, part 1 of 2: each block
// attends one query head of one sequence over one slice of the cached rows and leaves
// its partial softmax (running maximum, sum, weighted sum of values) in f32; part 2
// (decode_attention_merge.cu) combines a head's slices. Together:
// out = softmax(SCALE * q k^T) v for one query token per sequence, over every row.
//
// q [B, HEADS, 1, D]; k and v [B, KV_HEADS, rows, D] of T, or with AOT_KV_QUANT defined
// affine-quantized triples: k and v [B, KV_HEADS, rows, D * BITS / 32] uint32 (value j
// of a word in bits [BITS j, BITS (j + 1))), k_scales, k_biases, v_scales, v_biases
// [B, KV_HEADS, rows, D / QGROUP] of T, each value scale * q + bias in f32. Any strides:
// the caches' views are read in place, never copied. part [B * HEADS, SPLITS, D + 2]: per
// slice m, l, then acc[D]. Block (b * HEADS + h) * SPLITS + s computes head h of sequence
// b against K/V head h / (HEADS / KV_HEADS) over rows [s * chunk, (s + 1) * chunk).
//
// LANES lanes read one row (8 values each per pass: 16 bytes of T, one 4-bit word or
// two 8-bit words), so a warp reads 32 / LANES rows at once and q . k is a sum over
// LANES lanes; each such group of lanes (a slot) keeps its own running softmax, and the
// block's SLOTS slots take every SLOTS-th row, two at a time (both rows' loads in flight
// before either's sums). At head dims of 256 and more a slot is a warp.
// Not MLX's arithmetic: MLX 0.32.2 has no fused CUDA kernel at head dims 256 and 512 and
// runs two matmuls and a softmax, rounding scores and probabilities to 16 bits; on
// quantized caches it dequantizes them to T first.
constexpr int VEC = 8;
constexpr int LANES = D / VEC < 32 ? D / VEC : 32;
constexpr int PER_LANE = D / (LANES * VEC);
constexpr int N = PER_LANE * VEC;
constexpr int SUB = 32 / LANES;
constexpr int SLOTS = WARPS * SUB;
constexpr int REPEATS = HEADS / KV_HEADS;
static_assert(sizeof(T) == 2, "16-bit queries, keys and values");
static_assert(32 % LANES == 0 && D % (LANES * VEC) == 0, "whole passes of 8 values per lane");
const float NEG_INF = __int_as_float(static_cast<int>(0xff800000u));

__shared__ float s_max[SLOTS];
__shared__ float s_sum[SLOTS];
__shared__ float s_acc[SLOTS][D];

// The launch has B * HEADS * SPLITS blocks (outputs come without their shapes).
const int splits = gridDim.x / (q_shape[0] * HEADS);
const int bh = blockIdx.x / splits;
const int split = blockIdx.x % splits;
const int b = bh / HEADS;
const int h = bh % HEADS;
const int kvh = h / REPEATS;
const int warp = threadIdx.x / 32;
const int lane = threadIdx.x % 32;
const int sl = lane % LANES;
const int slot = warp * SUB + lane / LANES;
const int rows = k_shape[2];
const int chunk = (rows + splits - 1) / splits;
const int r0 = split * chunk;
const int r1 = min(rows, r0 + chunk);
const float scale = __int_as_float(SCALE_BITS);

const T* qp = q + b * q_strides[0] + h * q_strides[1];
const int64_t qd = q_strides[3];

// This lane's share of a row: values (i * LANES + sl) * VEC .. + VEC for i < PER_LANE.
float qf[N];
for (int i = 0; i < PER_LANE; ++i) {
  for (int j = 0; j < VEC; ++j) {
    const int d = (i * LANES + sl) * VEC + j;
    qf[i * VEC + j] = static_cast<float>(qp[d * qd]) * scale;
  }
}

#ifdef AOT_KV_QUANT
static_assert(BITS == 4 || BITS == 8, "4- or 8-bit caches");
static_assert(QGROUP % VEC == 0, "a lane's 8 values in one group");
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = VEC / PER_WORD;
const uint32_t* kp = k + b * k_strides[0] + kvh * k_strides[1];
const uint32_t* vp = v + b * v_strides[0] + kvh * v_strides[1];
const T* ksp = k_scales + b * k_scales_strides[0] + kvh * k_scales_strides[1];
const T* kbp = k_biases + b * k_biases_strides[0] + kvh * k_biases_strides[1];
const T* vsp = v_scales + b * v_scales_strides[0] + kvh * v_scales_strides[1];
const T* vbp = v_biases + b * v_biases_strides[0] + kvh * v_biases_strides[1];
// Row r's K and V values of this lane, as f32.
auto load = [&](int r, float* kf, float* vf) {
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d0 = (i * LANES + sl) * VEC;
    const int g = d0 / QGROUP;
    const float ks = static_cast<float>(ksp[r * k_scales_strides[2] + g * k_scales_strides[3]]);
    const float kb = static_cast<float>(kbp[r * k_biases_strides[2] + g * k_biases_strides[3]]);
    const float vs = static_cast<float>(vsp[r * v_scales_strides[2] + g * v_scales_strides[3]]);
    const float vb = static_cast<float>(vbp[r * v_biases_strides[2] + g * v_biases_strides[3]]);
    const uint32_t* kw = kp + r * k_strides[2] + (d0 / PER_WORD) * k_strides[3];
    const uint32_t* vw = vp + r * v_strides[2] + (d0 / PER_WORD) * v_strides[3];
    uint32_t kwords[WORDS], vwords[WORDS];
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
      kwords[w] = kw[w * k_strides[3]];
      vwords[w] = vw[w * v_strides[3]];
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int shift = (j % PER_WORD) * BITS;
      const uint32_t mask = (1u << BITS) - 1u;
      kf[i * VEC + j] = fmaf(ks, static_cast<float>((kwords[j / PER_WORD] >> shift) & mask), kb);
      vf[i * VEC + j] = fmaf(vs, static_cast<float>((vwords[j / PER_WORD] >> shift) & mask), vb);
    }
  }
};
#else
const T* kp = k + b * k_strides[0] + kvh * k_strides[1];
const T* vp = v + b * v_strides[0] + kvh * v_strides[1];
const int64_t kd = k_strides[3], vd = v_strides[3];
const int64_t kr = k_strides[2], vr = v_strides[2];
// Vector loads need unit strides along D and 16-byte aligned rows; anything else (never
// seen from the caches, but strides are the caller's) reads value by value.
const bool vec_ok = kd == 1 && vd == 1 && kr % VEC == 0 && vr % VEC == 0 &&
    (reinterpret_cast<unsigned long long>(kp) % 16) == 0 &&
    (reinterpret_cast<unsigned long long>(vp) % 16) == 0;
// Row r's K and V values of this lane, as f32.
auto load = [&](int r, float* kf, float* vf) {
  const T* krow = kp + r * kr;
  const T* vrow = vp + r * vr;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d0 = (i * LANES + sl) * VEC;
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
#endif

float m = NEG_INF;
float l = 0.0f;
float acc[N];
#pragma unroll
for (int j = 0; j < N; ++j) {
  acc[j] = 0.0f;
}

// Folds one row's score and values into the running softmax; every lane of the warp
// takes part in the sum (the shuffles), a slot past the slice's rows (`valid` false)
// keeps its state.
auto fold = [&](bool valid, const float* kf, const float* vf) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    s = fmaf(qf[j], kf[j], s);
  }
  for (int o = LANES / 2; o > 0; o /= 2) {
    s += __shfl_xor_sync(0xffffffff, s, o);
  }
  if (!valid) {
    return;
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

// `first` is the warp's first row of a pass (the same for its lanes, so the loop is
// warp-uniform), `r` this slot's; a slot whose row is past the slice reads `first`.
int first = r0 + warp * SUB;
int r = r0 + slot;
for (; first + SLOTS < r1; first += 2 * SLOTS, r += 2 * SLOTS) {
  const bool ok0 = r < r1, ok1 = r + SLOTS < r1;
  float k0[N], v0[N], k1[N], v1[N];
  load(ok0 ? r : first, k0, v0);
  load(ok1 ? r + SLOTS : first + SLOTS, k1, v1);
  fold(ok0, k0, v0);
  fold(ok1, k1, v1);
}
if (first < r1) {
  const bool ok0 = r < r1;
  float k0[N], v0[N];
  load(ok0 ? r : first, k0, v0);
  fold(ok0, k0, v0);
}

if (sl == 0) {
  s_max[slot] = m;
  s_sum[slot] = l;
}
for (int i = 0; i < PER_LANE; ++i) {
  for (int j = 0; j < VEC; ++j) {
    s_acc[slot][(i * LANES + sl) * VEC + j] = acc[i * VEC + j];
  }
}
__syncthreads();

// A slot (or a whole slice) with no rows holds m = -inf and l = 0: it weighs nothing.
float top = NEG_INF;
for (int w = 0; w < SLOTS; ++w) {
  top = fmaxf(top, s_max[w]);
}
float* out = part + static_cast<int64_t>(blockIdx.x) * (D + 2);
if (threadIdx.x == 0) {
  float total = 0.0f;
  for (int w = 0; w < SLOTS; ++w) {
    total += top == NEG_INF ? 0.0f : s_sum[w] * expf(s_max[w] - top);
  }
  out[0] = top;
  out[1] = total;
}
for (int d = threadIdx.x; d < D; d += blockDim.x) {
  float o = 0.0f;
  if (top != NEG_INF) {
    for (int w = 0; w < SLOTS; ++w) {
      o = fmaf(s_acc[w][d], expf(s_max[w] - top), o);
    }
  }
  out[2 + d] = o;
}
