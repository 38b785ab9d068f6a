"""Do mlx-aot's fused CUDA kernels (runtime/kernels/) give the bytes of the MLX ops they
replace, and what does one cost?

Runs each fused kernel through `mx.fast.cuda_kernel` (the same source the Rust runtime
compiles) on many seeded inputs at Gemma 4 shapes, beside the MLX 0.32.2 ops it replaces
(`fast.rms_norm`, `fast.rope`, the compiled activations, the adds), and compares the
outputs bit for bit. (Run 3 of benchmarks/h200-2026-12-02b is this probe before the
`gelu then multiply` check was added; that form was found by MLX_AOT_FUSED_CHECK=1 in
the parity gate, run 7.) Forms of the arithmetic that a compiler may contract differently
(`AOT_SQ_FORM`, `AOT_ROPE_FORM`) are tried side by side. Then times chains of dependent
calls of each kernel against chains of the ops it replaces (submission and total, as
scripts/decode-kernel-cost.py). Needs a CUDA MLX on PYTHONPATH; prints a table and
writes JSON.

    python3 scripts/fused-kernel-probe.py [--seeds 24] [--n 200] [--reps 5] [--json FILE]
"""

import argparse
import json
import math
import os
import traceback

import mlx.core as mx
from mlx_timing import chain, timed

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "kernels")
EPS = 1e-6
BF = mx.bfloat16


def read(name):
    with open(os.path.join(KERNELS, name)) as f:
        return f.read()


HEADER = read("fused.cuh")
_cache = {}


def kernel(body, name, inputs, outputs, defines):
    key = (body, name, tuple(inputs), tuple(outputs), tuple(sorted(defines.items())))
    if key not in _cache:
        header = "".join(f"#define {k} {v}\n" for k, v in sorted(defines.items())) + HEADER
        _cache[key] = mx.fast.cuda_kernel(
            name=name, input_names=inputs, output_names=outputs, source=read(body), header=header
        )
    return _cache[key]


def eps_bits():
    import struct

    return struct.unpack("<i", struct.pack("<f", EPS))[0]


def f32_bits(v):
    import struct

    return struct.unpack("<i", struct.pack("<f", v))[0]


