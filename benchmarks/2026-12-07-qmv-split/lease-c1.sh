# Setup, correctness and timing of the split kernel, and its ncu probe. The tree must
# have qmv-split.patch applied (the scripts' routing); /root/stash/bin-split and
# bin-main hold the binaries (BENCHMARKS.md: how to carry them).
set -x
bash scripts/gpu-run.sh setup > $OUT/setup.txt 2>&1
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
(cd scripts && timeout 250 python3 fast-kernel-check.py --only qmv --quick --seeds 2 --n 100 --json $OUT/qmv-check.json) > $OUT/qmv-check.txt 2>&1
echo "check rc=$?" >> $OUT/qmv-check.txt
timeout 200 ncu -k regex:mlx_aot_qmv --section SpeedOfLight --section Occupancy --section LaunchStats \
  python3 benchmarks/2026-12-07-qmv-split/ncu-split.py > $OUT/ncu-split.txt 2>&1
echo "ncu rc=$?" >> $OUT/ncu-split.txt
grep -cE "\| yes \|" $OUT/qmv-check.txt; grep -E "\| NO \||check rc|ncu rc" $OUT/*.txt
