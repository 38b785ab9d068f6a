"""Where a gemma4-e4b decode step's time goes, kernel kind by kernel kind.

For each kind of kernel a single-token e4b step runs (at its real shapes: hidden 2560,
MLP 10240, 8 query and 2 KV heads of 256, 4-bit group-64 weights, 512 cached rows), builds
a chain of dependent ops of that kind only, evaluates it (median of several), and takes
the time per op: what that kernel costs when the device runs a stream of them, host
submission included. Multiplied by how many of each kind one generated step runs (the
bench's ops_by_primitive), the sum says how much of a step the kernels alone explain.
Also times each chain's submission (`async_eval` returning) apart, to tell whether the
host or the device is the slower side for that kind. Needs only mlx.

    python3 scripts/decode-kernel-cost.py [--n 200] [--reps 5] [--json FILE]
"""

import argparse
import json

import mlx.core as mx
from mlx_timing import chain as timing_chain
from mlx_timing import timed

H, F, D, HQ, HKV, T, P, VOCAB = 2560, 10240, 256, 8, 2, 512, 256, 262144


def qweight(rows, cols):
    w = (mx.random.normal((rows, cols)) * 0.02).astype(mx.bfloat16)
    return mx.quantize(w, group_size=64, bits=4)


def qmm(x, wq):
    return mx.quantized_matmul(x, *wq, transpose=True, group_size=64, bits=4)


def gelu_mul(g, u):
    return 0.5 * g * (1 + mx.tanh(0.7978845608028654 * (g + 0.044715 * mx.power(g, 3)))) * u


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    n = a.n
    bf = mx.bfloat16
    mx.random.seed(0)
    x = mx.random.normal((1, 1, H)).astype(bf)
    xf = mx.random.normal((1, 1, F)).astype(bf)
    heads = mx.random.normal((1, HQ, 1, D)).astype(bf)
    w_h, w_d = mx.ones((H,), bf), mx.ones((D,), bf)
    w_in, w_o = qweight(3072, H), qweight(H, 3072)
    w_g, w_down = qweight(F, H), qweight(H, F)
    w_pg, w_pp = qweight(P, H), qweight(H, P)
    w_head = qweight(VOCAB, H)
    k = mx.random.normal((1, HKV, 1, T, D)).astype(bf)
    v = mx.random.normal((1, HKV, 1, T, D)).astype(bf)
    cache = mx.zeros((1, HKV, 2 * T, D), bf)
    row = mx.random.normal((1, HKV, 1, D)).astype(bf)
    compiled_gelu = mx.compile(gelu_mul, shapeless=True)
    up = mx.random.normal((1, 1, F)).astype(bf)
    mx.eval(x, xf, heads, w_h, w_d, *w_in, *w_o, *w_g, *w_down, *w_pg, *w_pp, *w_head, k, v, cache, row, up)
    q5 = heads.reshape(1, HKV, HQ // HKV, 1, D)

    def chain(f, start, count=n):
        return timing_chain(f, start, count)

    def attend(q):
        s = q @ k.swapaxes(-1, -2)
        return mx.softmax(s, axis=-1, precise=True) @ v

    # name: (graph builder, kernels per link, kernels of this kind in one generated step)
    cases = {
        "rms_norm [2560]": (chain(lambda y: mx.fast.rms_norm(y, w_h, 1e-6), x), 1, 212),
        "rms_norm heads [8x256]": (chain(lambda y: mx.fast.rms_norm(y, w_d, 1e-6), heads), 1, 90),
        "rope heads [8x256]": (chain(lambda y: mx.fast.rope(y, D, traditional=False, base=10000.0, scale=1.0, offset=T), heads), 1, 66),
        "add [2560] (adds, multiplies, residual tails)": (chain(lambda y: y + x, x), 1, 168),
        "compiled gelu*up [10240]": (chain(lambda y: compiled_gelu(y, up), xf), 1, 4 * 42),
        "slice_update row into cache": (chain(lambda c: mx.slice_update(c, row, mx.array([0, 0, T, 0]), (0, 1, 2, 3)), cache), 1, 48),
        "attention q.kT, softmax, .v [2 kv x 4 q, 512 rows]": (chain(attend, q5), 3, 126),
        # The step's in-projections are 2560->2048..6144 and out-projections 2048/4096->2560.
        "qmm 2560->3072 and 3072->2560 (attention in, out)": (
            chain(lambda y: qmm(qmm(y, w_in), w_o), x), 2, 84),
        # The step fuses gate and up into one 2560->20480 kernel: this pair undercounts it.
        "qmm 2560->10240 and 10240->2560 (MLP)": (
            chain(lambda y: qmm(qmm(y, w_g), w_down), x), 2, 84),
        "qmm 2560->256 and 256->2560 (per-layer input)": (
            chain(lambda y: qmm(qmm(y, w_pg), w_pp), x), 2, 84),
    }
    results = {"n": n, "device": str(mx.default_device()), "mlx": mx.__version__, "kinds": {}}
    print(f"mlx {mx.__version__} on {mx.default_device()}, chains of {n} links")
    print(f"{'kernel kind':<52} {'submit us':>10} {'total us':>9} {'per step':>9} {'step ms':>8}")
    step_ms = 0.0
    for name, (build, per_link, count) in cases.items():
        s, t = timed(build, a.reps)
        s_op, t_op = s / (n * per_link) * 1e6, t / (n * per_link) * 1e6
        ms = t_op * count / 1e3
        step_ms += ms
        print(f"{name:<52} {s_op:>10.2f} {t_op:>9.2f} {count:>9} {ms:>8.2f}", flush=True)
        results["kinds"][name] = {"submit_us_per_kernel": s_op, "total_us_per_kernel": t_op, "kernels_per_step": count, "ms_per_step": ms}
    s, t = timed(lambda: [qmm(x, w_head) for _ in range(20)], a.reps)
    head_ms = t / 20 * 1e3
    step_ms += head_ms
    print(f"{'lm head qmm 2560->262144 (independent)':<52} {s / 20 * 1e6:>10.2f} {t / 20 * 1e6:>9.2f} {1:>9} {head_ms:>8.2f}")
    results["kinds"]["lm head"] = {"total_us_per_kernel": t / 20 * 1e6, "ms_per_step": head_ms}
    results["step_ms_explained"] = step_ms
    print(f"sum over a step: {step_ms:.2f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
