#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json (+ tokenizer_config.json) for a GGUF file's tokenizer.

Used by make_all.sh so that an independent BPE implementation (the JavaScript one of
@lenml/tokenizers, a port of transformers.js) can tokenize with the demo model's vocabulary.
The golden ids it produces check mtplx-lite's GGUF-to-tokenizer construction (vocabulary,
merges, control tokens) and its mapping of `tokenizer.ggml.pre` to split rules.

The pre-tokenizer follows the model's ORIGINAL tokenizer.json (for SmolLM2, the StarCoder layout:
`Digits(individual_digits)` then `ByteLevel(use_regex)`), so the GPT-2 split runs through the JS
library's own ByteLevel code, not through the regexes mtplx-lite uses. One substitution: the
Digits step is written as `Split(\p{N}, Isolated)`. In Hugging Face's tokenizers, Digits splits
on `char::is_numeric`, which is exactly \p{N} (so ½, Ⅻ, ٣ are digits too); the JS port's Digits
uses the JavaScript `\d`, ASCII only, and would disagree with the model's real tokenizer on
such characters. (mtplx-lite's unit tests check its rules against HF's Digits + ByteLevel.)

Usage: gguf_tokenizer_json.py MODEL.gguf OUT_DIR     (needs the `gguf` PyPI package)
"""
import json
import os
import sys

from gguf import GGUFReader

# tokenizer.ggml.pre -> the pre_tokenizer block of the model family's tokenizer.json.
PRE_TOKENIZERS = {
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    },
    "gpt-2": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
}

CONTROL = 3


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return f.contents()


def main(path, out_dir):
    r = GGUFReader(path)
    model = field(r, "tokenizer.ggml.model")
    if model != "gpt2":
        sys.exit(f"only byte-level BPE (gpt2) vocabularies are supported, not {model!r}")
    pre = field(r, "tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
        sys.exit(f"no tokenizer.json pre-tokenizer known for {pre!r}")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    bos = field(r, "tokenizer.ggml.bos_token_id")
    eos = field(r, "tokenizer.ggml.eos_token_id")
    add_bos = bool(field(r, "tokenizer.ggml.add_bos_token"))
    template = field(r, "tokenizer.chat_template")

    vocab = {t: i for i, t in enumerate(tokens)}
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, t in enumerate(tokens) if types[i] == CONTROL
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": list(merges)},
    }
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "add_bos_token": add_bos,
        "bos_token": tokens[bos] if bos is not None else None,
        "eos_token": tokens[eos] if eos is not None else None,
        "clean_up_tokenization_spaces": False,
        "chat_template": template,
    }
    os.makedirs(out_dir, exist_ok=True)
    for name, obj in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
