#!/usr/bin/env python3
"""Write a tiny MLA-family model folder made by mlx-lm itself (deepseek_v32 or
glm_moe_dsa), with seeded random weights.

  make_mla_model.py --config FILE --out DIR [--bits 4 --group-size 64] [--seed 0]
                    [--dtype bfloat16|float32]

FILE is a config.json (any keys mlx-lm's ModelArgs reads). The model is built by
mlx-lm's own `Model` class, its parameters drawn with numpy's PCG64 from --seed in
sorted name order (norm weights near 1, the correction bias near 0, matrices
~ N(0, 1/fan_in)), cast to --dtype (the correction bias stays float32, as mlx-lm's
cast predicate keeps it), quantized with mlx-lm's own `quantize_model` when --bits is
given (what `mlx_lm.convert -q` does), and saved with mlx-lm's `save_model` and
`save_config`: the folder is what mlx-lm writes, not what mlx-aot's synth writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bits", type=int)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    a = ap.parse_args()

    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.utils import quantize_model, save_config, save_model

    mx.set_default_device(mx.cpu)
    config = json.loads(Path(a.config).read_text())
    model_type = config.get("model_type")
    if model_type == "deepseek_v32":
        from mlx_lm.models import deepseek_v32 as arch
    elif model_type == "glm_moe_dsa":
        from mlx_lm.models import glm_moe_dsa as arch
    else:
        print(f"make_mla_model.py: model_type {model_type!r} is not an MLA family type", file=sys.stderr)
        sys.exit(2)
    model = arch.Model(arch.ModelArgs.from_dict(config))

    dtype = {"bfloat16": mx.bfloat16, "float32": mx.float32}[a.dtype]
    rng = np.random.default_rng(a.seed)
    params = dict(tree_flatten(model.parameters()))
    weights = []
    for name in sorted(params):
        shape = params[name].shape
        if name.endswith("e_score_correction_bias"):
            w = mx.array((0.1 * rng.standard_normal(size=shape)).astype(np.float32))
            weights.append((name, w))
            continue
        if "norm" in name and name.endswith(".bias"):
            v = 0.1 * rng.standard_normal(size=shape)
        elif "norm" in name:
            v = rng.uniform(0.8, 1.2, size=shape)
        elif "embed_tokens" in name:
            v = rng.standard_normal(size=shape)
        else:
            v = rng.standard_normal(size=shape) / np.sqrt(shape[-1])
        weights.append((name, mx.array(v.astype(np.float32)).astype(dtype)))
    model.update(tree_unflatten(weights))
    mx.eval(model.parameters())

    if a.bits:
        model, config = quantize_model(model, config, a.group_size, a.bits)

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    save_model(out, model)
    save_config(config, config_path=out / "config.json")
    print(f"wrote {out} ({model_type}, {len(params)} parameters, {a.dtype}, bits {a.bits})")


if __name__ == "__main__":
    main()
