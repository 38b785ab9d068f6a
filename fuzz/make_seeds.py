#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/<target>/.

The seeds are checked in; this script only documents where they came from and
rewrites them (run it from anywhere: `python3 fuzz/make_seeds.py`). Inputs hold
several files joined by SEPARATOR, as fuzz/src/lib.rs splits them.
"""

import json
import struct
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
SEPARATOR = b"\n--8<--\n"


def write(target, name, parts):
    out = FUZZ / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(SEPARATOR.join(parts))


# --- config_plan: the presets' config.json, with their kv_config.json when they have one.
seen = set()
for model in sorted((ROOT / "generated" / "models").iterdir()):
    config = (model / "config.json").read_bytes()
    if config not in seen:  # the float presets share their quantized twin's config
        seen.add(config)
        write("config_plan", f"{model.name}", [config])
    kv = model / "kv_config.json"
    if kv.is_file():
        write("config_plan", f"{model.name}+kv", [config, kv.read_bytes()])
write("config_plan", "tiny", [(FUZZ / "tiny" / "config.json").read_bytes()])


# --- safetensors: the tensors of fuzz/tiny/config.json, as the loader expects them.
def tiny_tensors():
    """(name, shape) of every tensor of the tiny config, in mlx-community naming."""
    h, inter, vocab, heads, kv = 8, 16, 16, 2, 1
    t = [("embed_tokens.weight", [vocab, h]), ("norm.weight", [h])]
    for i, d in enumerate([4, 8]):
        p = f"layers.{i}"
        for norm in ["input_layernorm", "post_attention_layernorm",
                     "pre_feedforward_layernorm", "post_feedforward_layernorm"]:
            t.append((f"{p}.{norm}.weight", [h]))
        t += [
            (f"{p}.self_attn.q_proj.weight", [heads * d, h]),
            (f"{p}.self_attn.o_proj.weight", [h, heads * d]),
            (f"{p}.self_attn.q_norm.weight", [d]),
            (f"{p}.self_attn.k_proj.weight", [kv * d, h]),
            (f"{p}.self_attn.k_norm.weight", [d]),
            (f"{p}.self_attn.v_proj.weight", [kv * d, h]),
            (f"{p}.mlp.gate_proj.weight", [inter, h]),
            (f"{p}.mlp.up_proj.weight", [inter, h]),
            (f"{p}.mlp.down_proj.weight", [h, inter]),
            (f"{p}.layer_scalar", [1]),
        ]
    return t


SIZES = {"BF16": 2, "F16": 2, "F32": 4, "U32": 4}


def safetensors(tensors, dtype="BF16", metadata=None, prefix="model."):
    """A whole file; `tensors` holds (name, shape) or (name, shape, dtype)."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, shape, *own in tensors:
        kind = own[0] if own else dtype
        n = SIZES[kind]
        for d in shape:
            n *= d
        header[prefix + name] = {"dtype": kind, "shape": shape,
                                 "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    # Headers are padded with spaces to 8 bytes, as the safetensors writer does.
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(offset)


tensors = tiny_tensors()
write("safetensors", "tiny-single", [b"", safetensors(tensors, metadata={"format": "mlx"})])
half = len(tensors) // 2
shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
index = {
    "metadata": {"total_size": 0},
    "weight_map": {"model." + n: shards[0 if i < half else 1]
                   for i, (n, _) in enumerate(tensors)},
}
write("safetensors", "tiny-sharded", [
    json.dumps(index, indent=2).encode(),
    safetensors(tensors[:half]),
    safetensors(tensors[half:], dtype="F32", prefix="language_model.model."),
])
# A quantized module beside the float tensors: packed U32 weight, bf16 scales and biases.
quantized = [("layers.0.mlp.gate_proj.weight", [16, 1], "U32"),
             ("layers.0.mlp.gate_proj.scales", [16, 1]),
             ("layers.0.mlp.gate_proj.biases", [16, 1])]
write("safetensors", "quantized-module", [
    b"", safetensors([t for t in tensors if not t[0].startswith("layers.0.mlp.gate")]
                     + quantized)])


# --- tokenizer: a WordLevel tokenizer (as `mlx-aot synth` writes, fewer words) with its
# tokenizer_config.json and chat template, a byte-level BPE one, and a template file.
specials = [("<pad>", 0), ("<eos>", 1), ("<bos>", 2), ("<unk>", 3),
            ("<start_of_turn>", 4), ("<end_of_turn>", 5)]
words = dict(specials)
for i in range(6, 16):
    words[f"t{i}"] = i
added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for c, i in specials]
word_level = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
    "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}},
    },
    "decoder": None,
    "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"},
}
template = ("{{ bos_token }}{% for message in messages %}"
            "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
            "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
            "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>",
                    "eos_token": {"content": "<eos>", "special": True},
                    "chat_template": template}
write("tokenizer", "wordlevel+config", [json.dumps(word_level, indent=1).encode(),
                                        json.dumps(tokenizer_config, indent=1).encode()])
write("tokenizer", "wordlevel+jinja", [json.dumps(word_level).encode(), b"",
                                       template.encode()])

byte_vocab = {}
for b in range(33, 127):
    byte_vocab[chr(b)] = len(byte_vocab)
for token in ["\u0120", "\u0120w", "or", "ld", "He", "ll", "o"]:
    byte_vocab.setdefault(token, len(byte_vocab))
bpe = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": len(byte_vocab), "content": "<bos>", "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False,
                      "special": True}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None,
              "continuing_subword_prefix": None, "end_of_word_suffix": None,
              "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": byte_vocab, "merges": ["\u0120 w", "o r", "l d", "H e", "l l"]},
}
write("tokenizer", "bpe-bytelevel", [json.dumps(bpe).encode()])