def norm_plan(axis):
    """MLX 0.32.2's rms_norm_small dispatch for 16-bit types: (BLOCK, CHUNKS)."""
    n_reads = 8
    nvec = (axis + n_reads - 1) // n_reads
    if axis <= n_reads * 64:
        return 64, 1
    if nvec % 128 == 0 and nvec // 128 <= 8:
        return 128, nvec // 128
    if nvec % 64 == 0 and nvec // 64 <= 8:
        return 64, nvec // 64
    return 128, min((nvec + 127) // 128, 8)


def same(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return mx.array_equal(a.view(mx.uint16), b.view(mx.uint16)).item()


def rnd(shape, seed, scale=1.0):
    return (mx.random.normal(shape, key=mx.random.key(seed)) * scale).astype(BF)


# --- the fused kernels, as the runtime calls them -----------------------------------------


def fused_norm(x, w, sq_form):
    rows, axis = x.size // x.shape[-1], x.shape[-1]
    block, chunks = norm_plan(axis)
    stride = 1 if w.size == axis else 0
    k = kernel("norm.cu", f"aot_norm_sq{sq_form}", ["x", "w"], ["out"], {"AOT_SQ_FORM": sq_form})
    return k(
        inputs=[x, w],
        template=[("T", BF), ("BLOCK", block), ("CHUNKS", chunks), ("AXIS", axis),
                  ("W_STRIDE", stride), ("EPS", eps_bits())],
        grid=(rows * block, 1, 1), threadgroup=(block, 1, 1),
        output_shapes=[x.shape], output_dtypes=[BF],
    )[0]


def fused_residual(h, d, wd, s, wn, sq_form):
    rows, axis = h.size // h.shape[-1], h.shape[-1]
    block, chunks = norm_plan(axis)
    names, inputs = ["h", "d", "wd"], [h, d, wd]
    if s is not None:
        names.append("s"); inputs.append(s)
    if wn is not None:
        names.append("wn"); inputs.append(wn)
    outs = ["h_out"] + (["x_out"] if wn is not None else [])
    k = kernel("residual.cu", f"aot_residual_s{int(s is not None)}_n{int(wn is not None)}_sq{sq_form}",
               names, outs, {"AOT_SCALE": int(s is not None), "AOT_NEXT": int(wn is not None),
                             "AOT_SQ_FORM": sq_form})
    return k(
        inputs=inputs,
        template=[("T", BF), ("BLOCK", block), ("CHUNKS", chunks), ("AXIS", axis), ("EPS", eps_bits())],
        grid=(rows * block, 1, 1), threadgroup=(block, 1, 1),
        output_shapes=[h.shape] * len(outs), output_dtypes=[BF] * len(outs),
    )


GELU_C = None


def fused_geglu(g, u, fma=False):
    """fma: the rounding of the compiled gelu_approx alone (then times u), else of the
    compiled geglu."""
    global GELU_C
    if GELU_C is None:
        GELU_C = mx.array([3.0, 0.044715, math.sqrt(2 / math.pi), 0.5, 1.0], dtype=mx.float32).astype(BF)
    k = kernel("geglu.cu", f"aot_geglu_fma{int(fma)}", ["g", "u", "c"], ["out"], {"AOT_GELU_FMA": int(fma)})
    return k(
        inputs=[g, u, GELU_C], template=[("T", BF), ("SIZE", g.size)],
        grid=(g.size, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[g.shape], output_dtypes=[BF],
    )[0]


def fused_qkv(qkv, wq, wk, offset, hq, hkv, d, rope, sq_form, rope_form, k_eq_v=False):
    """rope: ("default", theta) or ("freqs", freqs array)."""
    tokens = qkv.shape[0] * qkv.shape[1]
    kv = wk is not None
    block, chunks = norm_plan(d)
    freqs = rope[0] == "freqs"
    names = ["qkv", "wq"] + (["wk", "ones"] if kv else []) + ["offset"] + (["freqs"] if freqs else [])
    ones = mx.ones((1,), BF)
    inputs = [qkv, wq] + ([wk, ones] if kv else []) + [mx.array(offset, dtype=mx.int32)]
    if freqs:
        inputs.append(rope[1])
    outs = ["q"] + (["k", "v"] if kv else [])
    base = 0 if freqs else f32_bits(float(mx.log2(mx.array(rope[1], dtype=mx.float32)).item()))
    k = kernel("qkv.cu", f"aot_qkv_kv{int(kv)}_f{int(freqs)}_sq{sq_form}_r{rope_form}", names, outs,
               {"AOT_KV": int(kv), "AOT_FREQS": int(freqs), "AOT_SQ_FORM": sq_form,
                "AOT_ROPE_FORM": rope_form})
    heads = hq + (2 * hkv if kv else 0)
    shapes = [(qkv.shape[0], hq, 1, d)] + ([(qkv.shape[0], hkv, 1, d)] * 2 if kv else [])
    return k(
        inputs=inputs,
        template=[("T", BF), ("HQ", hq), ("HKV", hkv), ("D", d), ("BLOCK", block), ("CHUNKS", chunks),
                  ("EPS", eps_bits()), ("BASE", base), ("K_EQ_V", k_eq_v)],
        grid=(tokens * heads * block, 1, 1), threadgroup=(block, 1, 1),
        output_shapes=shapes, output_dtypes=[BF] * len(outs),
    )


# --- the references: MLX ops as the runtime's unfused path runs them ----------------------


def gelu_mul(g, u):
    return 0.5 * g * (1 + mx.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * mx.power(g, 3)))) * u


GELU_COMPILED = mx.compile(gelu_mul, shapeless=True)


def gelu(g):
    return 0.5 * g * (1 + mx.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * mx.power(g, 3))))


# The reference's per-layer-input branch: the compiled gelu_approx, then a multiply.
GELU_ALONE_COMPILED = mx.compile(gelu, shapeless=True)


def ref_qkv(qkv, wq, wk, offset, hq, hkv, d, rope, k_eq_v=False):
    b = qkv.shape[0]

    def heads(x, n):
        return x.reshape(b, 1, n, d)

    def first(x, n):
        return x.reshape(b, n, 1, d)

    def rot(x):
        if rope[0] == "freqs":
            return mx.fast.rope(x, d, traditional=False, base=None, scale=1.0, offset=offset, freqs=rope[1])
        return mx.fast.rope(x, d, traditional=False, base=rope[1], scale=1.0, offset=offset)

    q = rot(first(mx.fast.rms_norm(heads(qkv[..., : hq * d], hq), wq, EPS), hq))
    if wk is None:
        return [q]
    k_raw = heads(qkv[..., hq * d : (hq + hkv) * d], hkv)
    v_raw = k_raw if k_eq_v else heads(qkv[..., (hq + hkv) * d : (hq + 2 * hkv) * d], hkv)
    k = rot(first(mx.fast.rms_norm(k_raw, wk, EPS), hkv))
    v = first(mx.fast.rms_norm(v_raw, None, EPS), hkv)
    return [q, k, v]


