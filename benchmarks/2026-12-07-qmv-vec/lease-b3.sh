set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
mkdir -p .gpu/bin && cp /root/stash/${BIN:-bin-vec}/* .gpu/bin/
timeout 560 bash scripts/gpu-run.sh parity gemma4-e4b-float --second 16 --steps 8 --no-altered
tail -30 $OUT/parity-gemma4-e4b-float.txt
