"""Greedy tokens from mlx-lm's own generation loop on a model folder.

Loads DIR with mlx-lm (`mlx_lm.utils.load_model`), runs `mlx_lm.generate.generate_step`
on the prompt with its default (greedy) sampler, float caches, and prints one JSON line:
{"tokens": [...]}. What `mlx-aot`'s generation loop must reproduce token for token.

Usage: mlx_lm_generate.py --model DIR --prompt 1,2,3 --max-tokens N [--prefill-step N]
"""

import argparse
import json
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", required=True, help="comma-separated token ids")
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--prefill-step", type=int, default=2048)
    a = p.parse_args()
    model, _ = load_model(Path(a.model))
    prompt = mx.array([int(t) for t in a.prompt.split(",")])
    tokens = [
        int(t)
        for t, _ in generate_step(
            prompt, model, max_tokens=a.max_tokens, prefill_step_size=a.prefill_step
        )
    ]
    print(json.dumps({"tokens": tokens}))


if __name__ == "__main__":
    main()
