# Not run (written for lease d, call D): prefill at 4,096 (e4b preset, 3 reps x 64), and the serve load test
# of the e4b with float KV and batching on.
set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
BIN=/root/stash/${DBIN:-bin-main} TAG=e4b-prompt4096 timeout 240 bash scripts/gpu-run.sh bench gemma4-e4b --prompt 4096 --reps 3 --gen 64 --impls generated,monolith > /dev/null 2>&1
grep -hE "generated|monolith|mlx-lm" $OUT/bench-*.txt | head -12
BIN=/root/stash/${DBIN:-bin-main} LEVELS=1,4,16 SERVE_ARGS="--kv float --batching on" timeout 300 bash scripts/gpu-run.sh serve gemma4-e4b > /dev/null 2>&1
cat $OUT/serve-gemma4-e4b.txt $OUT/mlx-lm-server-gemma4-e4b.txt 2>/dev/null | tail -30
