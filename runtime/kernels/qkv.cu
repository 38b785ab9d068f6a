// A layer's attention inputs from its q/k/v projection, one head of one token per block:
// each head RMS-normed (q_norm, k_norm, or the weightless v_norm: `ones`, stride 0), then
// q and k rotated at position offset[0] as MLX's rope_single kernels rotate one token
// (halves, not interleaved; base 2^BASE, or the periods `freqs` with AOT_FREQS).
// qkv: [tokens, (HQ + KV_HEADS_IN * HKV) * D]; q: [tokens, HQ, D]; k, v: [tokens, HKV, D].
__shared__ float warp_sums[BLOCK / 32];
__shared__ alignas(16) T buf[D];
const float eps = __int_as_float(EPS);
#if AOT_KV
constexpr int HEADS = HQ + 2 * HKV;
constexpr int ROW = HQ + (K_EQ_V ? 1 : 2) * HKV;
#else
constexpr int HEADS = HQ;
constexpr int ROW = HQ;
#endif
const int token = blockIdx.x / HEADS;
const int head = blockIdx.x % HEADS;
const T* src = qkv + static_cast<int64_t>(token * ROW + head) * D;
T* dst = q + static_cast<int64_t>(token * HQ + head) * D;
const T* w = wq;
int64_t w_stride = 1;
bool roped = true;
#if AOT_KV
if (head >= HQ + HKV) {
  const int j = head - HQ - HKV;
  src = qkv + static_cast<int64_t>(token * ROW + HQ + (K_EQ_V ? 0 : HKV) + j) * D;
  dst = v + static_cast<int64_t>(token * HKV + j) * D;
  w = ones;
  w_stride = 0;
  roped = false;
} else if (head >= HQ) {
  const int j = head - HQ;
  dst = k + static_cast<int64_t>(token * HKV + j) * D;
  w = wk;
}
#endif
aot::Row<T, BLOCK, CHUNKS> r;
r.load(src, D);
r.normalize(w, w_stride, D, eps, warp_sums);
if (!roped) {
  r.store(dst, D);
  return;
}
r.store(buf, D);
__syncthreads();
const float position = static_cast<float>(offset[0]);
for (int p = threadIdx.x; p < D / 2; p += BLOCK) {
#if AOT_FREQS
  const float inv_freq = 1.0 / freqs[p];
#else
  const float d = static_cast<float>(p) / static_cast<float>(D / 2);
  const float inv_freq = exp2(-d * __int_as_float(BASE));
#endif
  const float theta = position * inv_freq;
  const float c = cos(theta);
  const float s = sin(theta);
  const float x1 = aot::f32(buf[p]);
  const float x2 = aot::f32(buf[p + D / 2]);
// MLX's kernel is AOT_ROPE_FORM 1 (what the runtime compiles); the others are the forms
// scripts/fused-kernel-probe.py tells it from.
#if AOT_ROPE_FORM == 1
  const float rx1 = __fmaf_rn(x1, c, -__fmul_rn(x2, s));
  const float rx2 = __fmaf_rn(x1, s, __fmul_rn(x2, c));
#elif AOT_ROPE_FORM == 2
  const float rx1 = __fmaf_rn(-x2, s, __fmul_rn(x1, c));
  const float rx2 = __fmaf_rn(x2, c, __fmul_rn(x1, s));
#elif AOT_ROPE_FORM == 3
  const float rx1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  const float rx2 = __fadd_rn(__fmul_rn(x1, s), __fmul_rn(x2, c));
#else
  const float rx1 = x1 * c - x2 * s;
  const float rx2 = x1 * s + x2 * c;
#endif
  dst[p] = aot::to<T>(rx1);
  dst[p + D / 2] = aot::to<T>(rx2);
}
