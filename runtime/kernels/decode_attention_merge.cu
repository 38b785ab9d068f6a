// Single-token attention of the `fast` numerics profile, part 2 of 2: combines the
// slices' partial softmaxes of one head (decode_attention.cu) into its output.
//
// part [B * HEADS, SPLITS, D + 2] (per slice m, l, acc[D]), out [B, HEADS, 1, D]. Block
// bh, thread d: out = sum_s acc_s[d] e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s.
const float NEG_INF = __int_as_float(static_cast<int>(0xff800000u));
const int splits = part_shape[1];
const int bh = blockIdx.x;
const float* p = part + static_cast<int64_t>(bh) * splits * (D + 2);
float top = NEG_INF;
for (int s = 0; s < splits; ++s) {
  top = fmaxf(top, p[s * (D + 2)]);
}
float total = 0.0f;
for (int s = 0; s < splits; ++s) {
  const float ms = p[s * (D + 2)];
  total += ms == NEG_INF ? 0.0f : p[s * (D + 2) + 1] * expf(ms - top);
}
const float inv = 1.0f / total;
for (int d = threadIdx.x; d < D; d += blockDim.x) {
  float o = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float ms = p[s * (D + 2)];
    if (ms != NEG_INF) {
      o = fmaf(p[s * (D + 2) + 2 + d], expf(ms - top), o);
    }
  }
  out[bh * D + d] = static_cast<T>(o * inv);
}
