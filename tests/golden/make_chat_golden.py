#!/usr/bin/env python3
"""Golden chat-template renderings from the reference Jinja implementation (jinja2), set up the
way Hugging Face transformers renders chat templates: an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, `raise_exception`, and `tojson`
without ASCII escaping.

Usage: make_chat_golden.py NAME SOURCE OUT.json
  SOURCE is a tokenizer_config.json (chat_template, bos_token, eos_token) or a .gguf file
  (tokenizer.chat_template and the bos/eos token texts; needs the `gguf` PyPI package).
"""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

CONVERSATIONS = [
    ([{"role": "user", "content": "Hello!"}], True),
    ([{"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2?"},
      {"role": "assistant", "content": "4."},
      {"role": "user", "content": "And 3+3?"}], True),
    ([{"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2?"},
      {"role": "assistant", "content": "4."}], False),
    ([{"role": "user", "content": "  padded text \n"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nSure."},
      {"role": "user", "content": "Thanks"}], True),
    ([{"role": "user", "content": "Café 🦀 你好 \"quotes\" {{ not a tag }}"}], True),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
      {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}], False),
]


def token_text(tok):
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def from_config(path):
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    template = cfg["chat_template"]
    if isinstance(template, list):
        named = {t["name"]: t["template"] for t in template}
        template = named.get("default", template[0]["template"])
    return template, token_text(cfg.get("bos_token")), token_text(cfg.get("eos_token"))


def from_gguf(path):
    from gguf import GGUFReader

    r = GGUFReader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    bos = r.fields.get("tokenizer.ggml.bos_token_id")
    eos = r.fields.get("tokenizer.ggml.eos_token_id")
    return (r.fields["tokenizer.chat_template"].contents(),
            tokens[bos.contents()] if bos else None,
            tokens[eos.contents()] if eos else None)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main(name, source, out):
    template, bos, eos = from_gguf(source) if source.endswith(".gguf") else from_config(source)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)
    specials = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
    cases = []
    for messages, agp in CONVERSATIONS:
        rendered = compiled.render(messages=messages, add_generation_prompt=agp, tools=None,
                                   **specials)
        cases.append({"messages": messages, "add_generation_prompt": agp, "rendered": rendered})
    golden = {
        "generator": "tests/golden/make_chat_golden.py",
        "renderer": f"jinja2 {jinja2.__version__} (transformers settings)",
        "model": name,
        "bos_token": bos,
        "eos_token": eos,
        "template": template,
        "cases": cases,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{out}: {len(cases)} conversations")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
