# float KV: bin-qattn (both patches) against bin-main (a83a01e): the generated code, and
# bin-qattn's monolith.
set -x
a="gemma4-e4b --kv float --reps 3"
BIN=/root/stash/bin-qattn TAG=qattn-float timeout 200 bash scripts/gpu-run.sh bench $a --impls generated,monolith > /dev/null
BIN=/root/stash/bin-main TAG=main-float MLX_LM=none timeout 120 bash scripts/gpu-run.sh bench $a --impls generated > /dev/null
grep -E "^\| ?(generated|monolith|mlx-lm)|^(generated|monolith|mlx-lm)" $OUT/bench-*float*.txt
