set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
d=/root/models/gemma4-e4b-q4
[ -f $d/model.safetensors ] || /root/stash/bin-main/mlx-aot synth --preset gemma4-e4b --bits 4 --out $d
M="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), MLX 0.32.2 CUDA"
timeout 380 /root/stash/bin-vec/mlx-aot bench --model $d --mlx-lm python3 --json $OUT/bench-vec.json --machine "$M" \
  --kv float --impls generated,generated-mlx,monolith --reps 3 > $OUT/bench-vec.txt 2>&1
timeout 180 /root/stash/bin-main/mlx-aot bench --model $d --mlx-lm none --json $OUT/bench-main.json --machine "$M" \
  --kv float --impls generated --reps 3 > $OUT/bench-main.txt 2>&1
grep -E "^(generated|monolith|mlx-lm)" $OUT/bench-vec.txt $OUT/bench-main.txt
