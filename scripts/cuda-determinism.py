"""Is MLX deterministic on this device at gemma4-26b-a4b's prefill shapes?

Evaluates each op of the MoE layer (and a few others) several times on the same inputs
and counts the distinct results, byte for byte; then runs mlx-lm's own Gemma 4 model
(random 4-bit weights, a few layers) twice on one long prompt. Used to locate the
nondeterminism that keeps `parity --full gemma4-26b-a4b` from passing on CUDA
(BENCHMARKS.md). Needs only mlx (and mlx-lm for the last part).

    python3 scripts/cuda-determinism.py [--tokens 1027] [--reps 6] [--layers 6]
"""

import argparse
import hashlib
import json
import sys
import time

import mlx.core as mx
import numpy as np


def digest(a):
    mx.eval(a)
    if a.dtype == mx.bfloat16:
        a = a.view(mx.uint16)
    return hashlib.sha256(np.array(a).tobytes()).hexdigest()[:16]


def distinct(name, fn, reps, results):
    start = time.time()
    try:
        seen = [digest(fn()) for _ in range(reps)]
    except Exception as err:  # an op this backend lacks: say so and go on
        print(f"{name:<58} not run: {err}", flush=True)
        results[name] = {"error": str(err)}
        return None
    n = len(set(seen))
    line = f"{name:<58} {n} distinct of {reps}  ({time.time() - start:.1f} s)"
    print(line, flush=True)
    results[name] = {"distinct": n, "reps": reps}
    return n


def ops(t, reps, results):
    h, e, k, f, vocab = 2816, 128, 8, 704, 262144
    dt = mx.bfloat16
    mx.random.seed(0)
    x = (mx.random.normal((t, h)) * 0.5).astype(dt)

    def q(shape, bits):
        w = (mx.random.normal(shape) * shape[-1] ** -0.5).astype(dt)
        return mx.quantize(w, group_size=64, bits=bits)

    rw, rs, rb = q((e, h), 8)
    scores = mx.quantized_matmul(x, rw, rs, rb, True, 64, 8)
    mx.eval(scores)
    distinct("router quantized_matmul 8-bit [T,2816]x[128]", lambda: mx.quantized_matmul(x, rw, rs, rb, True, 64, 8), reps, results)
    distinct("argpartition [T,128] kth=-8", lambda: mx.argpartition(scores, kth=-k, axis=-1), reps, results)
    distinct("  its top-8 as sets (sorted ids)", lambda: mx.sort(mx.argpartition(scores, kth=-k, axis=-1)[..., -k:], axis=-1), reps, results)
    distinct("argsort [T,128], last 8 (a deterministic top-8?)", lambda: mx.argsort(scores, axis=-1)[..., -k:], reps, results)
    idx = mx.argpartition(scores, kth=-k, axis=-1)[..., -k:]
    mx.eval(idx)
    flat = idx.flatten()
    distinct("argsort [T*8] expert ids", lambda: mx.argsort(flat), reps, results)
    order = mx.argsort(flat)
    mx.eval(order)
    distinct("argsort of the order (inverse)", lambda: mx.argsort(order), reps, results)
    xe = x[:, None, None, :]
    xs = xe.flatten(0, -3)[order // k]
    si = flat[order]
    mx.eval(xs, si)
    uw, us, ub = q((e, f, h), 4)
    dw, ds, db = q((e, h, f), 4)
    distinct("gather_qmm up, sorted [T*8,1,2816]", lambda: mx.gather_qmm(xs, uw, us, ub, rhs_indices=si, transpose=True, group_size=64, bits=4, sorted_indices=True), reps, results)
    up = mx.gather_qmm(xs, uw, us, ub, rhs_indices=si, transpose=True, group_size=64, bits=4, sorted_indices=True)
    mx.eval(up)
    distinct("gather_qmm down, sorted [T*8,1,704]", lambda: mx.gather_qmm(up, dw, ds, db, rhs_indices=si, transpose=True, group_size=64, bits=4, sorted_indices=True), reps, results)
    distinct("gather_qmm up, unsorted [T,1,1,2816] idx [T,8]", lambda: mx.gather_qmm(xe, uw, us, ub, rhs_indices=idx, transpose=True, group_size=64, bits=4, sorted_indices=False), reps, results)
    fw = (mx.random.normal((e, f, h)) * h ** -0.5).astype(dt)
    distinct("gather_mm bf16 up, sorted", lambda: mx.gather_mm(xs, fw.swapaxes(-1, -2), rhs_indices=si, sorted_indices=True), reps, results)
    mw, ms, mb = q((2112, h), 4)
    distinct("quantized_matmul 4-bit dense MLP [T,2816]x[2112]", lambda: mx.quantized_matmul(x, mw, ms, mb, True, 64, 4), reps, results)
    ew, es, eb = q((vocab, h), 4)
    distinct("quantized_matmul 4-bit head [T,2816]x[262144]", lambda: mx.quantized_matmul(x, ew, es, eb, True, 64, 4), reps, results)
    y = mx.random.normal((t, k, h)).astype(dt)
    distinct("sum over experts [T,8,2816] axis -2", lambda: y.sum(-2), reps, results)
    distinct("rms_norm [T,2816]", lambda: mx.fast.rms_norm(x, mx.ones((h,), dt), 1e-6), reps, results)
    for heads, kv, d in ((16, 8, 256), (16, 2, 512)):
        qq = mx.random.normal((1, heads, t, d)).astype(dt)
        kk = mx.random.normal((1, kv, t, d)).astype(dt)
        vv = mx.random.normal((1, kv, t, d)).astype(dt)
        distinct(f"sdpa causal heads {heads}/{kv} dim {d}", lambda: mx.fast.scaled_dot_product_attention(qq, kk, vv, scale=1.0, mask="causal"), reps, results)
        pos = mx.arange(t)
        window = (pos[:, None] >= pos[None, :]) & (pos[:, None] - pos[None, :] < 1024)
        distinct(f"sdpa bool mask heads {heads}/{kv} dim {d}", lambda: mx.fast.scaled_dot_product_attention(qq, kk, vv, scale=1.0, mask=window), reps, results)


def model(t, reps, layers, results):
    from mlx_lm.models import gemma4_text
    import mlx.nn as nn

    cfg = json.load(open("generated/models/gemma4-26b-a4b/config.json"))
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "quantization"}
    cfg["num_hidden_layers"] = layers
    cfg["layer_types"] = cfg["layer_types"][: layers - 1] + ["full_attention"]
    args = gemma4_text.ModelArgs.from_dict(cfg)
    mx.random.seed(1)
    m = gemma4_text.Model(args)
    m.set_dtype(mx.bfloat16)
    nn.quantize(m, group_size=64, bits=4, class_predicate=lambda p, mod: {"group_size": 64, "bits": 8} if p.endswith("router.proj") else hasattr(mod, "to_quantized"))
    mx.eval(m.parameters())
    tokens = mx.array(np.random.default_rng(2).integers(0, 262144, (1, t)), dtype=mx.int32)
    distinct(f"mlx-lm gemma4 26b-a4b shapes, {layers} layers, prefill {t}, logits", lambda: m(tokens, cache=m.make_cache()), reps, results)
    localize(m, tokens, reps, results)
    hooks = {}

    def run_layers():
        h = m.model.embed_tokens(tokens) * (args.hidden_size ** 0.5)
        outs = []
        cache = m.make_cache()
        masks = m.model._make_masks(h, cache)
        for i, layer in enumerate(m.model.layers):
            h, _, _ = layer(h, masks[i], cache[i])
            outs.append(h)
        return outs

    try:
        per = [[digest(o) for o in run_layers()] for _ in range(reps)]
        for i in range(layers):
            n = len({p[i] for p in per})
            print(f"  layer {i} output: {n} distinct of {reps}", flush=True)
            hooks[f"layer {i}"] = n
    except Exception as err:  # the layer signature differs across mlx-lm versions
        print(f"  per-layer look skipped: {err}", flush=True)
    results["per_layer"] = hooks


