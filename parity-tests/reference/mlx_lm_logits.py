#!/usr/bin/env python3
"""Reference logits for a Gemma 4 model folder, computed by mlx-lm on the CPU.

  mlx_lm_logits.py --model DIR --tokens "1,2,3" [--tokens "4,5,6" ...]
                   --prefill K --kv float|config --out FILE.safetensors
                   [--steps-as-decode | --chunk C]

Loads DIR with mlx-lm (`mlx_lm.utils.load_model`, no tokenizer), makes the
model's own caches (`model.make_cache()`), runs tokens [0, K) of every row as
ONE prefill forward, then the remaining tokens as single-token decode steps
(the default, also spelled --steps-as-decode) or as chunks of C tokens
(--chunk C), always feeding the given tokens. Several --tokens make a batch;
all rows must have the same length.

Writes FILE with one tensor, `logits`: float32 [B, T, vocab], one row per
position (the K prefill rows, then one per later position), cast from the
model's dtype only at the end, plus string metadata (versions, the schedule,
the cache state after every forward).

--kv float: mlx-lm's caches as made (KVCache / RotatingKVCache), untouched.
--kv config: DIR/kv_config.json is applied with mlx-optiq's policy: before
every forward, each listed cache that is still float and holds tokens is
converted with `optiq.runtime.kv.rotating.quantize_cache_layer`
(KVCache -> QuantizedKVCache over the whole padded buffer; RotatingKVCache ->
RotatingQuantizedKVCache keeping offset/_idx/max_size/keep), and optiq's SDPA
dispatch for tuple K/V with cache=None (KV-sharing layers) is installed.
Only optiq's `optiq.runtime.kv` subpackage is imported: the package's own
__init__ (which registers unrelated model patches into mlx-lm) is not run.
--kv dequant: an independent, NOT bit-exact check of --kv config: the same
policy and timing, but the converted caches stay float mlx-lm caches whose K/V
are stored as dequantize(quantize(.)) with the layer's (bits, group_size), so
attention runs on mlx-lm's float path (fast SDPA) instead of quantized SDPA.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def fail(msg: str) -> None:
    print(f"mlx_lm_logits.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_rows(values: list[str]) -> list[list[int]]:
    rows = []
    for v in values:
        try:
            row = [int(t) for t in v.replace(" ", "").split(",") if t != ""]
        except ValueError:
            fail(f"--tokens {v!r}: expected comma-separated integers")
        if not row:
            fail("--tokens: empty row")
        rows.append(row)
    if len({len(r) for r in rows}) != 1:
        fail(f"--tokens rows have different lengths: {[len(r) for r in rows]}")
    return rows


def import_optiq_rotating():
    """`optiq.runtime.kv.rotating` from the installed mlx-optiq, without
    executing `optiq/__init__.py` (it imports and registers a dozen unrelated
    model patches into mlx-lm)."""
    import importlib
    import importlib.machinery
    import importlib.util
    import types

    if "optiq" not in sys.modules:
        spec = importlib.util.find_spec("optiq")
        if spec is None or not spec.submodule_search_locations:
            fail("--kv config needs mlx-optiq (pip install --no-deps mlx-optiq), which is not installed")
        pkg = types.ModuleType("optiq")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = importlib.machinery.ModuleSpec("optiq", None, is_package=True)
        pkg.__spec__.submodule_search_locations = pkg.__path__
        sys.modules["optiq"] = pkg
    return importlib.import_module("optiq.runtime.kv.rotating")


def load_kv_config(folder: Path, n_caches: int) -> dict[int, tuple[int, int]]:
    path = folder / "kv_config.json"
    if not path.exists():
        fail(f"--kv config: {path} does not exist")
    raw = json.loads(path.read_text())
    if not isinstance(raw, list):
        fail(f"{path}: expected a JSON list, got {type(raw).__name__}")
    out: dict[int, tuple[int, int]] = {}
    for entry in raw:
        idx = int(entry["layer_idx"])
        if not 0 <= idx < n_caches:
            fail(f"{path}: layer_idx {idx} is not a cache index (the model has {n_caches} caches)")
        # mlx-optiq's loader: group_size optional, default 64.
        out[idx] = (int(entry["bits"]), int(entry.get("group_size", 64)))
    return out


def fake_quant_cache(c, bits: int, group_size: int):
    """A float cache of the same class and state as `c` whose stored K/V are
    dequantize(quantize(.)) now and on every later write: the quantized cache's
    mathematics on the float path (fast SDPA), for --kv dequant."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, RotatingKVCache

    def fq(x):
        w, scales, biases = mx.quantize(x, group_size=group_size, bits=bits)
        return mx.dequantize(w, scales, biases, group_size=group_size, bits=bits)

    base = RotatingKVCache if isinstance(c, RotatingKVCache) else KVCache

    class FakeQuant(base):
        def update_and_fetch(self, keys, values):
            return super().update_and_fetch(fq(keys), fq(values))

    FakeQuant.__name__ = f"FakeQuant{base.__name__}"
    new = FakeQuant.__new__(FakeQuant)
    new.__dict__.update(c.__dict__)
    new.keys, new.values = fq(c.keys), fq(c.values)
    new.fake_bits, new.fake_group_size = bits, group_size
    mx.eval(new.keys, new.values)
    return new


