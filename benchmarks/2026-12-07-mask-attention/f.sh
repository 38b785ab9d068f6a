# Not run (written for a second machine in lease d), call C: the e4b-float gate with bin-mask (its ragged steps now
# take the masked kernel), then mlx-aot serve load tests of both builds.
set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
BIN=/root/stash/bin-mask timeout 200 bash scripts/gpu-run.sh parity gemma4-e4b-float --second 16 --steps 8 --no-altered > /dev/null 2>&1
mv $OUT/parity-gemma4-e4b-float.txt $OUT/parity-e4b-float-mask.txt; tail -n 5 $OUT/parity-e4b-float-mask.txt
BIN=/root/stash/bin-mask TAG=llama-preset-mask LEVELS=1,4,16 SERVE_ARGS="--batching on" MLX_LM_SERVER=none timeout 120 bash scripts/gpu-run.sh serve llama-3.2-1b > /dev/null 2>&1
BIN=/root/stash/bin-mask TAG=e4b-float-mask LEVELS=1,4,16 SERVE_ARGS="--kv float --batching on" MLX_LM_SERVER=none timeout 150 bash scripts/gpu-run.sh serve gemma4-e4b > /dev/null 2>&1
BIN=/root/stash/bin-main TAG=e4b-float-main LEVELS=1,4,16 SERVE_ARGS="--kv float --batching on" MLX_LM_SERVER=none timeout 120 bash scripts/gpu-run.sh serve gemma4-e4b > /dev/null 2>&1
tail -n 8 $OUT/serve-*.txt
