# Ran 2026-12-07 on an H100 (results in h100-run-2026-12-07/); written for lease d, call B: setup; the attention kernels' checks with the padding
# mask (bin-mask: main with mask-attention.patch applied, whose kernel sources the check reads from the working tree); the llama-3.2-1b gate with it.
set -x
bash scripts/gpu-run.sh setup > $OUT/setup-2.txt 2>&1
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
nvidia-smi --query-gpu=name --format=csv,noheader
(cd scripts && timeout 110 python3 fast-kernel-check.py --only quant-attention --seeds 1 --n 50 --reps 3 --json $OUT/qattn-mask-check.json > $OUT/qattn-mask-check.txt 2>&1; echo "check rc=$?" >> $OUT/qattn-mask-check.txt)
(cd scripts && timeout 100 python3 fast-kernel-check.py --only attention --seeds 1 --n 50 --reps 3 --json $OUT/attn-mask-check.json > $OUT/attn-mask-check.txt 2>&1; echo "check rc=$?" >> $OUT/attn-mask-check.txt)
grep -chE "\| yes \|" $OUT/*-mask-check.txt; grep -hE "\| NO \||check rc|rror" $OUT/*-mask-check.txt | head
grep -hA12 "padding mask" $OUT/qattn-mask-check.txt | head -30
BIN=/root/stash/bin-mask timeout 250 bash scripts/gpu-run.sh parity llama-3.2-1b --second 16 --steps 8 --no-altered > /dev/null 2>&1
mv $OUT/parity-llama-3.2-1b.txt $OUT/parity-llama-mask.txt
tail -n 8 $OUT/parity-llama-mask.txt
