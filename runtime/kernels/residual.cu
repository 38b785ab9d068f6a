// The residual add after a block and what follows it, one row per block:
//   h_out = h + rms_norm(d, wd)        (times the layer scalar s[0] with AOT_SCALE)
//   x_out = rms_norm(h_out, wn)        (with AOT_NEXT: the next block's input norm)
__shared__ float warp_sums[BLOCK / 32];
const float eps = __int_as_float(EPS);
const uint32_t row = blockIdx.x;
aot::Row<T, BLOCK, CHUNKS> r;
aot::Row<T, BLOCK, CHUNKS> stream;
r.load(d + row * AXIS, AXIS);
r.normalize(wd, 1, AXIS, eps, warp_sums);
stream.load(h + row * AXIS, AXIS);
r.add_to(stream);
#if AOT_SCALE
r.scale(s[0]);
#endif
r.store(h_out + row * AXIS, AXIS);
#if AOT_NEXT
r.normalize(wn, 1, AXIS, eps, warp_sums);
r.store(x_out + row * AXIS, AXIS);
#endif
