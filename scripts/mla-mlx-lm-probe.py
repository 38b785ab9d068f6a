"""Where mlx-lm's DeepSeek-V3.2 / GLM-5 forward fails on a device: one prefill of
--prompt tokens and --steps single-token steps, evaluated after every attention and
feed-forward so that a device fault names the layer and the part. Prints one line per
evaluated part to stderr (flushed), so the last line before a crash is the culprit.

With --loop, instead: mlx-lm's own generation loop (generate_step, one graph per
prefill chunk and per step) with --prefill-step-size, timed: whether the loop runs on
this device, and at what speed.

Usage: mla-mlx-lm-probe.py --model DIR --prompt N [--steps N]
       mla-mlx-lm-probe.py --model DIR --prompt N --loop [--steps N] [--prefill-step-size N]
"""

import argparse
import sys
import time

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import make_prompt_cache
from pathlib import Path

from mlx_lm.utils import load_model


def say(*a):
    print(*a, file=sys.stderr, flush=True)


def forward(model, ids, cache, tag):
    inner = model.model
    h = inner.embed_tokens(ids)
    mask = create_attention_mask(h, cache[0][0], return_array=True)
    for i, (layer, c) in enumerate(zip(inner.layers, cache)):
        r = layer.self_attn(layer.input_layernorm(h), mask, c)
        mx.eval(r)
        say(f"{tag} layer {i} attention ok")
        h = h + r
        r = layer.mlp(layer.post_attention_layernorm(h))
        mx.eval(r)
        say(f"{tag} layer {i} {type(layer.mlp).__name__} ok")
        h = h + r
    logits = model.lm_head(inner.norm(h))
    mx.eval(logits)
    say(f"{tag} logits ok")
    return mx.argmax(logits[:, -1, :], axis=-1)


def loop(model, prompt, steps, chunk):
    start = time.perf_counter()
    count = 0
    for _token, _ in generate_step(
        prompt, model, max_tokens=steps + 1, prefill_step_size=chunk
    ):
        count += 1
        if count == 1:
            first = time.perf_counter()
    end = time.perf_counter()
    say(
        f"mlx-lm loop, prompt {prompt.size}, prefill_step_size {chunk}: "
        f"ttft {first - start:.3f} s, decode {(count - 1) / (end - first):.1f} tok/s"
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", type=int, required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--loop", action="store_true")
    p.add_argument("--prefill-step-size", type=int, default=2048)
    a = p.parse_args()
    model, _ = load_model(Path(a.model))
    vocab = model.args.vocab_size
    ids = mx.array([[3 + (i * 7919) % (vocab - 3) for i in range(a.prompt)]])
    if a.loop:
        loop(model, ids[0], a.steps, a.prefill_step_size)
        return
    cache = make_prompt_cache(model)
    token = forward(model, ids, cache, f"prefill {a.prompt}")
    for s in range(a.steps):
        token = forward(model, token[:, None], cache, f"step {s}")
    say("done")


if __name__ == "__main__":
    main()
