# Lease d, call B: setup, main's llama-3.2-1b gate with a long limit (is the ragged
# failure main's?), then the e4b preset bench at 3 x 256 against mlx-lm.
set -x
bash scripts/gpu-run.sh setup > $OUT/setup.txt 2>&1
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
BIN=/root/stash/bin-main timeout 270 bash scripts/gpu-run.sh parity llama-3.2-1b --second 16 --steps 8 --no-altered > /dev/null 2>&1
tail -n 6 $OUT/parity-llama-3.2-1b.txt
BIN=/root/stash/bin-main TAG=e4b-preset timeout 290 bash scripts/gpu-run.sh bench gemma4-e4b --reps 3 --gen 256 --impls generated,monolith > /dev/null 2>&1
grep -hE "generated|monolith|mlx-lm" $OUT/bench-*.txt | head -12