def proportional_freqs(theta, d, partial):
    rotated = int(d * partial)
    exponents = mx.arange(0, rotated, 2, dtype=mx.float32) / mx.array(float(d), dtype=mx.float32)
    periods = mx.power(mx.array(theta, dtype=mx.float32), exponents)
    return mx.concatenate([periods, mx.full(((d - rotated) // 2,), float("inf"), dtype=mx.float32)])


# --- checks -------------------------------------------------------------------------------


def check(results, name, fn, seeds):
    """fn(seed) -> (fused outputs, reference outputs); counts seeds whose every output
    matches byte for byte."""
    ok = 0
    first_bad = None
    try:
        for seed in range(seeds):
            got, want = fn(seed)
            mx.eval(got, want)
            if all(same(a, b) for a, b in zip(got, want)):
                ok += 1
            elif first_bad is None:
                diffs = []
                for a, b in zip(got, want):
                    n = (a.view(mx.uint16) != b.view(mx.uint16)).sum().item()
                    diffs.append(f"{n}/{a.size}")
                first_bad = f"seed {seed}: differing {diffs}"
        line = f"{name}: {ok}/{seeds} equal" + (f" ({first_bad})" if first_bad else "")
    except Exception as e:  # noqa: BLE001 - a probe reports and goes on
        line = f"{name}: ERROR {e!r}"
        traceback.print_exc()
    print(line, flush=True)
    results[name] = line


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=24)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    print("device", mx.default_device(), "mlx", mx.__version__, flush=True)
    res = {}
    S = a.seeds
    scales = [0.05, 1.0, 20.0]

    # RMS norms at Gemma 4's axes and rows, with and without weight, three sum forms.
    for sq in (0, 1, 2):
        for rows, axis, weighted in [(1, 2560, True), (2, 2560, True), (1, 2816, True), (8, 256, True),
                                     (2, 256, False), (16, 256, True), (2, 512, True), (8, 512, False),
                                     (1, 5376, True)]:
            def fn(seed, rows=rows, axis=axis, weighted=weighted, sq=sq):
                x = rnd((rows, axis), seed, scales[seed % 3])
                w = rnd((axis,), 1000 + seed) if weighted else mx.ones((1,), BF)
                want = mx.fast.rms_norm(x, w if weighted else None, EPS)
                return [fused_norm(x, w, sq)], [want]
            check(res, f"norm sq{sq} rows {rows} axis {axis}{'' if weighted else ' weightless'}", fn, S)

    sq = 1  # overwritten below by whichever form matched everywhere, if one did
    forms = [f for f in (0, 1, 2) if all("equal" in v and v.split(": ")[1].startswith(f"{S}/{S}")
                                           for k, v in res.items() if k.startswith(f"norm sq{f} "))]
    print("sum-of-squares forms that match every norm:", forms, flush=True)
    if forms:
        sq = forms[0]

    # Residual adds with the norms around them.
    for rows, axis in [(1, 2560), (2, 2560), (1, 2816)]:
        for scaled in (False, True):
            for nxt in (False, True):
                def fn(seed, rows=rows, axis=axis, scaled=scaled, nxt=nxt):
                    h = rnd((rows, 1, axis), seed, 3.0)
                    dd = rnd((rows, 1, axis), 100 + seed, scales[seed % 3])
                    wd, wn = rnd((axis,), 200 + seed), rnd((axis,), 300 + seed)
                    s = rnd((1,), 400 + seed)
                    want_h = h + mx.fast.rms_norm(dd, wd, EPS)
                    if scaled:
                        want_h = want_h * s
                    want = [want_h] + ([mx.fast.rms_norm(want_h, wn, EPS)] if nxt else [])
                    got = fused_residual(h, dd, wd, s if scaled else None, wn if nxt else None, sq)
                    return got, want
                check(res, f"residual rows {rows} axis {axis} scale {scaled} next {nxt}", fn, S)

    # GeGLU against the reference's compiled function and the ops one by one.
    for size in (10240, 256, 2112, 20480):
        def fn(seed, size=size):
            g, u = rnd((1, 1, size), seed, scales[seed % 3] * 2), rnd((1, 1, size), 50 + seed)
            return [fused_geglu(g, u), fused_geglu(g, u)], [GELU_COMPILED(g, u), gelu_mul(g, u)]
        check(res, f"geglu {size} (vs compiled, vs eager)", fn, S)

        def fn_alone(seed, size=size):
            g, u = rnd((1, 1, size), seed, scales[seed % 3] * 2), rnd((1, 1, size), 50 + seed)
            return [fused_geglu(g, u, fma=True)], [GELU_ALONE_COMPILED(g) * u]
        check(res, f"gelu then multiply {size} (vs compiled gelu_approx, then * u)", fn_alone, S)

    # Attention inputs: norms then RoPE, e4b sliding (default rope) and full (proportional),
    # 26b's K=V full layers, sharers (q only); every rope form.
    offsets = [0, 1, 7, 511, 600, 4097, 100000]
    for rf in (0, 1, 2, 3):
        for label, hq, hkv, d, rope, kv, keqv in [
            ("e4b sliding", 8, 2, 256, ("default", 10000.0), True, False),
            ("e4b full", 8, 2, 512, ("freqs", proportional_freqs(1e6, 512, 0.25)), True, False),
            ("e4b sharer", 8, 2, 256, ("default", 10000.0), False, False),
            ("26b full k=v", 16, 2, 512, ("freqs", proportional_freqs(1e6, 512, 0.25)), True, True),
            ("26b sliding", 16, 8, 256, ("default", 10000.0), True, False),
        ]:
            for batch in (1, 2):
                def fn(seed, hq=hq, hkv=hkv, d=d, rope=rope, kv=kv, keqv=keqv, batch=batch, rf=rf):
                    width = (hq + ((1 if keqv else 2) * hkv if kv else 0)) * d
                    qkv = rnd((batch, 1, width), seed, scales[seed % 3])
                    wq = rnd((d,), 500 + seed)
                    wk = rnd((d,), 600 + seed) if kv else None
                    off = offsets[seed % len(offsets)]
                    got = fused_qkv(qkv, wq, wk, off, hq, hkv, d, rope, sq, rf, keqv)
                    return got, ref_qkv(qkv, wq, wk, off, hq, hkv, d, rope, keqv)
                check(res, f"qkv rope{rf} {label} batch {batch}", fn, S)

    # Cost: chains of n dependent calls.
    n, reps = a.n, a.reps
    timing = {}

    H = 2560
    x0 = rnd((1, 1, H), 1)
    w1, w2, s1 = rnd((H,), 2), rnd((H,), 3), rnd((1,), 4)
    f0 = rnd((1, 1, 10240), 5)
    qkv0 = rnd((1, 1, 12 * 256), 6)
    wq, wk = rnd((256,), 7), rnd((256,), 8)
    mx.eval(x0, w1, w2, s1, f0, qkv0, wq, wk)
    def rejoin(parts):
        return mx.concatenate([t.reshape(1, 1, -1) for t in parts], -1)

    cases = {
        "builtin add": chain(lambda y: y + x0, x0, n),
        "builtin rms_norm": chain(lambda y: mx.fast.rms_norm(y, w1, EPS), x0, n),
        "builtin h + norm(d), norm (3 ops)": chain(lambda y: mx.fast.rms_norm(y + mx.fast.rms_norm(x0, w1, EPS), w2, EPS), x0, n),
        "fused residual+next norm (1 kernel)": chain(lambda y: fused_residual(y, x0, w1, None, w2, sq)[1], x0, n),
        "builtin (h + norm(d)) * s, norm (4 ops)": chain(lambda y: mx.fast.rms_norm((y + mx.fast.rms_norm(x0, w1, EPS)) * s1, w2, EPS), x0, n),
        "fused scaled residual+next norm": chain(lambda y: fused_residual(y, x0, w1, s1, w2, sq)[1], x0, n),
        "compiled geglu (2 kernels)": chain(lambda y: GELU_COMPILED(y, f0), f0, n),
        "fused geglu": chain(lambda y: fused_geglu(y, f0), f0, n),
        "builtin qkv norms + ropes (5 ops) + concat": chain(lambda y: rejoin(ref_qkv(y, wq, wk, 600, 8, 2, 256, ("default", 10000.0))), qkv0, n),
        "fused qkv + concat": chain(lambda y: rejoin(fused_qkv(y, wq, wk, 600, 8, 2, 256, ("default", 10000.0), sq, 0)), qkv0, n),
    }
    print(f"\n{'chain of ' + str(n):<44} {'submit us':>10} {'total us':>10}")
    for name, build in cases.items():
        try:
            sub, tot = timed(build, reps)
            timing[name] = {"submit_us": sub / n * 1e6, "total_us": tot / n * 1e6}
            print(f"{name:<44} {sub / n * 1e6:>10.2f} {tot / n * 1e6:>10.2f}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: ERROR {e!r}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"checks": res, "sq_forms": forms, "timing": timing, "n": n, "reps": reps}, f, indent=1)


if __name__ == "__main__":
    main()
