"""mlx-lm's side of `mlx-aot bench`: the same model folder, prompt and token count,
measured with mlx-lm's own generation loop (generate_step, which pipelines with
async_eval). Prints one JSON line.

Usage: mlx_lm_bench.py --model DIR --prompt N --gen N --reps N [--warmup-gen N]
"""

import argparse
import json
import sys
import time

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model


def tokens(n, vocab):
    # The same deterministic prompt mlx-aot bench uses.
    x = 0x9E3779B97F4A7C15
    out = []
    for _ in range(n):
        x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 7
        x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
        out.append(3 + x % (vocab - 3))
    return out


def run(model, prompt, gen):
    mx.reset_peak_memory()
    start = time.perf_counter()
    first = None
    count = 0
    for _token, _ in generate_step(mx.array(prompt), model, max_tokens=gen):
        if first is None:
            first = time.perf_counter()
        count += 1
    end = time.perf_counter()
    decode_steps = count - 1
    return {
        "prefill_tok_s": len(prompt) / (first - start),
        "ttft_s": first - start,
        "decode_tok_s": decode_steps / (end - first) if decode_steps > 0 else None,
        "peak_memory": mx.get_peak_memory(),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", type=int, required=True)
    p.add_argument("--gen", type=int, required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup-gen", type=int, default=16)
    a = p.parse_args()
    model, config = load_model(__import__("pathlib").Path(a.model))
    vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
    prompt = tokens(a.prompt, vocab)
    run(model, prompt, a.warmup_gen)
    reps = [run(model, prompt, a.gen) for _ in range(a.reps)]
    print(json.dumps({"mlx_lm": reps, "device": str(mx.default_device())}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
