"""Which rewrites of a Gemma 4 layer keep every bit, on this MLX device.

1. Concatenated projections: one quantized matmul over [Wq; Wk; Wv] (or [Wgate; Wup])
   sliced apart, against one quantized matmul per weight, at gemma4-e4b's shapes, for a
   decode step (M = 1) and a prefill (M = 515).
2. Compiled elementwise chains against the same ops one kernel each: a multiply feeding
   an add (the pattern a fused kernel may contract into one FMA), an add feeding a
   multiply, and Gemma 4's residual tail.

Prints one line per case: equal (bytes) or the count of differing elements.
Usage: python3 fusion-probe.py [--json FILE]
"""

import json
import sys

import mlx.core as mx


def same(a, b):
    mx.eval(a, b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype differ: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    diff = int(mx.sum(a.view(mx.uint16) != b.view(mx.uint16)).item()) if a.dtype == mx.bfloat16 else int(mx.sum(a != b).item())
    return "equal" if diff == 0 else f"{diff} of {a.size} differ"


def qweight(n, k, key):
    w = (mx.random.normal((n, k), key=key) * 0.02).astype(mx.bfloat16)
    return mx.quantize(w, 64, 4)


def concat_case(hidden, outs, m, key):
    keys = mx.random.split(key, len(outs) + 1)
    ws = [qweight(n, hidden, k) for n, k in zip(outs, keys[1:])]
    x = mx.random.normal((1, m, hidden), key=keys[0]).astype(mx.bfloat16)
    sep = [mx.quantized_matmul(x, *w, transpose=True, group_size=64, bits=4) for w in ws]
    fused_w = [mx.concatenate([w[i] for w in ws], axis=0) for i in range(3)]
    mx.eval(fused_w)
    fused = mx.quantized_matmul(x, *fused_w, transpose=True, group_size=64, bits=4)
    parts, start = [], 0
    for n in outs:
        parts.append(fused[..., start : start + n])
        start += n
    return [same(a, b) for a, b in zip(sep, parts)]


def main():
    results = {"device": str(mx.default_device())}
    key = mx.random.key(0)
    for m in (1, 515):
        results[f"qkv M={m}"] = concat_case(2560, [2048, 512, 512], m, key)
        results[f"q-only-shared M={m}"] = concat_case(2560, [2048], m, key)
        results[f"gate/up M={m}"] = concat_case(2560, [10240, 10240], m, key)
        results[f"ple gate/up-like M={m}"] = concat_case(2560, [256, 256], m, key)

    k = mx.random.split(key, 4)
    h = mx.random.normal((1, 1, 2560), key=k[0]).astype(mx.bfloat16)
    x = mx.random.normal((1, 1, 2560), key=k[1]).astype(mx.bfloat16)
    s = mx.random.normal((2560,), key=k[2]).astype(mx.bfloat16)
    c = mx.array(0.7, dtype=mx.bfloat16)
    chains = {
        "mul->add": lambda h, x, s: h + x * s,
        "add->mul": lambda h, x, s: (h + x) * s,
        "add->mul(scalar)": lambda h, x, s: (h + x) * c,
        "mul->add->mul": lambda h, x, s: (h + x * s) * c,
    }
    for name, f in chains.items():
        eager = f(h, x, s)
        compiled = mx.compile(f)(h, x, s)
        results[f"compiled {name}"] = same(eager, compiled)
    for name, v in results.items():
        print(f"{name:28} {v}")
    if len(sys.argv) == 3 and sys.argv[1] == "--json":
        with open(sys.argv[2], "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
