# Setup and the kernels' correctness: quantized-cache attention (new), float attention
# (its kernel now shares the quantized one's body), the split matvec. /root/stash holds
# bin-main (a83a01e), bin-split (qmv-split.patch) and bin-qattn (split + this work).
set -x
bash scripts/gpu-run.sh setup > $OUT/setup.txt 2>&1
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
cd scripts
timeout 200 python3 fast-kernel-check.py --only quant-attention --seeds 2 --n 100 --json $OUT/qattn-check.json > $OUT/qattn-check.txt 2>&1
echo "check rc=$?" >> $OUT/qattn-check.txt
timeout 120 python3 fast-kernel-check.py --only attention --seeds 1 --n 100 --json $OUT/attn-check.json > $OUT/attn-check.txt 2>&1
echo "check rc=$?" >> $OUT/attn-check.txt
timeout 150 python3 fast-kernel-check.py --only qmv --quick --seeds 2 --n 100 --json $OUT/qmv-check.json > $OUT/qmv-check.txt 2>&1
echo "check rc=$?" >> $OUT/qmv-check.txt
cd ..
grep -cE "\| yes \|" $OUT/*-check.txt; grep -E "\| NO \||check rc|Error|error" $OUT/*-check.txt | head -20
