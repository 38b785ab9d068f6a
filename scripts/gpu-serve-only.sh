#!/usr/bin/env bash
# mlx-aot serve alone on the GPU host (after gpu-run.sh setup and a first gpu-run.sh
# serve that synthesized the weights): the load test at LEVELS, env passed through.
set -u
out=${OUT:-gpu-out}; tag=${1:-run}; preset=${2:-llama-3.2-1b}
export LD_LIBRARY_PATH=/root/prefix/mlx/lib PYTHONPATH=/root/prefix
.gpu/bin/mlx-aot serve --model /root/models/$preset-q4 --port 0 --max-batch 64 --queue 1024 \
  --served-model-name bench 2> "$out/serve-$tag.log" &
pid=$!
for _ in $(seq 1 600); do grep -q "listening on" "$out/serve-$tag.log" && break; sleep 0.5; done
addr=$(grep -o 'http://[0-9.:]*' "$out/serve-$tag.log" | head -1)
python3 scripts/bench-serve.py --url "$addr" --model bench --concurrency "${LEVELS:-1,4,16,64}" \
  --requests 2 --max-tokens 64 --label "mlx-aot serve $preset $tag" --json "$out/serve-$tag.json" 2>&1 | tail -12
kill -TERM $pid; wait $pid; echo "exit $?"
grep -v " INFO " "$out/serve-$tag.log" | tail -3
