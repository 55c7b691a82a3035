#!/usr/bin/env python3
"""Decoding under a JSON schema against free text, with and without drafts, in one run.

    python3 benches/structured_decode.py [--threads 2] [--rounds 3] [--max-tokens 160]
        [--modes none,ngram,auto] [--server-args "--draft auto --depth auto"]

Starts mtplx-lite ($MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite) on the demo model and
sends each prompt once per (format, draft mode) per round, taking turns, one request at a time,
at temperature 0: the format is free text or `response_format: json_schema` with the schema
below. Per format and mode it prints the decode tokens/s (the server's own records, summed over
the requests), the ratio of the schema's rate to free text's at the same mode (the grammar's
cost; the goal is at most 1.1x slower, i.e. a ratio of at least 0.91), and the ratio of each
mode to no drafting at the same format (what drafts pay inside JSON), with the acceptance.
It checks that every answer under the schema parses and that each mode gave the same text.
Only the standard library is used.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from long_prompt_interference import MODEL, binary, wait_healthy  # noqa: E402
from speculative_vs_plain import decode_rate, post_chat, records  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "cities": {
            "type": "array",
            "maxItems": 8,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 40},
                    "country": {"type": "string", "maxLength": 40},
                    "population": {"type": "integer", "minimum": 0, "maximum": 100000000},
                },
                "required": ["name", "country", "population"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["cities"],
    "additionalProperties": False,
}

TEXT = (
    "Paris, the capital of France, has about 2,100,000 inhabitants. Lyon, also in France, has "
    "about 520,000. Berlin, Germany's capital, has 3,700,000; Munich has 1,500,000 and Hamburg "
    "1,900,000. Madrid in Spain has 3,300,000 and Barcelona 1,600,000. Rome, Italy, has 2,800,000."
)

PROMPTS = [
    "List every city in this text with its country and population as JSON.\n\n" + TEXT,
    "Give the cities of this text as a JSON object with a list of cities, each with name, "
    "country and population.\n\n" + TEXT,
    "Return JSON: for each city named below, its name, country and population.\n\n" + TEXT,
]

FORMATS = {
    "text": None,
    "schema": {"type": "json_schema", "json_schema": {"name": "cities", "schema": SCHEMA, "strict": True}},
}


def ask(port, prompt, fmt, mode, max_tokens):
    extra = {"mtplx": {"draft": mode}}
    if FORMATS[fmt]:
        extra["response_format"] = FORMATS[fmt]
    v = post_chat(port, prompt, max_tokens, 0.0, **extra)
    text = v["choices"][0]["message"]["content"]
    if FORMATS[fmt] and v["choices"][0]["finish_reason"] == "stop":
        json.loads(text)  # an answer the grammar ended must parse
    return v["id"], text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--modes", default="none,ngram,auto")
    ap.add_argument("--server-args", default="--draft auto --depth auto")
    ap.add_argument("--port", type=int, default=8141)
    a = ap.parse_args()
    modes = a.modes.split(",")
    args = [binary(), "--listen", f"127.0.0.1:{a.port}", "--threads", str(a.threads), "--model", MODEL]
    proc = subprocess.Popen(args + a.server_args.split(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(a.port, proc)
        for fmt in FORMATS:  # warm-up: the grammar vocabulary and first-touch costs stay out
            ask(a.port, PROMPTS[0], fmt, "none", 8)
        ids = {(f, m): [] for f in FORMATS for m in modes}
        texts = {}
        for _ in range(a.rounds):
            for i, p in enumerate(PROMPTS):
                for fmt in FORMATS:
                    for m in modes:
                        rid, text = ask(a.port, p, fmt, m, a.max_tokens)
                        ids[(fmt, m)].append(rid)
                        texts.setdefault((i, fmt), set()).add(text)
        recs = records(a.port)
    finally:
        proc.terminate()
        proc.wait()
    rate = {k: decode_rate([recs[r] for r in v if r in recs]) for k, v in ids.items()}
    print(f"threads {a.threads}, temperature 0, {a.rounds} rounds, server args: {a.server_args}")
    print(f"{'format':7} {'mode':6} {'decode tok/s':>12} {'vs text':>8} {'vs none':>8} {'accept':>7} {'tok/verify':>10}")
    for fmt in FORMATS:
        for m in modes:
            rs = [recs[r] for r in ids[(fmt, m)] if r in recs]
            drafted = sum(r["drafted_tokens"] for r in rs)
            accepted = sum(r["accepted_tokens"] for r in rs)
            calls = sum(r["verify_calls"] for r in rs)
            vs_text = rate[(fmt, m)] / rate[("text", m)] if rate[("text", m)] else 0.0
            vs_none = rate[(fmt, m)] / rate[(fmt, modes[0])] if rate[(fmt, modes[0])] else 0.0
            acc = f"{accepted / drafted:.2f}" if drafted else "-"
            per = f"{(accepted + calls) / calls:.2f}" if calls else "-"
            print(f"{fmt:7} {m:6} {rate[(fmt, m)]:12.1f} {vs_text:8.2f} {vs_none:8.2f} {acc:>7} {per:>10}")
    same = all(len(t) == 1 for t in texts.values())
    print("every mode gave the same text per prompt and format" if same else "MODES DISAGREE on some prompt")


if __name__ == "__main__":
    main()
