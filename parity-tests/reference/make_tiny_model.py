#!/usr/bin/env python3
"""Write a tiny Gemma 4 model folder with seeded random weights.

A fixture generator for testing the reference harness (mlx_lm_logits.py) itself.
The folder holds config.json (every key of gemma4.md section 1 spelled out),
model.safetensors in mlx-community naming (`language_model.model.*`, or `model.*`
with --flat), and optionally kv_config.json.

Usage:
  make_tiny_model.py --preset e4b --out DIR [--bits 4 --group-size 64]
                     [--seed 0] [--kv-config mixed|none|FILE] [--flat]
                     [--moe-naming switch|fused] [--text-config FILE]

Presets (all: hidden 64, 4 query heads, head_dim 32, global_head_dim 64,
vocab 128, window 8, (sliding, sliding, full) layer pattern):
  e2b      12 layers, 5 KV-shared, PLE 16, 1 KV head, double-wide MLP on shared layers
  e4b      12 layers, 5 KV-shared, PLE 16, 2 KV heads
  12b      6 layers, attention_k_eq_v, KV heads 2 sliding / 1 full
  26b-a4b  6 layers, MoE (E=8, K=2, expert width 64), attention_k_eq_v, KV heads 2 / 1
  31b      6 layers, attention_k_eq_v, KV heads 4 sliding / 2 full

Weights are drawn with numpy's PCG64 from --seed, in sorted parameter-name order,
as float32 and rounded to --dtype (bf16 by default). --bits quantizes with mlx-lm's own
`quantize_model` (affine, router.proj forced to 8-bit group 64 by the model's
quant_predicate), exactly as `mlx_lm.convert -q` would.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

ROPE_PARAMETERS = {
    "full_attention": {
        "partial_rotary_factor": 0.25,
        "rope_theta": 1000000.0,
        "rope_type": "proportional",
    },
    "sliding_attention": {
        "partial_rotary_factor": 1.0,
        "rope_theta": 10000.0,
        "rope_type": "default",
    },
}


def _pattern(n_layers: int) -> list[str]:
    """Two sliding layers then one full layer, repeated."""
    unit = ["sliding_attention", "sliding_attention", "full_attention"]
    return [unit[i % 3] for i in range(n_layers)]


BASE_TEXT_CONFIG = {
    "model_type": "gemma4_text",
    "hidden_size": 64,
    "num_hidden_layers": 6,
    "intermediate_size": 128,
    "moe_intermediate_size": None,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_global_key_value_heads": None,
    "head_dim": 32,
    "global_head_dim": 64,
    "attention_k_eq_v": False,
    "sliding_window": 8,
    "layer_types": _pattern(6),
    "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False,
    "hidden_size_per_layer_input": 0,
    "vocab_size": 128,
    "vocab_size_per_layer_input": 128,
    "enable_moe_block": False,
    "num_experts": None,
    "top_k_experts": None,
    "rope_parameters": ROPE_PARAMETERS,
    "final_logit_softcapping": 30.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "max_position_embeddings": 4096,
    "hidden_activation": "gelu_pytorch_tanh",
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}

# 12 layers (s,s,f)x4, 5 shared: donors 0-6 (full donors 2 and 5), sliding
# sharers 7, 9, 10 read layer 6 and full sharers 8, 11 read layer 5 (never j - F).
# N * P = 12 * 16 = 192 is a multiple of 64, so the PLE table quantizes.
_E_MODEL = {
    "num_hidden_layers": 12,
    "layer_types": _pattern(12),
    "num_kv_shared_layers": 5,
    "hidden_size_per_layer_input": 16,
}

PRESETS = {
    "e2b": {**_E_MODEL, "use_double_wide_mlp": True, "num_key_value_heads": 1},
    "e4b": {**_E_MODEL, "use_double_wide_mlp": False},
    "12b": {
        "num_global_key_value_heads": 1,
        "attention_k_eq_v": True,
    },
    "26b-a4b": {
        "num_global_key_value_heads": 1,
        "attention_k_eq_v": True,
        "enable_moe_block": True,
        "num_experts": 8,
        "top_k_experts": 2,
        "moe_intermediate_size": 64,
    },
    "31b": {
        "num_key_value_heads": 4,
        "num_global_key_value_heads": 2,
        "attention_k_eq_v": True,
    },
}


def text_config_for(preset: str) -> dict:
    cfg = copy.deepcopy(BASE_TEXT_CONFIG)
    cfg.update(copy.deepcopy(PRESETS[preset]))
    return cfg


def _init_weight(name: str, shape: tuple, rng):
    """float32 numpy values for one parameter, by its role."""
    import numpy as np

    leaf = name.rsplit(".", 1)[-1]
    module = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else ""
    if module in ("q_norm", "k_norm"):
        # SDPA scale is 1.0: keep q.k at O(1) so the tiny model is not chaotic
        # under bf16 rounding (a sharp softmax amplifies 1-ulp score changes).
        return rng.uniform(0.25, 0.75, size=shape).astype(np.float32)
    if "norm" in module or name.endswith("router.scale"):
        return rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    if leaf == "layer_scalar":
        return rng.uniform(0.5, 1.0, size=shape).astype(np.float32)
    if leaf == "per_expert_scale":
        return rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    if "embed_tokens" in name:
        return (0.5 * rng.standard_normal(size=shape)).astype(np.float32)
    if leaf == "weight" and len(shape) >= 2:
        fan_in = shape[-1]
        return (rng.standard_normal(size=shape) / np.sqrt(fan_in)).astype(np.float32)
    raise ValueError(f"no init rule for parameter {name} {shape}")


def kv_config_mixed(text_cfg: dict) -> list[dict]:
    """Every cache listed: 8-bit for cache 0, the first full donor and every
    fourth cache, 4-bit otherwise; group = min(64, D of that layer)."""
    n = text_cfg["num_hidden_layers"]
    first_shared = n - text_cfg["num_kv_shared_layers"]
    types = text_cfg["layer_types"]
    first_full = next((i for i in range(first_shared) if types[i] == "full_attention"), None)
    out = []
    for i in range(first_shared):
        d = text_cfg["global_head_dim"] if types[i] == "full_attention" else text_cfg["head_dim"]
        bits = 8 if (i % 4 == 0 or i == first_full) else 4
        out.append({"layer_idx": i, "bits": bits, "group_size": min(64, d)})
    return out


def build(args) -> None:
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_lm.models import gemma4, gemma4_text
    from mlx_lm.utils import quantize_model

    mx.set_default_device(mx.cpu)

    if args.text_config:
        text_cfg = json.loads(Path(args.text_config).read_text())
    else:
        text_cfg = text_config_for(args.preset)
    text_cfg["model_type"] = "gemma4_text"

    if args.flat:
        config = copy.deepcopy(text_cfg)
        model = gemma4_text.Model(gemma4_text.ModelArgs.from_dict(config))
    else:
        config = {
            "model_type": "gemma4",
            "text_config": copy.deepcopy(text_cfg),
            "vocab_size": text_cfg["vocab_size"],
            "bos_token_id": 2,
            "eos_token_id": [1, 106],
            "pad_token_id": 0,
            "tie_word_embeddings": True,
        }
        model = gemma4.Model(gemma4.ModelArgs.from_dict(copy.deepcopy(config)))

    dtype = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}[args.dtype]
    rng = np.random.default_rng(args.seed)
    shapes = dict(tree_flatten(model.parameters()))
    weights = []
    for name in sorted(shapes):
        arr = _init_weight(name, tuple(shapes[name].shape), rng)
        weights.append((name, mx.array(arr).astype(dtype)))
    model.load_weights(weights, strict=True)

    if args.bits:
        model, config = quantize_model(
            model,
            config,
            group_size=args.group_size,
            bits=args.bits,
            mode="affine",
            quant_predicate=model.quant_predicate,
        )

    flat = dict(tree_flatten(model.parameters()))
    if args.moe_naming == "fused":
        if args.bits:
            raise SystemExit("--moe-naming fused needs float weights (mlx-lm splits only float tensors)")
        for key in [k for k in flat if k.endswith(".experts.switch_glu.gate_proj.weight")]:
            base = key.removesuffix(".switch_glu.gate_proj.weight")
            gate = flat.pop(key)
            up = flat.pop(f"{base}.switch_glu.up_proj.weight")
            flat[f"{base}.gate_up_proj"] = mx.concatenate([gate, up], axis=-2)
            flat[f"{base}.down_proj"] = flat.pop(f"{base}.switch_glu.down_proj.weight")
    mx.eval(flat)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), flat, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    kv_path = out / "kv_config.json"
    if args.kv_config == "mixed":
        kv_path.write_text(json.dumps(kv_config_mixed(text_cfg), indent=2) + "\n")
    elif args.kv_config not in (None, "none"):
        kv_path.write_text(Path(args.kv_config).read_text())
    elif kv_path.exists():
        kv_path.unlink()

    print(f"wrote {out} ({len(flat)} tensors)", file=sys.stderr)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="e4b")
    p.add_argument("--text-config", help="JSON file with a full text config (replaces the preset)")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bits", type=int, default=0, help="quantize weights (affine) at this width; 0 = bf16")
    p.add_argument("--group-size", type=int, default=64)
    p.add_argument(
        "--dtype",
        choices=["bfloat16", "float16", "float32"],
        default="bfloat16",
        help="float weight dtype (MLX 0.32.2's CPU gather_mm is float32-only, so a float MoE model runs on the CPU only as float32)",
    )
    p.add_argument("--kv-config", default="mixed", help="mixed | none | path to a kv_config.json to copy")
    p.add_argument("--flat", action="store_true", help="flat gemma4_text config, `model.*` names")
    p.add_argument("--moe-naming", choices=["switch", "fused"], default="switch")
    build(p.parse_args(argv))


if __name__ == "__main__":
    main()
