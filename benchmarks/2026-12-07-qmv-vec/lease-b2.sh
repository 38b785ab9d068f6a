set -x
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
mkdir -p .gpu/bin && cp /root/stash/bin-vec/* .gpu/bin/
timeout 330 bash scripts/gpu-run.sh bench gemma4-e4b --kv float --impls generated,generated-mlx,monolith --mlx-lm python3 --reps 3
cp $OUT/bench-gemma4-e4b.json $OUT/bench-vec.json; cp $OUT/bench-gemma4-e4b.txt $OUT/bench-vec.txt
cp /root/stash/bin-main/* .gpu/bin/
timeout 200 bash scripts/gpu-run.sh bench gemma4-e4b --kv float --impls generated --mlx-lm none --reps 3
cp $OUT/bench-gemma4-e4b.txt $OUT/bench-main.txt; cp $OUT/bench-gemma4-e4b.json $OUT/bench-main.json
rm -f $OUT/bench-gemma4-e4b.*
grep -E "^\|" $OUT/bench-vec.txt $OUT/bench-main.txt | head -20
