"""Compile the `fast` profile's CUDA kernels (runtime/kernels: qmv.cu, decode_attention.cu
over float and quantized caches, decode_attention_merge.cu) on a machine without a GPU,
before a lease spends device time on a compile error.

NVRTC compiles to PTX with no device present. The script wraps each body the way MLX
0.32.2's `fast::cuda_kernel` does (template parameters as `constexpr`/`using` lines, one
`const T*` per input, an input's `_shape`/`_strides` only where the body names them), at
the template parameters the runtime uses, and compiles it for sm_90. It does not run
anything: correctness and speed stay with scripts/fast-kernel-check.py on the GPU host.
The kernels that use MLX's device headers (kernels/fused.cuh) are not covered: the wheel
does not ship those headers.

NVRTC and the CUDA headers come from NVIDIA's wheels, ~65 MB:

    python3 -m pip install --target /tmp/cuda-nvrtc nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl
    python3 scripts/nvrtc-check.py --cuda /tmp/cuda-nvrtc/nvidia/cu13 [--arch sm_90] [--only qmv]

Prints one line per instantiation and exits 1 on the first that fails, with NVRTC's log.
"""

import argparse
import ctypes
import glob
import itertools
import os
import re
import sys

from kernel_text import compact

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "kernels")
CUDA_TYPES = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float"}


def program(name, body, inputs, outputs, consts, defines):
    """The translation unit MLX would compile: `inputs` and `outputs` are (name, C type)."""
    params = []
    for arg, ty in inputs:
        params.append(f"const {ty}* {arg}")
        for suffix, kind in (("shape", "Shape"), ("strides", "Strides"), ("ndim", "int")):
            if re.search(rf"\b{arg}_{suffix}\b", body):
                params.append(f"const __grid_constant__ {kind} {arg}_{suffix}")
    params += [f"{ty}* {arg}" for arg, ty in outputs]
    lines = [f"#define {k} {v}" for k, v in defines.items()]
    lines += ["#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
              "typedef unsigned int uint32_t; typedef int int32_t; typedef long long int64_t;",
              "namespace mlx::core::cu {",
              "template <typename V> struct Dims { V v[10]; __device__ V operator[](int i) const { return v[i]; } };",
              "using Shape = Dims<int32_t>; using Strides = Dims<int64_t>;"]
    for k, v in consts.items():
        lines.append(f"using {k} = {v};" if isinstance(v, str) else f"constexpr int {k} = {v};")
    lines.append(f"__global__ void {name}({', '.join(params)}) {{")
    lines.append(body)
    lines.append("}\n}")
    return "\n".join(lines)


class Nvrtc:
    def __init__(self, cuda):
        libs = sorted(glob.glob(os.path.join(cuda, "lib", "libnvrtc.so*")))
        libs = [p for p in libs if "builtins" not in p]
        if not libs:
            sys.exit(f"no libnvrtc.so under {cuda}/lib (see this script's docstring)")
        self.lib = ctypes.CDLL(libs[0])
        self.include = os.path.join(cuda, "include")
        if not os.path.exists(os.path.join(self.include, "cuda_bf16.h")):
            sys.exit(f"no cuda_bf16.h under {self.include} (install nvidia-cuda-runtime)")

    def compile(self, source, arch):
        lib = self.lib
        prog = ctypes.c_void_p()
        if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", 0, None, None):
            return False, "nvrtcCreateProgram failed", ""
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"-default-device",
                f"-I{self.include}".encode()]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        ptx = ""
        if rc == 0:
            lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(prog, buf)
            ptx = buf.value.decode()
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return rc == 0, log.value.decode(errors="replace"), ptx


def qmv_cases():
    """runtime/src/kernels/fast.rs, quantized_matvec: every mode, bit width and group at
    the e4b's widths, 1 and 8 rows, and every rows-per-warp, in bf16 and f16."""
    body = compact(open(os.path.join(KERNELS, "qmv.cu")).read())
    for t, bits, group, mode in itertools.product(("bf16", "f16"), (4, 8), (32, 64, 128), (0, 1, 2, 3)):
        for k, m, r, split in ((2560, 1, 2, 1), (10240, 8, 4, 1), (256, 3, 1, 1), (10240, 1, 2, 4),
                               (10240, 8, 4, 8), (4096, 3, 1, 2)):
            if k % group:
                continue
            inputs = [("x", CUDA_TYPES[t]), ("w", "uint32_t"), ("scales", CUDA_TYPES[t]),
                      ("biases", CUDA_TYPES[t])] + ([("g", CUDA_TYPES[t])] if mode == 2 else [])
            consts = dict(T=CUDA_TYPES[t], BITS=bits, GROUP=group, K=k, M=m, R=r, SPLIT=split)
            yield (f"qmv mode {mode} {t} {bits}-bit g{group} K {k} M {m} R {r} SPLIT {split}", "mlx_aot_qmv", body,
                   inputs, [("out", "T")], consts, {"AOT_QMV_MODE": mode})


def attention_cases():
    """runtime/src/kernels/fast.rs, decode_attention (float K/V: head dims 256 and 512) and
    decode_attention_quantized (4- and 8-bit triples, every group: head dims 64 to 512)."""
    split = compact(open(os.path.join(KERNELS, "decode_attention.cu")).read())
    merge = compact(open(os.path.join(KERNELS, "decode_attention_merge.cu")).read())
    for t, d in itertools.product(("bf16", "f16"), (64, 128, 256, 512)):
        ty = CUDA_TYPES[t]
        consts = dict(T=ty, D=d, HEADS=8, KV_HEADS=2, WARPS=4, SCALE_BITS=0x3d800000)
        if d >= 256:
            yield (f"decode attention {t} D {d}", "mlx_aot_decode_attention", split,
                   [("q", ty), ("k", ty), ("v", ty)], [("part", "float")], consts, {})
        for bits, group in itertools.product((4, 8), (32, 64, 128)):
            triple = [("k", "uint32_t"), ("k_scales", ty), ("k_biases", ty),
                      ("v", "uint32_t"), ("v_scales", ty), ("v_biases", ty)]
            yield (f"decode attention {t} D {d} {bits}-bit g{group}", "mlx_aot_decode_attention_quant",
                   split, [("q", ty)] + triple, [("part", "float")],
                   dict(consts, BITS=bits, QGROUP=group), {"AOT_KV_QUANT": 1})
        yield (f"decode attention merge {t} D {d}", "mlx_aot_decode_attention_merge", merge,
               [("part", "float")], [("out", ty)], dict(T=ty, D=d), {})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda", required=True, help="a folder with lib/libnvrtc.so* and include/")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--only", choices=["all", "qmv", "attention"], default="all")
    args = ap.parse_args()
    nvrtc = Nvrtc(args.cuda)
    cases = []
    if args.only in ("all", "qmv"):
        cases += list(qmv_cases())
    if args.only in ("all", "attention"):
        cases += list(attention_cases())
    for label, name, body, inputs, outputs, consts, defines in cases:
        ok, log, ptx = nvrtc.compile(program(name, body, inputs, outputs, consts, defines), args.arch)
        if not ok:
            print(f"FAILED {label}\n{log}")
            sys.exit(1)
        warn = " (warnings: " + " ".join(log.split())[:200] + ")" if log.strip() else ""
        print(f"ok {label}: {len(ptx.splitlines())} PTX lines{warn}", flush=True)
    print(f"{len(cases)} instantiation(s) compiled for {args.arch}")


if __name__ == "__main__":
    main()
