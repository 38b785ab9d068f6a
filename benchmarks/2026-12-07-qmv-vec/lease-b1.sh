set -x
mkdir -p .gpu/bin && cp /root/stash/bin-vec/* .gpu/bin/
bash scripts/gpu-run.sh setup > $OUT/setup.txt 2>&1
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> $OUT/setup.txt
(cd scripts && timeout 300 python3 fast-kernel-check.py --only qmv --quick --seeds 2 --n 100 --json $OUT/qmv-check.json) > $OUT/qmv-check.txt 2>&1
echo "check rc=$?" >> $OUT/qmv-check.txt
timeout 200 ncu -k regex:mlx_aot_qmv --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats python3 /root/stash/ncu-qmv.py > $OUT/ncu-qmv.txt 2>&1
echo "ncu rc=$?" >> $OUT/ncu-qmv.txt
tail -5 $OUT/qmv-check.txt; grep -E "check rc|ncu rc" $OUT/*.txt
