# The model bench with and without qmv_vec.cu, one lease, float KV.
set -x
a="gemma4-e4b --kv float --reps 3"
BIN=/root/stash/bin-vec TAG=vec timeout 380 bash scripts/gpu-run.sh bench $a --impls generated,generated-mlx,monolith > /dev/null
BIN=/root/stash/bin-main TAG=main MLX_LM=none timeout 180 bash scripts/gpu-run.sh bench $a --impls generated > /dev/null
grep -E "^(generated|monolith|mlx-lm)" $OUT/bench-vec.txt $OUT/bench-main.txt
