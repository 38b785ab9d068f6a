# The model bench with and without the split, one lease, float KV (then the preset's).
set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
d=/root/models/gemma4-e4b-q4
[ -f $d/model.safetensors ] || /root/stash/bin-main/mlx-aot synth --preset gemma4-e4b --bits 4 --out $d
M="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), MLX 0.32.2 CUDA"
timeout 330 /root/stash/bin-split/mlx-aot bench --model $d --mlx-lm python3 --json $OUT/bench-split.json --machine "$M" \
  --kv float --impls generated,generated-mlx,monolith --reps 3 > $OUT/bench-split.txt 2>&1
timeout 150 /root/stash/bin-main/mlx-aot bench --model $d --mlx-lm none --json $OUT/bench-main.json --machine "$M" \
  --kv float --impls generated --reps 3 > $OUT/bench-main.txt 2>&1
grep -E "^(generated|monolith|mlx-lm)" $OUT/bench-split.txt $OUT/bench-main.txt
