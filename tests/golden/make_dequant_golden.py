#!/usr/bin/env python3
"""Golden vectors for the dequantization kernels (src/backend/cpu/dequant*.rs).

For each type this writes `tests/data/dequant/<TYPE>.bin` (the raw ggml block bytes of one row)
and `<TYPE>.json` (the reference dequantized values as f32 bit patterns, from the `gguf` PyPI
package, an implementation independent of ours).

F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0 are quantized from a deterministic input with `gguf.quants.quantize`.
The `gguf` package cannot quantize the K-quants (NotImplementedError), so for Q4_K/Q5_K/Q6_K the
blocks are deterministic random bytes with finite f16 super-block scales, and only
`gguf.quants.dequantize` is used: that still checks every bit of the layout.

Run from the repository root: python3 tests/golden/make_dequant_golden.py
"""
import importlib.metadata
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "dequant")
SEED = 20261129

# Block lengths and the byte offsets of the f16 scales inside a block, per ggml-common.h.
K_TYPES = {
    "Q4_K": (144, [0, 2]),  # d, dmin, scales[12], qs[128]
    "Q5_K": (176, [0, 2]),  # d, dmin, scales[12], qh[32], qs[128]
    "Q6_K": (210, [208]),  # ql[128], qh[64], scales[16], d
}


def input_values(rng, n):
    x = (rng.standard_normal(n) * 0.7).astype(np.float32)
    x[:32] = 0.0  # an all-zero block: the scale is 0 and nothing may become NaN
    x[40] = 3.5  # outliers set the block scale
    x[70] = -4.25
    x[100:132] = 0.125  # a constant block (Q4_1: the range is 0)
    return x


def write(name, raw: bytes, ref: np.ndarray):
    ref = np.ascontiguousarray(ref, dtype=np.float32).reshape(-1)
    with open(os.path.join(OUT, f"{name}.bin"), "wb") as f:
        f.write(raw)
    doc = {
        "type": name,
        "n": int(ref.size),
        "bytes": len(raw),
        "generator": "tests/golden/make_dequant_golden.py, gguf " + importlib.metadata.version("gguf"),
        "bits": [int(b) for b in ref.view(np.uint32)],
    }
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {ref.size} values, {len(raw)} bytes")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(SEED)
    n = 256  # 8 blocks of 32; a whole number of blocks for every type here
    x = input_values(rng, n)
    for name in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0"]:
        xin = x.copy()
        if name in ("F16", "BF16"):
            # Special values: signed zero, the largest f16, subnormals, infinities, a quiet NaN.
            xin[0:8] = np.array([-0.0, 65504.0, 6e-8, -3e-5, np.inf, -np.inf, np.nan, 1e-40], dtype=np.float32)
        q = quants.quantize(xin.reshape(1, n), T[name])
        raw = np.ascontiguousarray(q).tobytes()
        ref = quants.dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(1, -1), T[name])
        write(name, raw, ref)
    for name, (block_bytes, f16_offsets) in K_TYPES.items():
        nb = 3
        blocks = rng.integers(0, 256, size=(nb, block_bytes), dtype=np.uint8)
        for b in range(nb):
            for off in f16_offsets:
                d = np.float16(rng.standard_normal() * 0.01)
                blocks[b, off : off + 2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
        raw = blocks.tobytes()
        ref = quants.dequantize(blocks.reshape(1, -1), T[name])
        write(name, raw, ref)


if __name__ == "__main__":
    main()
