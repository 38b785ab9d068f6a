"""Do the `fast` numerics profile's kernels (runtime/src/kernels/fast.rs: decode
attention over float and quantized caches, quantized matrix-vector products) compute
what they should, how close to MLX's arithmetic, and at what cost?

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
from kernel_text import compact
from mlx_timing import chain, timed

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "kernels")
WARPS = 4  # runtime/src/kernels/fast.rs


def read(name):
    with open(os.path.join(KERNELS, name)) as f:
        return f.read()


SPLIT = mx.fast.cuda_kernel(
    name="mlx_aot_decode_attention",
    input_names=["q", "k", "v"],
    output_names=["part"],
    source=compact(read("decode_attention.cu")),
    ensure_row_contiguous=False,
)
QSPLIT = mx.fast.cuda_kernel(
    name="mlx_aot_decode_attention_quant",
    input_names=["q", "k", "k_scales", "k_biases", "v", "v_scales", "v_biases"],
    output_names=["part"],
    source=compact(read("decode_attention.cu")),
    header="#define AOT_KV_QUANT 1\n",
    ensure_row_contiguous=False,
)
MERGE = mx.fast.cuda_kernel(
    name="mlx_aot_decode_attention_merge",
    input_names=["part"],
    output_names=["out"],
    source=compact(read("decode_attention_merge.cu")),
)


def f32_bits(v):
    return struct.unpack("<i", struct.pack("<f", v))[0]


def splits(heads, rows):
    """runtime/src/kernels/fast.rs, splits."""
    most = max(512 // max(heads, 1), 1)
    return min(max((rows + 31) // 32, 1), most)


def ours(q, k, v, scale, quant=None):
    """The runtime's two launches; `k` and `v` are (packed, scales, biases) triples when
    `quant` is (bits, group)."""
    b, h, _, d = q.shape
    packed = k[0] if quant else k
    rows = packed.shape[2]
    s = splits(b * h, rows)
    block = WARPS * 32
    template = [
        ("T", q.dtype),
        ("D", d),
        ("HEADS", h),
        ("KV_HEADS", packed.shape[1]),
        ("WARPS", WARPS),
        ("SCALE_BITS", f32_bits(scale)),
    ]
    kernel, ins = SPLIT, [q, k, v]
    if quant:
        kernel, ins = QSPLIT, [q, *k, *v]
        template += [("BITS", quant[0]), ("QGROUP", quant[1])]
    part = kernel(
        inputs=ins,
        template=template,
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


# AOT_QMV_MODE of runtime/kernels/qmv.cu, by the runtime's kernel names (fast.rs, Epilogue).
QMV_MODES = {"plain": (0, "mlx_aot_qmv"), "geglu": (1, "mlx_aot_qmv_geglu"),
             "gelu_times": (2, "mlx_aot_qmv_gelu_times"), "swiglu": (3, "mlx_aot_qmv_swiglu")}
QMV = {
    mode: mx.fast.cuda_kernel(
        name=name,
        input_names=["x", "w", "scales", "biases"] + (["g"] if mode == "gelu_times" else []),
        output_names=["out"],
        source=compact(read("qmv.cu")),
        header=f"#define AOT_QMV_MODE {m}\n",
    )
    for mode, (m, name) in QMV_MODES.items()
}
QMV_WARPS = 8  # runtime/src/kernels/fast.rs


def rows_per_warp(outs):
    """runtime/src/kernels/fast.rs, qmv_rows_per_warp."""
    return 4 if outs >= 32768 else 2 if outs >= 2048 else 1


def qmv_split(outs, k, per_warp):
    """runtime/src/kernels/fast.rs, qmv_split."""
    warps, split = (outs + per_warp - 1) // per_warp, 1
    while split < QMV_WARPS and warps * split < 4096 and k >= 1024 * split * 2:
        split *= 2
    return split


def qmv(x, w, scales, biases, bits, group, mode="plain", g=None):
    k = x.shape[-1]
    parts = 2 if mode in ("geglu", "swiglu") else 1
    n = w.shape[0] // parts
    rows = x.size // k
    block = QMV_WARPS * 32
    r = rows_per_warp(n)
    split = qmv_split(n, k, r)
    return QMV[mode](
        inputs=[x, w, scales, biases] + ([g] if g is not None else []),
        template=[("T", x.dtype), ("BITS", bits), ("GROUP", group), ("K", k), ("M", rows), ("R", r),
                  ("SPLIT", split)],
        grid=(((n + r - 1) // r * split + QMV_WARPS - 1) // QMV_WARPS * block, 1, 1),
        threadgroup=(block, 1, 1),
        output_shapes=[x.shape[:-1] + (n,)],
        output_dtypes=[x.dtype],
    )[0]


def gelu_approx(x):
    """mlx-lm's gelu_approx, op by op in x's dtype (what the `mlx` profile runs)."""
    return 0.5 * x * (1 + mx.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def mlx_qmv(x, w, scales, biases, bits, group, mode="plain", g=None):
    """The same computation through MLX's ops, as the `mlx` profile runs it."""
    y = mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size=group, bits=bits)
    if mode == "plain":
        return y
    if mode == "gelu_times":
        return gelu_approx(y) * g
    gate, up = mx.split(y, 2, axis=-1)
    if mode == "geglu":
        return gelu_approx(gate) * up
    return gate * mx.sigmoid(gate) * up


