# The byte gate with bin-qattn: PRESETS (default the e4b with its quantized caches, then
# float caches, then llama-3.2-1b's quantized preset).
set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
for p in ${PRESETS:-gemma4-e4b gemma4-e4b-float llama-3.2-1b}; do
  case $p in gemma4-26b-a4b*) a="--second 100 --steps 24 --no-batch2";; *) a="--second 16 --steps 8 --no-altered";; esac
  BIN=/root/stash/bin-qattn timeout 250 bash scripts/gpu-run.sh parity $p $a > /dev/null 2>&1
  tail -n 4 $OUT/parity-$p.txt
done
