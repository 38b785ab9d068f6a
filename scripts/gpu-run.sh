#!/usr/bin/env bash
# Runs mlx-aot's GPU measurements on a CUDA host that has no Rust toolchain and no
# registry (BENCHMARKS.md says how the parts get there). Binaries are built on the CPU
# machine (cargo build --release) and carried in .gpu/bin; MLX's CUDA build comes from
# shared/scripts/mlx-cuda-pack.sh, whose first part was stashed in /root/stash.
#
#   scripts/gpu-run.sh setup                unpack MLX CUDA + Python bits into /root/prefix
#   scripts/gpu-run.sh bench PRESET [ARGS]  synth real-shape 4-bit weights, run mlx-aot bench
#   scripts/gpu-run.sh parity PRESET [ARGS] cargo xtask parity --full PRESET, on the GPU
#   scripts/gpu-run.sh serve PRESET         mlx-aot serve, then mlx_lm.server, on the same
#                                           real-shape 4-bit weights, each load-tested
#                                           by scripts/bench-serve.py
#
# Results land in $OUT (the device tool's output folder) or ./gpu-out. For A/B runs of two
# builds in one lease: BIN=DIR takes the binaries from DIR instead of .gpu/bin; for
# bench, MLX_LM=none (or another Python) instead of python3 for mlx-lm's column, and
# TAG=NAME writes bench-NAME.{txt,json} instead of bench-PRESET.*.
set -euo pipefail
prefix=/root/prefix
out=${OUT:-gpu-out}
mkdir -p "$out" /root/models
bin=${BIN:-$(pwd)/.gpu/bin}
export LD_LIBRARY_PATH=$prefix/mlx/lib
export PYTHONPATH=$prefix
phase=${1:?usage: gpu-run.sh setup | bench PRESET [ARGS] | parity PRESET [ARGS] | serve PRESET}; shift
case "$phase" in
setup)
  bash .gpu/mlx-cuda-unpack.sh "$prefix" /root/stash/mlx-cuda.part.aa .gpu/mlx-cuda.part.ab
  python3 -m zipfile -e .gpu/mlx-python.whl "$prefix"
  # MLX's kernel JIT (NVRTC) takes the CUDA headers from PREFIX/nvidia/cu13/include when
  # that exists: the host's torch wheels have no crt/ there, so several-row quantized
  # matmuls fail to compile ("cannot open source file crt/mma.h"). Give it the system
  # toolkit's complete, consistent header set instead (the libraries stay torch's).
  if [ -d /usr/local/cuda-13.0/include/crt ] && [ -L "$prefix/nvidia" ]; then
    nv=$(readlink -f "$prefix/nvidia")
    rm "$prefix/nvidia"; mkdir "$prefix/nvidia"
    for d in "$nv"/*; do ln -s "$d" "$prefix/nvidia/"; done
    rm "$prefix/nvidia/cu13"; mkdir "$prefix/nvidia/cu13"
    for d in "$nv"/cu13/*; do
      [ "$(basename "$d")" = include ] || ln -s "$d" "$prefix/nvidia/cu13/"
    done
    ln -s /usr/local/cuda-13.0/include "$prefix/nvidia/cu13/include"
    echo "JIT headers: /usr/local/cuda-13.0/include (CUDA libraries from $nv)"
  fi
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
  tag=${TAG:-$preset}
  "$bin/mlx-aot" bench --model "$dir" --mlx-lm "${MLX_LM:-python3}" --json "$out/bench-$tag.json" \
    --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), MLX 0.32.2 CUDA" "$@" \
    2>&1 | tee "$out/bench-$tag.txt"
  ;;
parity)
  preset=${1:?preset}; shift
  start=$SECONDS
  MLX_AOT_ROOT=$(pwd) "$bin/parity" --full "$preset" "$@" 2>&1 | tee "$out/parity-$preset.txt"
  echo "parity $((SECONDS - start)) s" | tee -a "$out/parity-$preset.txt"
  ;;
serve)
  preset=${1:?preset}; shift
  dir=/root/models/$preset-q4
  if [ ! -f "$dir/model.safetensors" ]; then
    "$bin/mlx-aot" synth --preset "$preset" --bits 4 --out "$dir"
  fi
  levels=${LEVELS:-1,4,16,64}
  # SERVE_ARGS: more flags for mlx-aot serve (e.g. --batching on).
  # shellcheck disable=SC2086
  "$bin/mlx-aot" serve --model "$dir" --port 0 --max-batch 64 --queue 1024 \
    --served-model-name bench ${SERVE_ARGS:-} 2> "$out/serve-$preset.log" &
  pid=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$out/serve-$preset.log" && break; sleep 0.5; done
  addr=$(grep -o 'http://[0-9.:]*' "$out/serve-$preset.log" | head -1)
  python3 scripts/bench-serve.py --url "$addr" --model bench --concurrency "$levels" \
    --requests 2 --max-tokens 64 --label "mlx-aot serve $preset" \
    --json "$out/serve-$preset.json" 2>&1 | tee "$out/serve-$preset.txt" || true
  kill -TERM "$pid"; wait "$pid" || true
  python3 -m mlx_lm server --model "$dir" --port 8123 > "$out/mlx-lm-server-$preset.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8123/v1/models")' \
      2>/dev/null && break
    sleep 0.5
  done
  python3 scripts/bench-serve.py --url http://127.0.0.1:8123 --model "$dir" --concurrency "$levels" \
    --requests 2 --max-tokens 64 --label "mlx_lm.server $preset" --lenient \
    --json "$out/mlx-lm-server-$preset.json" 2>&1 | tee "$out/mlx-lm-server-$preset.txt" || true
  kill "$pid"; wait "$pid" || true
  ;;
*)
  echo "unknown phase $phase" >&2; exit 2 ;;
esac
