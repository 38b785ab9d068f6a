"""What one MLX primitive costs the host on this device, by kind.

Builds chains of N dependent ops of one kind on decode-sized arrays (one token), evaluates
each chain (median of several), and prints the time per op: how much of a single-token
step's evaluation is the per-primitive cost of MLX's backend rather than the work itself.
Also times `async_eval` returning (submission) apart from the wait. Needs only mlx.

    python3 scripts/cuda-launch-cost.py [--n 1000] [--reps 7] [--json FILE]
"""

import argparse
import json

import mlx.core as mx
from mlx_timing import chain as timing_chain
from mlx_timing import timed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--json")
    a = p.parse_args()
    n = a.n
    dt = mx.bfloat16
    mx.random.seed(0)
    x = mx.random.normal((1, 1, 2560)).astype(dt)
    w = mx.ones((2560,), dt)
    wq = mx.quantize((mx.random.normal((2560, 2560)) * 0.02).astype(dt), group_size=64, bits=4)
    mx.eval(x, w, *wq)

    def chain(f, count=n):
        return timing_chain(f, x, count)

    # name: (graph builder, primitives in the graph)
    cases = {
        "add (elementwise kernel)": (chain(lambda y: y + 1), n),
        "reshape (view, no kernel)": (chain(lambda y: y.reshape(1, 2560, 1).reshape(1, 1, 2560), n // 2), n),
        "rms_norm (fast kernel)": (chain(lambda y: mx.fast.rms_norm(y, w, 1e-6)), n),
        "quantized_matmul 4-bit 2560x2560": (
            chain(lambda y: mx.quantized_matmul(y, *wq, transpose=True, group_size=64, bits=4)),
            n,
        ),
    }
    results = {"n": n, "device": str(mx.default_device()), "mlx": mx.__version__, "ops": {}}
    print(f"mlx {mx.__version__} on {mx.default_device()}, chains of {n} ops")
    print(f"{'op':<36} {'submit us/op':>13} {'total us/op':>12}")
    for name, (build, count) in cases.items():
        s, t = timed(build, a.reps, synchronize=False)
        print(f"{name:<36} {s / count * 1e6:>13.2f} {t / count * 1e6:>12.2f}", flush=True)
        results["ops"][name] = {"submit_us_per_op": s / count * 1e6, "total_us_per_op": t / count * 1e6}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
