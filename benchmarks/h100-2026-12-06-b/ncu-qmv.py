"""ncu probe of the two quantized matvec bodies (needs qmv-packed.patch applied; copy it into scripts/, beside fast-kernel-check.py, and run it there):
    MLX_USE_CUDA_GRAPHS=0 ncu -k regex:mlx_aot_qmv --section MemoryWorkloadAnalysis --section WarpStateStats python3 ncu-qmv.py
Written for the 2026-12-06 (b) lease; not run (the lease ended first)."""
import importlib.util, sys, os
import mlx.core as mx
spec = importlib.util.spec_from_file_location("fkc", os.path.join(os.path.dirname(__file__), "fast-kernel-check.py"))
f = importlib.util.module_from_spec(spec); sys.argv = ["x"]; spec.loader.exec_module(f)
for (k, n, mode) in [(2560, 262144, "plain"), (2560, 20480, "geglu"), (10240, 2560, "plain")]:
    w = f.quantized(7, n, k, 4, 64)
    x = mx.random.normal((1, 1, k)).astype(mx.bfloat16)
    mx.eval(x)
    for body in ("wide", "packed"):
        for _ in range(2):
            mx.eval(f.qmv(x, *w, 4, 64, mode, None, body))
    mx.eval(f.mlx_qmv(x, *w, 4, 64, mode, None))
print("done")
