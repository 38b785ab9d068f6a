"""Do the `fast` numerics profile's kernels (runtime/src/kernels/fast.rs) compute what
they should, how close to MLX's arithmetic, and at what cost?

Runs each kernel through `mx.fast.cuda_kernel` (the source and template parameters the
Rust runtime uses) on seeded inputs at the presets' decode shapes, and compares it with
a float32 computation of the same formula from the same 16-bit inputs ("exact") and with
what MLX 0.32.2 computes (`mx.fast.scaled_dot_product_attention`, which at these head
dims is its op-by-op fallback). A case passes when the kernel's relative error to exact
is below --tol and at most --factor times MLX's own (plus 1e-3 of a bf16 ulp's worth of
slack). Then times chains of dependent calls (each call's output is the next call's
query) against MLX's attention: submission and total per call, and the device bandwidth
of the K/V rows read. Needs a CUDA MLX on PYTHONPATH; prints tables, writes JSON, exits 1
on any failed case.

    python3 scripts/fast-kernel-check.py [--seeds 4] [--n 200] [--reps 5] [--json FILE]
"""

import argparse
import json
import os
import struct
import sys

import mlx.core as mx
from mlx_timing import chain, timed

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "kernels")
WARPS = 4  # runtime/src/kernels/fast.rs


def read(name):
    with open(os.path.join(KERNELS, name)) as f:
        return f.read()


HEADER = read("fused.cuh")
SPLIT = mx.fast.cuda_kernel(
    name="mlx_aot_decode_attention",
    input_names=["q", "k", "v"],
    output_names=["part"],
    source=read("decode_attention.cu"),
    header=HEADER,
    ensure_row_contiguous=False,
)
MERGE = mx.fast.cuda_kernel(
    name="mlx_aot_decode_attention_merge",
    input_names=["part"],
    output_names=["out"],
    source=read("decode_attention_merge.cu"),
    header=HEADER,
)


def f32_bits(v):
    return struct.unpack("<i", struct.pack("<f", v))[0]


