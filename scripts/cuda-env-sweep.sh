#!/usr/bin/env bash
# Does any of MLX's CUDA settings speed up a decode step? One `mlx-aot bench` process per
# setting (they are read once per process) on the gemma4-e4b preset at its real shapes,
# random 4-bit weights, float caches: the CUDA graph cache size, ops per CUDA graph, and
# CUDA graphs off. None changes what is computed, only how it is launched. Run on the GPU
# host from the repository root, after the parts are there (BENCHMARKS.md, fourth run);
# results land in $OUT.
set -u
bash scripts/gpu-run.sh setup > $OUT/setup.txt 2>&1
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
bin=.gpu/bin/mlx-aot
dir=/root/models/gemma4-e4b-q4
$bin synth --preset gemma4-e4b --bits 4 --out $dir > /dev/null
run() { name=$1; shift; start=$SECONDS
  env "$@" timeout 150 $bin bench --model $dir --kv float --prompt 512 --gen 128 --reps 2 --host-steps 8 --impls monolith,generated --mlx-lm none --json $OUT/sweep-$name.json > $OUT/sweep-$name.txt 2>&1
  echo "== $name ($((SECONDS-start)) s)"; grep -E "warm-up|^monolith|^generated" $OUT/sweep-$name.txt; }
run default X=1
run cache1000 MLX_CUDA_GRAPH_CACHE_SIZE=1000
run ops100 MLX_CUDA_GRAPH_CACHE_SIZE=1000 MLX_MAX_OPS_PER_BUFFER=100
run ops250 MLX_CUDA_GRAPH_CACHE_SIZE=1000 MLX_MAX_OPS_PER_BUFFER=250
run ops50 MLX_CUDA_GRAPH_CACHE_SIZE=1000 MLX_MAX_OPS_PER_BUFFER=50
run nographs MLX_USE_CUDA_GRAPHS=0