def exact_qmv(x, w, scales, biases, bits, group, mode="plain", g=None):
    wd = mx.dequantize(w, scales, biases, group_size=group, bits=bits).astype(mx.float32)
    y = x.astype(mx.float32) @ wd.T
    if mode == "plain":
        return y
    if mode == "gelu_times":
        return gelu_approx(y) * g.astype(mx.float32)
    gate, up = mx.split(y, 2, axis=-1)
    if mode == "geglu":
        return gelu_approx(gate) * up
    return gate * mx.sigmoid(gate) * up


def quantized(seed, n, k, bits, group):
    mx.random.seed(seed)
    wf = (mx.random.normal((n, k)) * 0.02).astype(mx.bfloat16)
    w, scales, biases = mx.quantize(wf, group_size=group, bits=bits)
    mx.eval(w, scales, biases)
    return w, scales, biases


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


def dequantized_f32(t, bits, group):
    """A cache triple's values as f32, from f32 scales and biases (no 16-bit rounding)."""
    w, sc, bi = t
    return mx.dequantize(w, sc.astype(mx.float32), bi.astype(mx.float32), group_size=group, bits=bits)


def exact_quant(q, kt, vt, scale, bits, group):
    return exact(q, dequantized_f32(kt, bits, group), dequantized_f32(vt, bits, group), scale)


