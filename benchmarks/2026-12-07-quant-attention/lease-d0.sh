# The short lease: setup, the quantized attention's check, the byte gate on the e4b
# preset (quantized caches), then the e4b preset bench (this work against main's binary
# and mlx-lm), in one call; whatever is done when the budget ends comes back in $OUT.
set -x
bash scripts/gpu-run.sh setup > $OUT/setup.txt 2>&1
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
(cd scripts && timeout 90 python3 fast-kernel-check.py --only quant-attention --seeds 1 --n 50 --reps 3 --json $OUT/qattn-check.json > $OUT/qattn-check.txt 2>&1; echo "check rc=$?" >> $OUT/qattn-check.txt)
grep -cE "\| yes \|" $OUT/qattn-check.txt; grep -E "\| NO \||check rc|rror" $OUT/qattn-check.txt | head
BIN=/root/stash/bin-qattn timeout 150 bash scripts/gpu-run.sh parity gemma4-e4b --second 16 --steps 8 --no-altered > /dev/null 2>&1
tail -n 4 $OUT/parity-gemma4-e4b.txt
a="gemma4-e4b --reps 2 --gen 128"
BIN=/root/stash/bin-qattn TAG=qattn-preset timeout 150 bash scripts/gpu-run.sh bench $a --impls generated,monolith > /dev/null 2>&1
BIN=/root/stash/bin-main TAG=main-preset MLX_LM=none timeout 50 bash scripts/gpu-run.sh bench $a --impls generated > /dev/null 2>&1
grep -hE "generated|monolith|mlx-lm" $OUT/bench-*.txt | head -12
