"""Which MLX op of a ragged-row decode step fails on this device: RoPE with an array of
per-row offsets, attention with a per-row boolean mask, row selection and joins."""
import mlx.core as mx

def check(name, f):
    try:
        y = f()
        mx.eval(y)
        print(name, "ok", y.shape)
    except Exception as e:
        print(name, "FAILED", str(e)[:200])

B, H, D, S = 3, 8, 64, 37
x = mx.random.normal((B, H, 1, D)).astype(mx.bfloat16)
off = mx.array([5, 9, 3], dtype=mx.int32)
check("rope offset array int32", lambda: mx.fast.rope(x, D, traditional=False, base=500000.0, scale=1.0, offset=off))
check("rope offset array uint32", lambda: mx.fast.rope(x, D, traditional=False, base=500000.0, scale=1.0, offset=off.astype(mx.uint32)))
check("rope offset scalar", lambda: mx.fast.rope(x, D, traditional=False, base=500000.0, scale=1.0, offset=4))
freqs = mx.random.uniform(shape=(D // 2,))
check("rope freqs + offset array", lambda: mx.fast.rope(x, D, traditional=False, base=None, scale=1.0, offset=off, freqs=freqs))
k = mx.random.normal((B, 2, S, D)).astype(mx.bfloat16)
v = mx.random.normal((B, 2, S, D)).astype(mx.bfloat16)
q = mx.random.normal((B, H, 1, D)).astype(mx.bfloat16)
m = mx.arange(S).reshape(1, 1, 1, S) >= mx.array([0, 4, 9]).reshape(B, 1, 1, 1)
check("sdpa bool mask [B,1,1,S]", lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=m))
check("take rows", lambda: mx.take(k, mx.array([0, 2]), axis=0))
check("concat rows", lambda: mx.concatenate([k, k[:1]], axis=0))
# The rope result rows equal their solo calls?
r = mx.fast.rope(x, D, traditional=False, base=500000.0, scale=1.0, offset=off)
for b, o in enumerate([5, 9, 3]):
    s = mx.fast.rope(x[b:b+1], D, traditional=False, base=500000.0, scale=1.0, offset=o)
    print("row", b, "rope equal to solo:", mx.array_equal(r[b:b+1], s).item())