def mlx_quant(q, kt, vt, scale, bits, group):
    """The `mlx` profile on CUDA (runtime/src/nn/attention.rs, sdpa_quantized_reference):
    q * scale, each triple dequantized to the 16-bit dtype, matmul, precise softmax, matmul."""
    b, h, _, d = q.shape
    hkv = kt[0].shape[1]
    k = mx.dequantize(*kt, group_size=group, bits=bits)[:, :, None]
    v = mx.dequantize(*vt, group_size=group, bits=bits)[:, :, None]
    qs = (q * scale).reshape(b, hkv, h // hkv, 1, d)
    p = mx.softmax(qs @ k.swapaxes(-1, -2), axis=-1, precise=True)
    return (p @ v).reshape(b, h, 1, d)


def passes(args, ours_err, mlx_err):
    """A case's verdict from its relative errors to exact: under --tol, and at most
    --factor times MLX's own plus 1e-5 of slack."""
    return ours_err < args.tol and ours_err <= args.factor * mlx_err + 1e-5


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


def quant_inputs(seed, batch, h, hkv, d, rows, strided, bits, group):
    """As `inputs`, with K and V quantized along D the way the caches store them."""
    q, k, v = inputs(seed, batch, h, hkv, d, rows + (37 if strided else 0), False)
    kt, vt = mx.quantize(k, group_size=group, bits=bits), mx.quantize(v, group_size=group, bits=bits)
    if strided:
        kt, vt = tuple(a[:, :, :rows] for a in kt), tuple(a[:, :, :rows] for a in vt)
    mx.eval(kt, vt)
    return q, kt, vt


# (label, heads, kv_heads, head dim, scale, [(bits, group)]): the quantized presets'
# single-token shapes (Gemma 4's, and Llama/Qwen3 at head dims 64 and 128).
QUANT_SHAPES = [
    ("e4b sliding", 8, 2, 256, 1.0, [(4, 64), (8, 64), (4, 32), (8, 128)]),
    ("e4b full", 8, 2, 512, 1.0, [(4, 64), (8, 64)]),
    ("26b-a4b full (K=V)", 16, 2, 512, 1.0, [(8, 64)]),
    ("llama-3.2-1b", 32, 8, 64, 0.125, [(4, 64), (8, 64), (4, 32)]),
    ("qwen3/llama-8b", 32, 8, 128, 128 ** -0.5, [(4, 64), (8, 64), (4, 128)]),
]
QUANT_ROWS = [1, 7, 33, 511, 513, 1000, 4096]


def check_quant_attention(args, results):
    failed = 0
    print("| quantized K/V | bits | group | batch | rows | view | ours vs exact | MLX ops vs exact | ok |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---|")
    for label, h, hkv, d, scale, specs in QUANT_SHAPES:
        for bits, group in specs:
            for batch in (1, 2):
                for rows in QUANT_ROWS:
                    for strided in (False, True):
                        if strided and rows not in (7, 1000):
                            continue
                        worst = [0.0, 0.0]
                        for seed in range(args.seeds):
                            q, kt, vt = quant_inputs(seed, batch, h, hkv, d, rows, strided, bits, group)
                            e = exact_quant(q, kt, vt, scale, bits, group)
                            o = ours(q, kt, vt, scale, (bits, group))
                            m = mlx_quant(q, kt, vt, scale, bits, group)
                            worst = [max(worst[0], rel(o, e)), max(worst[1], rel(m, e))]
                        ok = passes(args, worst[0], worst[1])
                        failed += not ok
                        results["correctness"].append(dict(kernel="quantized attention", shape=label, bits=bits,
                                                           group=group, batch=batch, rows=rows, strided=strided,
                                                           ours_vs_exact=worst[0], mlx_vs_exact=worst[1], ok=ok))
                        print(f"| {label} | {bits} | {group} | {batch} | {rows} | {'slice' if strided else 'whole'} | "
                              f"{worst[0]:.2e} | {worst[1]:.2e} | {'yes' if ok else 'NO'} |", flush=True)
    print()
    print("| quantized K/V | bits | rows | ours submit us | ours total us | MLX ops submit us | MLX ops total us |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, h, hkv, d, scale, specs in QUANT_SHAPES:
        bits, group = specs[0]
        for rows in (512, 4096):
            q, kt, vt = quant_inputs(0, 1, h, hkv, d, rows, True, bits, group)
            n = args.n
            s_o, t_o = timed(chain(lambda x: ours(x, kt, vt, scale, (bits, group)), q, n), args.reps)
            s_m, t_m = timed(chain(lambda x: mlx_quant(x, kt, vt, scale, bits, group), q, n), args.reps)
            row = dict(kernel="quantized attention", shape=label, bits=bits, rows=rows,
                       ours_submit_us=s_o / n * 1e6, ours_total_us=t_o / n * 1e6,
                       mlx_submit_us=s_m / n * 1e6, mlx_total_us=t_m / n * 1e6)
            results["timing"].append(row)
            print(f"| {label} | {bits} | {rows} | {row['ours_submit_us']:.2f} | {row['ours_total_us']:.2f} | "
                  f"{row['mlx_submit_us']:.2f} | {row['mlx_total_us']:.2f} |", flush=True)
    print()
    return failed


def check_attention(args, results):
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
                    ok = passes(args, worst[0], worst[1])
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
    print()
    return failed


def check_qmv(args, results):
    failed = 0
    print("| quantized matvec | epilogue | bits | group | rows | ours vs exact | MLX vs exact | ok |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    cases = [(2560, 10240, "plain"), (10240, 2560, "plain"), (2560, 3072, "plain"), (256, 2560, "plain"),
             (2816, 704, "plain"), (2560, 20480, "geglu"), (2560, 256, "gelu_times"),
             (2048, 16384, "swiglu"),
             # A row's last units short of a warp's pass; a warp's last features past the end.
             (288, 100, "plain"), (2560, 2051, "plain"),
             # K split over 4 warps (fast.rs, qmv_split): a feature set past the end, whole
             # groups of warps past it, SwiGLU's two parts, the per-layer gate's g.
             (10240, 2050, "plain"), (8192, 4096, "swiglu"), (6144, 300, "gelu_times")]
    for k, n, mode in cases:
        combos = ((4, 64), (8, 64)) if args.quick else ((4, 64), (4, 32), (4, 128), (8, 64))
        for bits, group in combos:
            if k % group:
                continue
            for rows in ((1, 3) if args.quick else (1, 2, 8)):
                worst = [0.0, 0.0]
                for seed in range(args.seeds):
                    w, sc, bi = quantized(seed, n, k, bits, group)
                    mx.random.seed(1000 + seed)
                    x = mx.random.normal((1, rows, k)).astype(mx.bfloat16)
                    g = mx.random.normal((1, rows, n)).astype(mx.bfloat16) if mode == "gelu_times" else None
                    e = exact_qmv(x, w, sc, bi, bits, group, mode, g)
                    o = qmv(x, w, sc, bi, bits, group, mode, g)
                    m = mlx_qmv(x, w, sc, bi, bits, group, mode, g)
                    worst = [max(worst[0], rel(o, e)), max(worst[1], rel(m, e))]
                ok = passes(args, worst[0], worst[1])
                failed += not ok
                results["correctness"].append(dict(kernel="qmv", epilogue=mode, k=k, n=n, bits=bits,
                                                   group=group, rows=rows, ours_vs_exact=worst[0],
                                                   mlx_vs_exact=worst[1], ok=ok))
                print(f"| {k}->{n} | {mode} | {bits} | {group} | {rows} | {worst[0]:.2e} | {worst[1]:.2e} | "
                      f"{'yes' if ok else 'NO'} |")
    print()
    return failed


def time_qmv(args, results):
    """Per call, for each projection of a gemma4-e4b decode step (4-bit, group 64, one
    row): building the op, submitting and finishing, ours against the MLX ops the `mlx`
    profile runs for the same result; bandwidth of the weight bytes read."""
    print("| e4b projection (4-bit g64, 1 row) | weight MB | ours build us | ours submit us | ours total us | "
          "ours GB/s | MLX ops | MLX build us | MLX submit us | MLX total us | MLX GB/s |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    shapes = [("q/k/v, sliding", 2560, 3072, "plain"), ("q/k/v, full", 2560, 6144, "plain"),
              ("o_proj, sliding", 2048, 2560, "plain"), ("o_proj, full", 4096, 2560, "plain"),
              ("gate/up + gelu", 2560, 20480, "geglu"), ("down", 10240, 2560, "plain"),
              ("per-layer gate + gelu * input", 2560, 256, "gelu_times"),
              ("per-layer projection", 256, 2560, "plain"), ("lm head", 2560, 262144, "plain")]
    import time
    for label, k, n, mode in shapes:
        w = quantized(7, n, k, 4, 64)
        calls = 4 if n > 100000 else args.n // 4
        xs = [mx.random.normal((1, 1, k)).astype(mx.bfloat16) for _ in range(calls)]
        out = n // 2 if mode == "geglu" else n
        gs = [mx.random.normal((1, 1, out)).astype(mx.bfloat16) for _ in range(calls)]
        mx.eval(xs, gs)
        nbytes = sum(a.nbytes for a in w)
        row = dict(case=label, k=k, n=n, epilogue=mode, weight_mb=nbytes / 1e6, calls=calls)
        for side, f in (("ours", qmv), ("mlx", mlx_qmv)):
            def build():
                return [f(x, *w, 4, 64, mode, g if mode == "gelu_times" else None)
                        for x, g in zip(xs, gs)]
            t0 = time.perf_counter()
            for _ in range(args.reps):
                ys = build()
            t_build = (time.perf_counter() - t0) / args.reps
            mx.eval(ys)
            s_, t_ = timed(build, args.reps)
            row[f"{side}_build_us"] = t_build / calls * 1e6
            row[f"{side}_submit_us"] = s_ / calls * 1e6
            row[f"{side}_total_us"] = t_ / calls * 1e6
            row[f"{side}_gb_s"] = nbytes / (t_ / calls) / 1e9
        mlx_ops = {"plain": "qmm", "geglu": "qmm, split, 7 elementwise",
                   "gelu_times": "qmm, 7 elementwise", "swiglu": "qmm, split, 3 elementwise"}[mode]
        results["timing"].append(row)
        print(f"| {label} | {row['weight_mb']:.1f} | {row['ours_build_us']:.2f} | {row['ours_submit_us']:.2f} | "
              f"{row['ours_total_us']:.2f} | {row['ours_gb_s']:.0f} | {mlx_ops} | {row['mlx_build_us']:.2f} | "
              f"{row['mlx_submit_us']:.2f} | {row['mlx_total_us']:.2f} | {row['mlx_gb_s']:.0f} |", flush=True)
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-2)
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--json", default="fast-kernel-check.json")
    ap.add_argument("--only", choices=["all", "attention", "quant-attention", "qmv"], default="all")
    ap.add_argument("--quick", action="store_true", help="fewer quantized matvec cases")
    args = ap.parse_args()

    results = {"correctness": [], "timing": []}
    failed = 0
    if args.only in ("all", "qmv"):
        # The timing first: it is the figure a short lease must not lose.
        time_qmv(args, results)
    if args.only in ("all", "attention"):
        failed += check_attention(args, results)
    if args.only in ("all", "quant-attention"):
        failed += check_quant_attention(args, results)
    if args.only in ("all", "qmv"):
        failed += check_qmv(args, results)
    results["failed"] = failed
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\n{failed} failed case(s); wrote {args.json}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
