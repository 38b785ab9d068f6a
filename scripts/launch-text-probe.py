"""How much of a custom kernel's host cost per call is its text?

MLX 0.32.2's `fast.cuda_kernel` assembles the kernel's whole source at every call and
hashes all of it at every evaluation (`custom_kernel.cpp`); its CUDA encoder's methods
are not exported from libmlx.so, so a primitive of our own cannot launch kernels, and
the text is the one part of the cost a caller controls. This times chains of dependent
calls of one quantized matrix-vector product (4-bit, group 64, 2,560 x 2,560, one row:
launch-bound) built from the same program given to MLX as different text:

- full: the compacted source, as the Rust runtime passes it today;
- include: a one-line body that `#include`s the same compacted source from a file;
- padded: the full text plus 32 KiB of comment (how the cost grows with the text);
- trivial: a one-line kernel (the floor of the custom-kernel path);
- MLX's own `quantized_matmul` on the same weights.

The include variant's output is compared byte for byte with the full one's. Needs a CUDA
MLX on PYTHONPATH.

    python3 scripts/launch-text-probe.py [--n 400] [--reps 7] [--json FILE]
"""

import argparse
import json
import os
import re
import tempfile
import time

import mlx.core as mx
from kernel_text import compact
from mlx_timing import timed

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "kernels")
WARPS = 8  # runtime/src/kernels/fast.rs, QMV_WARPS


def kernel(name, source, header="#define AOT_QMV_MODE 0\n"):
    return mx.fast.cuda_kernel(
        name=name,
        input_names=["x", "w", "scales", "biases"],
        output_names=["out"],
        source=source,
        header=header,
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--json")
    a = p.parse_args()

    with open(os.path.join(KERNELS, "qmv.cu")) as f:
        body = compact(f.read())
    folder = tempfile.mkdtemp(prefix="mlx-aot-kernels-")
    path = os.path.join(folder, "qmv.cu")
    with open(path, "w") as f:
        f.write(body)
    reads = " ".join(dict.fromkeys(re.findall(r"\b\w+?_(?:shape|strides|ndim)\b", body)))
    include_text = f'#include "{path}"\n// reads {reads}\n'
    variants = {
        "full": kernel("probe_qmv_full", body),
        # MLX passes an input's shape/strides only when the text names them
        # (benchmarks/h100-2026-12-06/include-text.patch does the same).
        "include": kernel("probe_qmv_include", include_text),
        "padded": kernel("probe_qmv_padded", body + ("// " + "x" * 125 + "\n") * 256),
    }
    trivial = mx.fast.cuda_kernel(
        name="probe_trivial",
        input_names=["x"],
        output_names=["out"],
        source="int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) out[i] = x[i];",
    )

    k = n = 2560
    mx.random.seed(0)
    wq = mx.quantize((mx.random.normal((n, k)) * 0.02).astype(mx.bfloat16), group_size=64, bits=4)
    x0 = mx.random.normal((1, 1, k)).astype(mx.bfloat16)
    mx.eval(x0, *wq)
    r = 2  # qmv_rows_per_warp(2560)
    block = WARPS * 32

    def ours(v):
        def step(y):
            return variants[v](
                inputs=[y, *wq],
                template=[("T", mx.bfloat16), ("BITS", 4), ("GROUP", 64), ("K", k), ("M", 1), ("R", r)],
                grid=(((n + r - 1) // r + WARPS - 1) // WARPS * block, 1, 1),
                threadgroup=(block, 1, 1),
                output_shapes=[(1, 1, n)],
                output_dtypes=[mx.bfloat16],
            )[0]
        return step

    def trivial_step(y):
        return trivial(inputs=[y], template=[("N", k)], grid=(k, 1, 1), threadgroup=(256, 1, 1),
                       output_shapes=[y.shape], output_dtypes=[y.dtype])[0]

    def mlx_step(y):
        return mx.quantized_matmul(y, *wq, transpose=True, group_size=64, bits=4)

    # Same program, same bytes: the include variant must reproduce the full one.
    a_out, b_out = ours("full")(x0), ours("include")(x0)
    mx.eval(a_out, b_out)
    same = bytes(memoryview(a_out.astype(mx.float32))) == bytes(memoryview(b_out.astype(mx.float32)))

    cases = [("full text (today)", ours("full"), len(body)),
             ("#include of the same file", ours("include"), len(include_text)),
             ("full text + 32 KiB comment", ours("padded"), len(body) + 32 * 1024),
             ("trivial one-line kernel", trivial_step, 80),
             ("MLX quantized_matmul", mlx_step, 0)]
    results = {"n": a.n, "mlx": mx.__version__, "device": str(mx.default_device()),
               "include_output_bytes_equal": same, "cases": []}
    print(f"mlx {mx.__version__} on {mx.default_device()}, chains of {a.n} calls; "
          f"include output bytes equal to full: {same}")
    print("| kernel text | text bytes | build us/call | submit us/call | total us/call |")
    print("|---|---:|---:|---:|---:|")
    for label, step, text in cases:
        def build():
            y = x0
            for _ in range(a.n):
                y = step(y)
            return y
        build()  # compile and warm
        mx.eval(build())
        t0 = time.perf_counter()
        for _ in range(a.reps):
            build()
        b_us = (time.perf_counter() - t0) / a.reps / a.n * 1e6
        s, t = timed(build, a.reps)
        row = dict(case=label, text_bytes=text, build_us=b_us, submit_us=s / a.n * 1e6,
                   total_us=t / a.n * 1e6)
        results["cases"].append(row)
        print(f"| {label} | {text:,} | {row['build_us']:.2f} | {row['submit_us']:.2f} | "
              f"{row['total_us']:.2f} |", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