def splits(heads, rows):
    """runtime/src/kernels/fast.rs, splits."""
    most = max(512 // max(heads, 1), 1)
    return min(max((rows + 31) // 32, 1), most)


def ours(q, k, v, scale):
    b, h, _, d = q.shape
    rows = k.shape[2]
    s = splits(b * h, rows)
    block = WARPS * 32
    part = SPLIT(
        inputs=[q, k, v],
        template=[
            ("T", q.dtype),
            ("D", d),
            ("HEADS", h),
            ("KV_HEADS", k.shape[1]),
            ("WARPS", WARPS),
            ("SCALE_BITS", f32_bits(scale)),
        ],
        grid=(b * h * s * block, 1, 1),
        threadgroup=(block, 1, 1),
        output_shapes=[(b * h, s, d + 2)],
        output_dtypes=[mx.float32],
    )[0]
    mb = min(d, 256)
    return MERGE(
        inputs=[part],
        template=[("T", q.dtype), ("D", d)],
        grid=(b * h * mb, 1, 1),
        threadgroup=(mb, 1, 1),
        output_shapes=[(b, h, 1, d)],
        output_dtypes=[q.dtype],
    )[0]


def exact(q, k, v, scale):
    b, h, _, d = q.shape
    hkv = k.shape[1]
    qf = q.astype(mx.float32).reshape(b, hkv, h // hkv, 1, d) * scale
    kf = k.astype(mx.float32)[:, :, None]
    vf = v.astype(mx.float32)[:, :, None]
    s = qf @ kf.swapaxes(-1, -2)
    p = mx.softmax(s, axis=-1, precise=True)
    return (p @ vf).reshape(b, h, 1, d)


def mlx(q, k, v, scale):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)


def rel(a, b):
    a = a.astype(mx.float32)
    b = b.astype(mx.float32)
    return (mx.sqrt(mx.sum((a - b) ** 2)) / mx.sqrt(mx.sum(b * b))).item()


# (label, heads, kv_heads, head dim, scale): the presets' single-token attention shapes
# the kernel takes (Gemma 4: q/k norms stand in for the scale, 1.0).
SHAPES = [
    ("e4b sliding", 8, 2, 256, 1.0),
    ("e4b full", 8, 2, 512, 1.0),
    ("26b-a4b sliding", 16, 8, 256, 1.0),
    ("26b-a4b full (K=V)", 16, 2, 512, 1.0),
    ("31b sliding", 32, 16, 256, 1.0),
    ("31b full (K=V)", 32, 4, 512, 1.0),
    ("scaled", 8, 2, 256, 0.0625),
]
ROWS = [1, 7, 31, 33, 511, 512, 513, 1000, 4096, 20000]


def inputs(seed, batch, h, hkv, d, rows, strided):
    mx.random.seed(seed)
    q = mx.random.normal((batch, h, 1, d)).astype(mx.bfloat16)
    cap = rows + (37 if strided else 0)
    k = mx.random.normal((batch, hkv, cap, d)).astype(mx.bfloat16)
    v = mx.random.normal((batch, hkv, cap, d)).astype(mx.bfloat16)
    if strided:
        # The caches hand attention a view of their buffer's first rows.
        k, v = k[:, :, :rows], v[:, :, :rows]
    mx.eval(q, k, v)
    return q, k, v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-2)
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--json", default="fast-kernel-check.json")
    args = ap.parse_args()

    results = {"correctness": [], "timing": []}
    failed = 0
    print("| shape | batch | rows | view | ours vs exact (max of seeds) | MLX vs exact | ours vs MLX | ok |")
    print("|---|---:|---:|---|---:|---:|---:|---|")
    for label, h, hkv, d, scale in SHAPES:
        for batch in (1, 2):
            for rows in ROWS:
                for strided in (False, True):
                    if strided and rows not in (7, 1000):
                        continue
                    worst = [0.0, 0.0, 0.0]
                    for seed in range(args.seeds):
                        q, k, v = inputs(seed, batch, h, hkv, d, rows, strided)
                        e = exact(q, k, v, scale)
                        o = ours(q, k, v, scale)
                        m = mlx(q, k, v, scale)
                        errs = [rel(o, e), rel(m, e), rel(o, m)]
                        worst = [max(a, b) for a, b in zip(worst, errs)]
                    ok = worst[0] < args.tol and worst[0] <= args.factor * worst[1] + 1e-5
                    failed += not ok
                    row = dict(shape=label, batch=batch, rows=rows, strided=strided,
                               ours_vs_exact=worst[0], mlx_vs_exact=worst[1],
                               ours_vs_mlx=worst[2], ok=ok)
                    results["correctness"].append(row)
                    print(f"| {label} | {batch} | {rows} | {'slice' if strided else 'whole'} | "
                          f"{worst[0]:.2e} | {worst[1]:.2e} | {worst[2]:.2e} | {'yes' if ok else 'NO'} |")
    print()
    print("| shape | rows | ours submit us | ours total us | MLX submit us | MLX total us | ours GB/s of K/V |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, h, hkv, d, scale in SHAPES[:4]:
        for rows in (512, 1024, 4096):
            q, k, v = inputs(0, 1, h, hkv, d, rows, True)
            n = args.n
            s_o, t_o = timed(chain(lambda x: ours(x, k, v, scale), q, n), args.reps)
            s_m, t_m = timed(chain(lambda x: mlx(x, k, v, scale), q, n), args.reps)
            kv_bytes = 2 * hkv * rows * d * 2
            per_o = t_o / n
            row = dict(shape=label, rows=rows, ours_submit_us=s_o / n * 1e6,
                       ours_total_us=per_o * 1e6, mlx_submit_us=s_m / n * 1e6,
                       mlx_total_us=t_m / n * 1e6, ours_kv_gb_s=kv_bytes / per_o / 1e9)
            results["timing"].append(row)
            print(f"| {label} | {rows} | {row['ours_submit_us']:.2f} | {row['ours_total_us']:.2f} | "
                  f"{row['mlx_submit_us']:.2f} | {row['mlx_total_us']:.2f} | {row['ours_kv_gb_s']:.0f} |")
    results["failed"] = failed
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\n{failed} failed case(s); wrote {args.json}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
