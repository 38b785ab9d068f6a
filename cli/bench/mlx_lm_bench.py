"""mlx-lm's side of `mlx-aot bench`: the same model folder, prompt and token count,
measured with mlx-lm's own generation loop (generate_step, which pipelines with
async_eval). Prints one JSON line.

Usage: mlx_lm_bench.py --model DIR --prompt N --gen N --reps N [--warmup-gen N]
                       [--dot FILE]
"""

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import time

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
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
            first_wall = time.time()
        count += 1
    end = time.perf_counter()
    end_wall = time.time()
    decode_steps = count - 1
    return {
        "prefill_tok_s": len(prompt) / (first - start),
        "ttft_s": first - start,
        "decode_tok_s": decode_steps / (end - first) if decode_steps > 0 else None,
        "peak_memory": mx.get_peak_memory(),
        # Wall-clock seconds since the epoch, for mlx-aot bench's GPU busy fraction.
        "decode_window": [first_wall, end_wall],
    }


def step_graph(model, prompt, dot, steps=32):
    """Single-token steps after the prompt, as mlx-lm's generate_step builds them
    (logits, log-softmax, argmax), one at a time: the time to build each step's graph
    apart from evaluating it, and of that evaluation the part spent handing it to the
    device (async_eval) (medians, the first two steps not timed), and the first
    step's primitives counted from MLX's DOT export."""
    cache = make_prompt_cache(model)
    logits = model(mx.array(prompt)[None], cache=cache)
    token = mx.argmax(logits[:, -1, :], axis=-1)
    mx.eval(token, [c.state for c in cache])
    build, submit, evals, counts = [], [], [], collections.Counter()
    for i in range(steps + 2):
        t0 = time.perf_counter()
        logits = model(token[:, None], cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        nxt = mx.argmax(logprobs, axis=-1)
        t1 = time.perf_counter()
        if i == 0:
            path = dot or os.path.join(tempfile.mkdtemp(), "mlx-lm.dot")
            mx.export_to_dot(path, nxt)
            with open(path) as f:
                for line in f:
                    if "shape=rectangle" in line:
                        m = re.search(r'label ="([^"]*)"', line)
                        counts[m.group(1) if m else "?"] += 1
            if not dot:
                os.remove(path)
            t1 = time.perf_counter()
        mx.async_eval(nxt)
        t2 = time.perf_counter()
        mx.eval(nxt)
        t3 = time.perf_counter()
        # The first two steps are not timed (the first also writes the graph).
        if i >= 2:
            build.append((t1 - t0) * 1e3)
            submit.append((t2 - t1) * 1e3)
            evals.append((t3 - t1) * 1e3)
        token = nxt
    median = lambda v: sorted(v)[len(v) // 2]
    return dict(sorted(counts.items())), median(build), median(submit), median(evals)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", type=int, required=True)
    p.add_argument("--gen", type=int, required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup-gen", type=int, default=16)
    p.add_argument("--dot", help="write one step's graph here as DOT")
    a = p.parse_args()
    model, config = load_model(__import__("pathlib").Path(a.model))
    vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
    prompt = tokens(a.prompt, vocab)
    run(model, prompt, a.warmup_gen)
    reps = [run(model, prompt, a.gen) for _ in range(a.reps)]
    ops, build_ms, submit_ms, eval_ms = step_graph(model, prompt, a.dot)
    print(
        json.dumps(
            {
                "mlx_lm": reps,
                "ops_by_primitive": ops,
                "host_build_ms_per_step": build_ms,
                "submit_ms_per_step": submit_ms,
                "eval_ms_per_step": eval_ms,
                "device": str(mx.default_device()),
            }
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
