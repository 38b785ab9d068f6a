"""Which rewrites of a Gemma 4 single-token step keep every bit, on this MLX device.

Each case builds one piece of a decode step two ways, the reference's composition and a
leaner one with fewer MLX ops, at gemma4-e4b's and gemma4-26b-a4b's shapes, and compares
the results byte for byte:

1. Attention. Whether `mx.fast.scaled_dot_product_attention` runs MLX's fused kernel or
   its op-by-op fallback for one query token (the primitives of its graph), and, where it
   falls back, two shorter decompositions: the fallback's own ops without its multiply
   by the scale 1.0 ("noscale"), and the query heads of a KV group as rows of one matmul
   ("grouped": no broadcast axis).
2. Heads by reshape: for one token, `[B, 1, nh*D] -> [B, nh, 1, D]` is a reshape; against
   reshape, norm, transpose (queries, keys, values, then RoPE) and transpose, reshape
   (the attention output).
3. Split: one `split` against one slice per part.
4. Compiled tails: `(h + g) * s` compiled against the two ops (the layer scalar), and
   `gelu_approx(g) * pli` as one compiled function (mlx-lm's `geglu`) against the compiled
   `gelu_approx` then the multiply (the per-layer-input gate).

Prints one line per case; `--json FILE` writes them.
"""

import collections
import json
import os
import re
import sys
import tempfile

import mlx.core as mx
import mlx.nn as nn


def primitives(*outs):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.dot")
        mx.export_to_dot(path, *outs)
        text = open(path).read()
    rows = [l for l in text.splitlines() if "shape=rectangle" in l]
    names = [re.search(r'label\s*=\s*"([^"]+)"', l).group(1) for l in rows]
    return dict(collections.Counter(names))


def differ(a, b):
    mx.eval(a, b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    return int(mx.sum(a.view(mx.uint16) != b.view(mx.uint16)).item())


def bf16(shape, key, scale=1.0):
    return (mx.random.normal(shape, key=key) * scale).astype(mx.bfloat16)


def leaf(x):
    mx.eval(x)
    return x


def noscale(q, k, v):
    kvh, rep = k.shape[1], q.shape[1] // k.shape[1]
    qg = mx.unflatten(q, 1, (kvh, rep))
    s = qg @ mx.expand_dims(k, 2).swapaxes(-1, -2)
    p = mx.softmax(s, axis=-1, precise=True)
    return mx.flatten(p @ mx.expand_dims(v, 2), 1, 2)


def grouped(q, k, v):
    b, h, l, d = q.shape
    kvh = k.shape[1]
    qg = q.reshape(b, kvh, (h // kvh) * l, d)
    s = qg @ k.swapaxes(-1, -2)
    p = mx.softmax(s, axis=-1, precise=True)
    return (p @ v).reshape(b, h, l, d)


def attention_cases(key, out):
    shapes = [("e4b sliding", 8, 2, 256), ("e4b full", 8, 2, 512),
              ("26b sliding", 16, 8, 256), ("26b full", 16, 2, 512)]
    for name, heads, kvh, d in shapes:
        for rows, layout in ((512, "ring"), (600, "growing"), (1300, "growing")):
            key, kq, kk, kv = mx.random.split(key, 4)
            q = leaf(bf16((1, heads, 1, d), kq))
            cap = rows + 256 if layout == "growing" else rows
            k = bf16((1, kvh, cap, d), kk)
            v = bf16((1, kvh, cap, d), kv)
            if layout == "growing":
                k, v = k[:, :, :rows, :], v[:, :, :rows, :]
            k, v = leaf(k), leaf(v)
            ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask=None)
            prims = primitives(ref)
            fused = "ScaledDotProductAttention" in prims
            r = {"case": f"sdpa {name} {layout} {rows}", "fused": fused, "ops": sum(prims.values()),
                 "noscale": differ(noscale(q, k, v), ref), "grouped": differ(grouped(q, k, v), ref)}
            out.append(r)
    return key


def heads_cases(key, out):
    for name, heads, d, dims in (("q e4b sliding", 8, 256, 256), ("q e4b full", 8, 512, 128),
                                 ("k 26b sliding", 8, 256, 256), ("k 26b full", 2, 512, 128)):
        key, kx, kw = mx.random.split(key, 3)
        x = leaf(bf16((1, 1, heads * d), kx))
        w = leaf(bf16((d,), kw, 0.1) + 1)
        base = 10000.0 if dims == d else 1000000.0
        ref = mx.fast.rms_norm(x.reshape(1, 1, heads, d), w, 1e-6).transpose(0, 2, 1, 3)
        ref = mx.fast.rope(ref, dims, traditional=False, base=base, scale=1.0, offset=777)
        lean = mx.fast.rms_norm(x.reshape(1, heads, 1, d), w, 1e-6)
        lean = mx.fast.rope(lean, dims, traditional=False, base=base, scale=1.0, offset=777)
        out.append({"case": f"heads {name} norm+rope", "differ": differ(lean, ref)})
        o = leaf(bf16((1, heads, 1, d), kx))
        wo = mx.quantize(bf16((2560, heads * d), kw, 0.02), 64, 4)
        ref = mx.quantized_matmul(o.transpose(0, 2, 1, 3).reshape(1, 1, -1), *wo, transpose=True, group_size=64, bits=4)
        lean = mx.quantized_matmul(o.reshape(1, 1, -1), *wo, transpose=True, group_size=64, bits=4)
        out.append({"case": f"heads {name} o_proj", "differ": differ(lean, ref)})
    return key


def split_and_tails(key, out):
    key, k1, k2, k3, k4, k5 = mx.random.split(key, 6)
    y = leaf(bf16((1, 1, 2048 + 512 + 512), k1))
    parts = mx.split(y, [2048, 2560], axis=-1)
    slices = [y[..., :2048], y[..., 2048:2560], y[..., 2560:]]
    out.append({"case": "split q/k/v", "ops": primitives(*parts),
                "differ": [differ(a, b) for a, b in zip(parts, slices)]})
    h = leaf(bf16((1, 1, 2560), k2))
    g = leaf(bf16((1, 1, 2560), k3))
    s = leaf(bf16((1,), k4, 0.3))
    tail = mx.compile(lambda h, g, s: (h + g) * s, shapeless=True)
    out.append({"case": "compiled (h + g) * s", "differ": differ(tail(h, g, s), (h + g) * s)})
    gate = leaf(bf16((1, 1, 256), k5))
    pli = leaf(bf16((1, 1, 42, 256), k1))[:, :, 7, :]
    geglu = mx.compile(lambda a, b: nn.gelu_approx(a) * b, shapeless=True)
    out.append({"case": "compiled geglu(gate, pli)", "differ": differ(geglu(gate, pli), nn.gelu_approx(gate) * pli)})
    return key


def main():
    results = {"device": str(mx.default_device()), "mlx": mx.__version__, "cases": []}
    key = mx.random.key(0)
    key = attention_cases(key, results["cases"])
    key = heads_cases(key, results["cases"])
    split_and_tails(key, results["cases"])
    print(results["device"], "mlx", results["mlx"])
    for r in results["cases"]:
        print(json.dumps(r))
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
