#!/usr/bin/env bash
# Compiles runtime/kernels/qmv.cu with nvcc, as MLX's JIT would see the body, for the
# gemma4-e4b decode shapes in every epilogue mode, and prints ptxas's register and spill
# counts: a syntax error or a spill shows here before a lease is spent on the checks.
#
#   scripts/qmv-ptxas.sh [ARCH]     ARCH defaults to sm_90 (H100/H200)
set -euo pipefail
arch=${1:-sm_90}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
src=$(cd "$(dirname "$0")/.." && pwd)/runtime/kernels/qmv.cu
for mode in 0 1 2 3; do
  cat > "$dir/qmv$mode.cu" <<CU
#include <cstdint>
#include <cuda_bf16.h>
#define AOT_QMV_MODE $mode
template <typename T, int BITS, int GROUP, int K, int M, int R>
__global__ void qmv(const T* x, const uint32_t* w, const int* w_shape, const T* scales,
                    const T* biases, const T* g, T* out) {
#include "$src"
}
#define AT(B, G, K, M, R) template __global__ void qmv<__nv_bfloat16, B, G, K, M, R>( \\
    const __nv_bfloat16*, const uint32_t*, const int*, const __nv_bfloat16*, \\
    const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*);
AT(4, 64, 2560, 1, 1) AT(4, 64, 2560, 1, 2) AT(4, 64, 2560, 1, 4) AT(4, 64, 10240, 1, 2)
AT(8, 64, 2560, 1, 2) AT(8, 64, 10240, 1, 2) AT(4, 64, 2560, 8, 2) AT(4, 32, 288, 3, 1)
CU
  echo "== AOT_QMV_MODE $mode"
  nvcc -arch="$arch" -std=c++17 -c -o /dev/null -Xptxas -v "$dir/qmv$mode.cu" 2>&1 \
    | grep -E "error|warning|Compiling|registers|spill" | sed 's/^ptxas info *: //' || true
done
