#!/usr/bin/env python3
"""Writes gguf_demo.json: what the independent `gguf` PyPI reader sees in the demo model, for
src/model/gguf_tests.rs to compare against. Run: python3 tests/golden/gguf_demo.py [MODEL]"""
import json, os, sys
import gguf

path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
    "MTPLX_DEMO_MODEL", os.path.expanduser("~/.cache/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf"))
r = gguf.GGUFReader(path)

scalars = {}
arrays = {}
for key, f in r.fields.items():
    if key.startswith("GGUF."):
        continue
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        items = f.contents()
        arrays[key] = {"len": len(items), "first": items[:5], "last": items[-1]}
    else:
        v = f.contents()
        scalars[key] = {"type": int(t), "value": float(v) if t in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64) else v}

tensors = [{
    "name": t.name,
    # the gguf package lists dimensions innermost first, as the file does
    "dims": [int(d) for d in t.shape],
    "type": int(t.tensor_type),
    "offset": int(t.data_offset),
    "n_bytes": int(t.n_bytes),
} for t in r.tensors]

out = {
    "version": int(r.fields["GGUF.version"].contents()),
    "kv_count": len(r.fields) - 3,
    "alignment": int(r.alignment),
    "data_offset": int(r.data_offset),
    "scalars": scalars,
    "arrays": arrays,
    "tensors": tensors,
}
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "gguf_demo.json"), "w") as fh:
    json.dump(out, fh, indent=1, ensure_ascii=False)
    fh.write("\n")
