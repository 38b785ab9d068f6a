#!/usr/bin/env bash
# Runs mlx-aot's GPU measurements on a CUDA host that has no Rust toolchain and no
# registry (BENCHMARKS.md says how the parts get there). Binaries are built on the CPU
# machine (cargo build --release) and carried in .gpu/bin; MLX's CUDA build comes from
# shared/scripts/mlx-cuda-pack.sh, whose first part was stashed in /root/stash.
#
#   scripts/gpu-run.sh setup                unpack MLX CUDA + Python bits into /root/prefix
#   scripts/gpu-run.sh bench PRESET [ARGS]  synth real-shape 4-bit weights, run mlx-aot bench
#   scripts/gpu-run.sh parity PRESET [ARGS] cargo xtask parity --full PRESET, on the GPU
#
# Results land in $OUT (the device tool's output folder) or ./gpu-out.
set -euo pipefail
prefix=/root/prefix
out=${OUT:-gpu-out}
mkdir -p "$out" /root/models
bin=$(pwd)/.gpu/bin
export LD_LIBRARY_PATH=$prefix/mlx/lib
export PYTHONPATH=$prefix
phase=${1:?usage: gpu-run.sh setup | bench PRESET [ARGS] | parity PRESET [ARGS]}; shift
case "$phase" in
setup)
  bash .gpu/mlx-cuda-unpack.sh "$prefix" /root/stash/mlx-cuda.part.aa .gpu/mlx-cuda.part.ab
  python3 -m zipfile -e .gpu/mlx-python.whl "$prefix"
  for w in .gpu/whl/*.whl; do python3 -m zipfile -e "$w" "$prefix"; done
  python3 -c 'import mlx.core as mx, mlx_lm; print("mlx", mx.__version__, mx.default_device())'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  ;;
bench)
  preset=${1:?preset}; shift
  dir=/root/models/$preset-q4
  if [ ! -f "$dir/model.safetensors" ]; then
    start=$SECONDS
    "$bin/mlx-aot" synth --preset "$preset" --bits 4 --out "$dir"
    echo "synth $((SECONDS - start)) s" | tee "$out/synth-$preset.txt"
  fi
  "$bin/mlx-aot" bench --model "$dir" --mlx-lm python3 --json "$out/bench-$preset.json" \
    --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), MLX 0.32.2 CUDA" "$@" \
    2>&1 | tee "$out/bench-$preset.txt"
  ;;
parity)
  preset=${1:?preset}; shift
  start=$SECONDS
  MLX_AOT_ROOT=$(pwd) "$bin/parity" --full "$preset" "$@" 2>&1 | tee "$out/parity-$preset.txt"
  echo "parity $((SECONDS - start)) s" | tee -a "$out/parity-$preset.txt"
  ;;
*)
  echo "unknown phase $phase" >&2; exit 2 ;;
esac
