# Lease d, call C: e4b float KV and llama-3.2-1b (preset) at 3 x 256 against mlx-lm,
# then the 26b-a4b preset.
set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
BIN=/root/stash/bin-main TAG=e4b-float timeout 200 bash scripts/gpu-run.sh bench gemma4-e4b --reps 3 --gen 256 --kv float --impls generated,generated-mlx,monolith > /dev/null 2>&1
BIN=/root/stash/bin-main TAG=llama timeout 120 bash scripts/gpu-run.sh bench llama-3.2-1b --reps 3 --gen 256 --impls generated,monolith > /dev/null 2>&1
BIN=/root/stash/bin-main TAG=a4b timeout 260 bash scripts/gpu-run.sh bench gemma4-26b-a4b --reps 3 --gen 256 --impls generated,monolith > /dev/null 2>&1
grep -hE "generated|monolith|mlx-lm" $OUT/bench-*.txt | head -20
