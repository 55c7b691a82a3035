#!/usr/bin/env python3
"""Reference outputs of llama.cpp on the demo model, for tests/demo_model_reference.rs.

llama.cpp is the independent implementation: built from the source vendored in the
`llama-cpp-python==0.3.36` sdist on PyPI (cmake, -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=ON), and
driven through that sdist's own Python bindings:

  pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 && tar xzf ...
  cmake -S vendor/llama.cpp -B build -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=ON && cmake --build build --target llama
  PYTHONPATH=<sdist> LLAMA_CPP_LIB_PATH=<build>/bin python3 tests/golden/make_llama_cpp_reference.py MODEL.gguf

Writes tests/data/reference/smollm2_llama_cpp.json: token ids of varied texts (llama.cpp's
tokenizer), greedy continuations of three prompts, and teacher-forced top-10 logits per position.
"""
import json, os, sys
import numpy as np
from llama_cpp import Llama

MODEL = sys.argv[1]
OUT = os.path.join(os.path.dirname(__file__), "..", "data", "reference", "smollm2_llama_cpp.json")

TOKENIZE = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces and\ttabs\nnewlines\n\n\ntriple",
    "Numbers: 3.14159, 1,000,000 and 2026-11-29T18:33:35Z",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Café naïve résumé — “quotes” and ‘single’…",
    "日本語のテキストと中文文本 및 한국어",
    "emoji: 🚀🔥👍🏽 and flags 🇫🇷",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "don't won't I'm you're we've they'll HELLO World",
    "https://example.com/path?query=1&b=2#frag",
    "   ",
]

PROMPTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the sea,",
    "def quicksort(arr):\n",
]

TEACHER_TEXT = (
    "The history of computing is a story of ideas built on ideas. In the 1840s Ada Lovelace wrote what many "
    "consider the first program, for Charles Babbage's Analytical Engine, a machine that was never finished. "
    "A century later, Alan Turing described a universal machine that could simulate any other, and during the "
    "war engineers at Bletchley Park built Colossus to break codes. After the war, stored-program computers such "
    "as the EDSAC and the Manchester Baby ran their first programs.\n\n"
    "Here is a small Python function that computes a running mean:\n\n"
    "def running_mean(xs):\n    total = 0.0\n    out = []\n    for i, x in enumerate(xs, 1):\n        total += x\n"
    "        out.append(total / i)\n    return out\n\n"
    "Q: What is 12 times 12?\nA: 144.\nQ: Name three primary colors.\nA: Red, yellow and blue.\n"
    "Le chat est sur la table, et le chien dort dans le jardin. Die Sonne scheint heute sehr hell."
)


def main():
    llm = Llama(model_path=MODEL, n_ctx=1024, n_batch=512, logits_all=True, n_threads=2, verbose=False)
    out = {"model_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
           "reference": "llama.cpp vendored in llama-cpp-python 0.3.36, CPU, n_threads=2"}
    out["tokenize"] = [{"text": t, "ids": llm.tokenize(t.encode(), add_bos=False, special=True)} for t in TOKENIZE]

    greedy = []
    for p in PROMPTS:
        toks = llm.tokenize(p.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(toks)
        gen, margins = [], []
        for _ in range(32):
            row = llm.scores[llm.n_tokens - 1]
            top2 = np.sort(row)[-2:]
            nxt = int(np.argmax(row))
            gen.append(nxt)
            margins.append(round(float(top2[1] - top2[0]), 4))
            llm.eval([nxt])
        greedy.append({"prompt": p, "prompt_ids": toks, "greedy_ids": gen, "top2_margins": margins})
    out["greedy"] = greedy

    toks = llm.tokenize(TEACHER_TEXT.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(toks)
    scores = np.array(llm.scores[: len(toks)])
    top = []
    for row in scores:
        idx = np.argsort(-row)[:10]
        top.append({"ids": [int(i) for i in idx], "logits": [round(float(row[i]), 4) for i in idx]})
    out["teacher_forced"] = {"text": TEACHER_TEXT, "ids": toks, "top10": top}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, ensure_ascii=False)
    print("wrote", OUT, "teacher-forced positions:", len(toks))


if __name__ == "__main__":
    main()
