# The byte gate with the split binaries: PRESETS (default: the two e4b presets; the
# 26b-a4b in a call of its own, ~210 s).
set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
for p in ${PRESETS:-gemma4-e4b-float gemma4-e4b}; do
  case $p in gemma4-26b-a4b*) a="--second 100 --steps 24 --no-batch2";; *) a="--second 16 --steps 8 --no-altered";; esac
  BIN=/root/stash/bin-split timeout 280 bash scripts/gpu-run.sh parity $p $a > /dev/null 2>&1
  tail -n 4 $OUT/parity-$p.txt
done
