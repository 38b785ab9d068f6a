#!/usr/bin/env python3
"""Our MLA-family logits against transformers' `glm_moe_dsa` (float32, CPU, eager).

  transformers-mla-check.py --model DIR --tokens 1,2,3 [--tokens ...] --prefill K
                            --ours FILE [--ours FILE ...] [--tolerance 1e-4]
                            [--json OUT.json]

DIR is a model folder as mlx-aot writes it (`mlx-aot synth`, mlx-lm's layout after its
`sanitize`: `embed_q` / `unembed_out` per head, experts stacked under `switch_mlp`),
float32 weights. Each --ours FILE is `mlx-aot logits` of one --tokens row (float32
`[T, vocab]`, tensor `logits`: the first K tokens as one prefill, then one decode step
per token).

The weights are mapped back to transformers' layout (`kv_b_proj` rebuilt from
`embed_q` and `unembed_out`, experts fused into `gate_up_proj` / `down_proj`), the
config read by `GlmMoeDsaConfig` (its `indexer_types` decide which layers share the
indexer), and the model run over all rows at once: the first K tokens as one forward,
then one token per forward on a `DynamicCache`, as ours ran. One known difference is
aligned before running: transformers builds the indexer's key LayerNorm with eps 1e-6
where mlx-lm (whose computation the MLA family follows) uses `nn.LayerNorm`'s 1e-5.

Reported per row: max |ours - theirs|, the relative error ||ours - theirs|| / ||theirs||
over all positions and its worst position, and argmax agreement. Exit 1 when a row's
relative error exceeds --tolerance.

This runs where torch and transformers are installed (the GPU host: torch 2.11,
transformers 5.17); nothing of MLX is needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def fail(msg: str) -> None:
    print(f"transformers-mla-check.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def hf_state_dict(weights: dict, config: dict) -> dict:
    """mlx-lm's sanitized names and layouts -> transformers' GlmMoeDsa state dict."""
    import torch

    heads = config["num_attention_heads"]
    nope = config["qk_nope_head_dim"]
    v_dim = config["v_head_dim"]
    out = {}
    for name, t in weights.items():
        if name.endswith(".embed_q.weight"):
            prefix = name[: -len(".embed_q.weight")]
            embed_q = t  # [heads, kv_lora, nope]
            unembed = weights[f"{prefix}.unembed_out.weight"]  # [heads, v, kv_lora]
            kv_b = torch.cat([embed_q.transpose(-1, -2), unembed], dim=1)
            kv_lora = embed_q.shape[1]
            assert kv_b.shape == (heads, nope + v_dim, kv_lora), kv_b.shape
            out[f"{prefix}.kv_b_proj.weight"] = kv_b.reshape(heads * (nope + v_dim), kv_lora)
        elif name.endswith(".unembed_out.weight"):
            continue
        elif ".mlp.switch_mlp." in name:
            prefix = name.split(".mlp.switch_mlp.")[0]
            part = name.split(".mlp.switch_mlp.")[1]
            if part == "gate_proj.weight":
                up = weights[f"{prefix}.mlp.switch_mlp.up_proj.weight"]
                out[f"{prefix}.mlp.experts.gate_up_proj"] = torch.cat([t, up], dim=1)
            elif part == "down_proj.weight":
                out[f"{prefix}.mlp.experts.down_proj"] = t
            elif part != "up_proj.weight":
                fail(f"unexpected expert tensor {name}")
        else:
            out[name] = t
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", action="append", required=True)
    ap.add_argument("--prefill", type=int, required=True)
    ap.add_argument("--ours", action="append", required=True)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--json")
    a = ap.parse_args()
    if len(a.ours) != len(a.tokens):
        fail("give one --ours file per --tokens row")

    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
    from transformers.cache_utils import DynamicCache

    torch.manual_seed(0)
    rows = [[int(t) for t in r.split(",") if t] for r in a.tokens]
    if len({len(r) for r in rows}) != 1:
        fail("rows must have the same length")
    total = len(rows[0])
    if not 0 < a.prefill <= total:
        fail(f"--prefill {a.prefill} for rows of {total} tokens")

    model_dir = Path(a.model)
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "glm_moe_dsa":
        fail(f"{model_dir}/config.json: model_type {config.get('model_type')!r}, expected glm_moe_dsa")
    weights = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    if any(t.dtype != torch.float32 for t in weights.values()):
        fail("the weights must be float32 (synth --dtype f32, no --bits)")

    hf_config = GlmMoeDsaConfig(**config)
    hf_config._attn_implementation = "eager"
    model = GlmMoeDsaForCausalLM(hf_config).to(torch.float32).eval()
    state = hf_state_dict(weights, config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Buffers transformers makes itself (RoPE tables) are not in a checkpoint.
    missing = [m for m in missing if "rotary_emb" not in m]
    if missing or unexpected:
        fail(f"state dict: missing {missing[:8]}, unexpected {unexpected[:8]}")
    for layer in model.model.layers:
        if layer.self_attn.indexer is not None:
            layer.self_attn.indexer.k_norm.eps = 1e-5

    ids = torch.tensor(rows, dtype=torch.long)
    cache = DynamicCache(config=hf_config)
    outs = []
    with torch.no_grad():
        mask = torch.ones((len(rows), a.prefill), dtype=torch.long)
        r = model(input_ids=ids[:, : a.prefill], attention_mask=mask, past_key_values=cache, use_cache=True)
        outs.append(r.logits)
        for t in range(a.prefill, total):
            mask = torch.ones((len(rows), t + 1), dtype=torch.long)
            r = model(input_ids=ids[:, t : t + 1], attention_mask=mask, past_key_values=cache, use_cache=True)
            outs.append(r.logits)
    theirs = torch.cat(outs, dim=1).float()

    shared = [i for i, t in enumerate(hf_config.indexer_types) if t == "shared"]
    report = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "model": str(model_dir),
        "prefill": a.prefill,
        "tokens": total,
        "index_topk": config["index_topk"],
        "shared_indexer_layers": shared,
        "tolerance": a.tolerance,
        "rows": [],
    }
    ok = True
    for i, f in enumerate(a.ours):
        ours = load_file(f)["logits"].float()
        th = theirs[i]
        if ours.shape != th.shape:
            fail(f"{f}: shape {tuple(ours.shape)}, transformers {tuple(th.shape)}")
        diff = ours - th
        per_pos = diff.norm(dim=-1) / th.norm(dim=-1)
        rel = (diff.norm() / th.norm()).item()
        agree = (ours.argmax(-1) == th.argmax(-1)).float().mean().item()
        row = {
            "file": f,
            "max_abs_diff": diff.abs().max().item(),
            "relative_error": rel,
            "worst_position": int(per_pos.argmax().item()),
            "worst_position_relative_error": per_pos.max().item(),
            "argmax_agreement": agree,
        }
        report["rows"].append(row)
        ok &= rel <= a.tolerance
        print(
            f"row {i}: relative error {rel:.3e} (worst position {row['worst_position']}: "
            f"{row['worst_position_relative_error']:.3e}), max |diff| {row['max_abs_diff']:.3e}, "
            f"argmax agreement {agree:.3f}"
        )
    report["pass"] = ok
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n")
    print("PASS" if ok else f"FAIL: a row's relative error exceeds {a.tolerance}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
