"""ncu probe of qmv.cu with K split (qmv-split.patch applied) against SPLIT 1, at the
shapes qmv_split splits on gemma4-e4b (down, the full-attention o_proj, the per-layer
gate) and llama-3.2-1b (down). Run from the repository root:
    ncu -k regex:mlx_aot_qmv --section SpeedOfLight --section Occupancy python3 benchmarks/2026-12-07-qmv-split/ncu-split.py
Each shape runs twice per setting; read the second launch."""
import importlib.util, os, sys
import mlx.core as mx
spec = importlib.util.spec_from_file_location("fkc", os.path.join("scripts", "fast-kernel-check.py"))
f = importlib.util.module_from_spec(spec); sys.argv = ["x"]; spec.loader.exec_module(f)
routed = f.qmv_split
for (k, n, mode) in [(10240, 2560, "plain"), (4096, 2560, "plain"), (2560, 256, "gelu_times"), (8192, 2048, "plain")]:
    w = f.quantized(7, n, k, 4, 64)
    x = mx.random.normal((1, 1, k)).astype(mx.bfloat16)
    g = mx.random.normal((1, 1, n)).astype(mx.bfloat16) if mode == "gelu_times" else None
    mx.eval(x, *( [g] if g is not None else []))
    for name, rule in (("split 1", lambda o, kk, r: 1), ("routed", routed)):
        f.qmv_split = rule
        print(f"K {k} N {n} {mode}: {name} = {rule(n, k, f.rows_per_warp(n))}", flush=True)
        for _ in range(2):
            mx.eval(f.qmv(x, *w, 4, 64, mode, g))
print("done")