def cache_info(c) -> dict:
    from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache

    name = type(c).__name__
    if name == "CacheList":
        # The MLA family's (latent + RoPE key, indexer keys) pair.
        return {"class": name, "caches": [cache_info(inner) for inner in c.caches]}
    info = {"class": name, "offset": int(c.offset)}
    keys = getattr(c, "keys", None)
    if keys is not None:
        first = keys[0] if isinstance(keys, (list, tuple)) else keys
        info["buffer"] = int(first.shape[2])
    if isinstance(c, RotatingKVCache):
        info["idx"] = int(c._idx)
        info["max_size"] = int(c.max_size)
    bits = getattr(c, "bits", None)
    if hasattr(c, "fake_bits"):
        kind = "rotating-dequant" if isinstance(c, RotatingKVCache) else "dequant"
        info["signature"] = f"kv:{kind}:{c.fake_bits}:{c.fake_group_size}"
    elif bits is not None:
        kind = "rotating-quant" if isinstance(c, RotatingKVCache) else "quant"
        info["signature"] = f"kv:{kind}:{c.bits}:{c.group_size}"
    elif isinstance(c, RotatingKVCache):
        info["signature"] = "kv:rotating"
    elif isinstance(c, (KVCache, QuantizedKVCache)):
        info["signature"] = "kv:plain"
    else:
        info["signature"] = f"kv:{name}"
    return info


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model folder (config.json, model*.safetensors)")
    p.add_argument("--tokens", action="append", required=True, help="comma-separated ids; repeat for batch rows")
    p.add_argument("--prefill", type=int, required=True, help="tokens in the first (prefill) forward")
    p.add_argument("--kv", choices=["float", "config", "dequant"], default="float")
    p.add_argument("--out", required=True)
    p.add_argument("--no-compile", action="store_true", help="mx.disable_compile(): every mx.compile'd function (swiglu, silu, ...) runs op by op")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--steps-as-decode", action="store_true", help="after the prefill, one token per forward (default)")
    mode.add_argument("--chunk", type=int, default=1, help="after the prefill, C tokens per forward")
    args = p.parse_args(argv)

    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    if args.no_compile:
        mx.disable_compile()

    import mlx
    import mlx_lm
    from mlx_lm.models.cache import QuantizedKVCache
    from mlx_lm.utils import load_model

    rows = parse_rows(args.tokens)
    total = len(rows[0])
    if not 1 <= args.prefill <= total:
        fail(f"--prefill {args.prefill} must be in 1..={total} (the row length)")
    if args.chunk < 1:
        fail("--chunk must be >= 1")

    folder = Path(args.model)
    if not (folder / "config.json").exists():
        fail(f"{folder}/config.json does not exist")
    model, config = load_model(folder)
    vocab = config.get("text_config", config).get("vocab_size", config.get("vocab_size"))
    for r in rows:
        bad = [t for t in r if not 0 <= t < vocab]
        if bad:
            fail(f"token ids {bad[:5]} outside the vocabulary (size {vocab})")

    if hasattr(model, "make_cache"):
        caches = model.make_cache()
    else:
        # Models without their own (qwen3): one KVCache per layer, as mlx-lm's
        # make_prompt_cache builds it.
        from mlx_lm.models.cache import make_prompt_cache

        caches = make_prompt_cache(model)

    rot = None
    bit_map: dict[int, tuple[int, int]] = {}
    optiq_version = ""
    if args.kv in ("config", "dequant"):
        bit_map = load_kv_config(folder, len(caches))
    if args.kv == "config":
        rot = import_optiq_rotating()
        try:
            from importlib.metadata import version

            optiq_version = version("mlx-optiq")
        except Exception:
            optiq_version = "unknown"

    def convert_caches() -> list[int]:
        """mlx-optiq's per-layer policy: listed, still float, non-empty."""
        # Re-asserts optiq's SDPA dispatcher over every loaded mlx_lm.models.*
        # module (gemma4_text is loaded by now); installs the to_quantized
        # override and the QuantizedKVCache producer registry on first call.
        rot.patch_rotating_to_quantized()
        converted = []
        for idx, c in enumerate(caches):
            if idx not in bit_map:
                continue
            if isinstance(c, (QuantizedKVCache, rot.RotatingQuantizedKVCache)):
                continue
            if getattr(c, "keys", None) is None or c.offset <= 0:
                continue
            bits, group_size = bit_map[idx]
            caches[idx] = rot.quantize_cache_layer(c, bits=bits, group_size=group_size)
            converted.append(idx)
        return converted

    def fake_convert_caches() -> list[int]:
        """The same policy for --kv dequant, with fake-quantized float caches."""
        converted = []
        for idx, c in enumerate(caches):
            if idx not in bit_map or hasattr(c, "fake_bits"):
                continue
            if getattr(c, "keys", None) is None or c.offset <= 0:
                continue
            caches[idx] = fake_quant_cache(c, *bit_map[idx])
            converted.append(idx)
        return converted

    tokens = mx.array(rows, dtype=mx.int32)
    schedule = [args.prefill]
    pos = args.prefill
    while pos < total:
        step = min(args.chunk, total - pos)
        schedule.append(step)
        pos += step

    outputs = []
    trace = []
    pos = 0
    for length in schedule:
        if args.kv == "config":
            converted = convert_caches()
        elif args.kv == "dequant":
            converted = fake_convert_caches()
        else:
            converted = []
        logits = model(tokens[:, pos : pos + length], cache=caches)
        mx.eval(logits, [c.state for c in caches])
        outputs.append(logits)
        trace.append(
            {
                "start": pos,
                "length": length,
                "converted_before": converted,
                "caches_after": [cache_info(c) for c in caches],
            }
        )
        pos += length

    logits_dtype = str(outputs[0].dtype).removeprefix("mlx.core.")
    logits = mx.concatenate(outputs, axis=1).astype(mx.float32)
    mx.eval(logits)

    metadata = {
        "format": "mlx-aot-reference-logits/1",
        "model": str(folder.resolve()),
        "tokens": json.dumps(rows),
        "prefill": str(args.prefill),
        "schedule": json.dumps(schedule),
        "kv": args.kv,
        "kv_config": json.dumps([[i, b, g] for i, (b, g) in sorted(bit_map.items())]),
        "logits_dtype": logits_dtype,
        "mlx_version": mlx.core.__version__,
        "mlx_lm_version": mlx_lm.__version__,
        "mlx_optiq_version": optiq_version,
        "device": str(mx.default_device()),
        "trace": json.dumps(trace),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # mlx appends ".safetensors" to a name lacking it, so the temporary keeps it.
    tmp = out.with_name(f".tmp-{out.stem}.safetensors")
    mx.save_safetensors(str(tmp), {"logits": logits}, metadata=metadata)
    tmp.replace(out)
    print(
        f"wrote {out}: logits {tuple(logits.shape)} (model dtype {logits_dtype}), schedule {schedule}, kv {args.kv}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
