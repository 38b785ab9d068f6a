"""ncu probe of qmv.cu (wide) and qmv_vec.cu (vec) at the e4b's LM head, gate/up and down."""
import importlib.util, sys, os
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
import mlx.core as mx
spec = importlib.util.spec_from_file_location("fkc", "scripts/fast-kernel-check.py")
f = importlib.util.module_from_spec(spec); sys.argv = ["x"]; spec.loader.exec_module(f)
for (k, n, mode) in [(2560, 262144, "plain"), (2560, 20480, "geglu"), (10240, 2560, "plain")]:
    w = f.quantized(7, n, k, 4, 64)
    x = mx.random.normal((1, 1, k)).astype(mx.bfloat16)
    mx.eval(x)
    for body in ("wide", "vec"):
        for _ in range(2):
            mx.eval(f.qmv(x, *w, 4, 64, mode, None, body))
print("done")