def localize(m, tokens, reps, results):
    """Where the model's nondeterminism enters: one graph for the whole prefill against
    an evaluation after every layer, and each layer's MoE and attention halves alone."""
    inner = m.model

    def forward(sync):
        cache = m.make_cache()
        h = inner.embed_tokens(tokens) * inner.embed_scale
        masks = inner._make_masks(h, cache)
        outs = []
        for i, layer in enumerate(inner.layers):
            h, _, _ = layer(h, masks[i], cache[i])
            if sync:
                mx.eval(h)
            outs.append(h)
        logits = inner.embed_tokens.as_linear(inner.norm(h))
        mx.eval(logits, *outs)
        return outs, logits

    for sync in (False, True):
        runs = [forward(sync) for _ in range(reps)]
        tag = "eval after every layer" if sync else "one graph"
        layers = [len({digest(r[0][i]) for r in runs}) for i in range(len(inner.layers))]
        logits = len({digest(r[1]) for r in runs})
        print(f"{tag:<24} distinct per layer {layers}, logits {logits} of {reps}", flush=True)
        results[f"localize {tag}"] = {"layers": layers, "logits": logits}
    h = (inner.embed_tokens(tokens) * inner.embed_scale)
    mx.eval(h)
    layer = inner.layers[0]
    x = layer.pre_feedforward_layernorm_2(h)
    distinct("layer 0 router + experts alone (one graph)", lambda: layer.experts(x, *layer.router(h)), reps, results)
    distinct("layer 0 dense MLP alone", lambda: layer.mlp(layer.pre_feedforward_layernorm(h)), reps, results)
    mask = inner._make_masks(h, m.make_cache())[0]
    distinct("layer 0 attention alone (fresh cache)", lambda: layer.self_attn(layer.input_layernorm(h), mask, m.make_cache()[0])[0], reps, results)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=1027)
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--json")
    p.add_argument("--skip-ops", action="store_true")
    p.add_argument("--skip-model", action="store_true")
    a = p.parse_args()
    print(f"mlx {mx.__version__} on {mx.default_device()}", flush=True)
    results = {}
    if not a.skip_ops:
        ops(a.tokens, a.reps, results)
    if not a.skip_model:
        model(a.tokens, a.reps, a.layers, results)
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
