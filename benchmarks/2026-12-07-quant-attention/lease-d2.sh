# The model bench, one lease: e4b with its preset (quantized) KV caches, this work
# (bin-qattn) against main's binary (bin-main) and mlx-lm; lease-d3.sh takes float KV.
set -x
a="gemma4-e4b --reps 3"
BIN=/root/stash/bin-qattn TAG=qattn-preset timeout 300 bash scripts/gpu-run.sh bench $a --impls generated,generated-mlx,monolith > /dev/null
BIN=/root/stash/bin-main TAG=main-preset MLX_LM=none timeout 120 bash scripts/gpu-run.sh bench $a --impls generated > /dev/null
grep -E "^\| ?(generated|monolith|mlx-lm)|^(generated|monolith|mlx-lm)" $OUT/bench-*.txt
