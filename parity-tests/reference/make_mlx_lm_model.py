#!/usr/bin/env python3
"""Write a tiny model folder made by mlx-lm itself, with seeded random weights.

  make_mlx_lm_model.py --config FILE --out DIR [--bits 4 --group-size 64 | --recipe R]
                       [--seed 0] [--dtype bfloat16|float32]

FILE is a config.json (any keys mlx-lm's ModelArgs reads; keys it leaves out take
mlx-lm's defaults, and the saved config.json keeps only the keys given, as
`mlx_lm.convert` keeps the source's). The model is built by the `Model` class mlx-lm
picks for the config (`mlx_lm.utils._get_classes`, remappings included), its parameters
drawn with numpy's PCG64 from --seed in sorted name order (norm weights near 1, biases
and the MoE correction bias near 0, embeddings ~ N(0, 1), matrices ~ N(0, 1/fan_in),
other vectors and scalars near 1), cast to --dtype where the model's `cast_predicate`
says so (MLA's correction bias stays float32), quantized with mlx-lm's own
`quantize_model` when --bits or --recipe is given (what `mlx_lm.convert -q [--quant-predicate R]` does;
R is one of mlx-lm's mixed recipes, mixed_2_6 / mixed_3_4 / mixed_3_6 / mixed_4_6),
and saved with mlx-lm's `save_model` and `save_config`: the folder is what mlx-lm
writes, not what mlx-aot's synth writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def initial(name: str, shape: tuple[int, ...], rng):
    """A parameter's seeded starting value (float32 numpy)."""
    import numpy as np

    leaf = name.rsplit(".", 1)[-1]
    if name.endswith("e_score_correction_bias") or leaf == "bias":
        return 0.1 * rng.standard_normal(size=shape)
    if "norm" in name:
        return rng.uniform(0.8, 1.2, size=shape)
    if "embed" in name:
        return rng.standard_normal(size=shape)
    if len(shape) >= 2:
        return rng.standard_normal(size=shape) / np.sqrt(shape[-1])
    # Per-channel or per-layer scalars (Gemma 4's layer_scalar, router scales).
    return rng.uniform(0.8, 1.2, size=shape)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bits", type=int)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--recipe", choices=["mixed_2_6", "mixed_3_4", "mixed_3_6", "mixed_4_6"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    a = ap.parse_args()

    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

    mx.set_default_device(mx.cpu)
    config = json.loads(Path(a.config).read_text())
    try:
        model_class, args_class = _get_classes(config)
    except (KeyError, ValueError) as e:
        print(f"make_mlx_lm_model.py: {a.config}: {e}", file=sys.stderr)
        sys.exit(2)
    model = model_class(args_class.from_dict(config))

    dtype = {"bfloat16": mx.bfloat16, "float32": mx.float32}[a.dtype]
    rng = np.random.default_rng(a.seed)
    params = dict(tree_flatten(model.parameters()))
    weights = []
    # What mlx_lm.convert casts: the model's cast predicate keeps some parameters float32.
    cast = getattr(model, "cast_predicate", lambda _: True)
    for name in sorted(params):
        v = mx.array(initial(name, params[name].shape, rng).astype(np.float32))
        weights.append((name, v.astype(dtype) if cast(name) else v))
    model.update(tree_unflatten(weights))
    mx.eval(model.parameters())

    if a.recipe:
        from mlx_lm.convert import mixed_quant_predicate_builder

        predicate = mixed_quant_predicate_builder(a.recipe, model, a.group_size)
        low = {"mixed_2_6": 2, "mixed_3_4": 3, "mixed_3_6": 3, "mixed_4_6": 4}[a.recipe]
        model, config = quantize_model(model, config, a.group_size, low, quant_predicate=predicate)
    elif a.bits:
        model, config = quantize_model(model, config, a.group_size, a.bits)

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    save_model(out, model)
    save_config(config, config_path=out / "config.json")
    kind = a.recipe or (f"{a.bits}-bit" if a.bits else "float")
    print(f"wrote {out} ({config['model_type']}, {len(params)} parameters, {a.dtype}, {kind})")


if __name__ == "__main__":
    main()
