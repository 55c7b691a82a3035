"""Context overflow against a server started with `--ctx 64`: 400 context_length_exceeded,
with both numbers (the context and what was asked) in the message."""
import os

import openai
from openai import OpenAI

client = OpenAI(base_url=os.environ["MTPLX_BASE_URL"] + "/v1", api_key="unused", max_retries=0)
CTX = int(os.environ["MTPLX_CTX"])

served = client.models.list().data[0]
assert served.model_extra["context_length"] == CTX, served

# A short prompt asking for more than the context holds.
try:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1000)
    raise AssertionError("accepted")
except openai.BadRequestError as e:
    assert e.code == "context_length_exceeded", e.body
    assert e.body["param"] == "max_tokens", e.body
    assert str(CTX) in e.body["message"] and "1000" in e.body["message"], e.body

# A prompt longer than the context on its own.
long = " ".join(["word"] * 200)
try:
    client.completions.create(model="m", prompt=long)
    raise AssertionError("accepted")
except openai.BadRequestError as err:
    assert err.code == "context_length_exceeded", err.body
    assert err.body["param"] == "prompt", err.body
    msg = err.body["message"]
    numbers = [int(w) for w in msg.replace(",", " ").replace("(", " ").replace(")", " ").split() if w.isdigit()]
    assert CTX in numbers and any(n > CTX for n in numbers), msg

# Within the context it answers, and a request without max_tokens stops at the context's end.
ok = client.completions.create(model="m", prompt="Once upon a time", temperature=0)
assert ok.usage.total_tokens <= CTX, ok.usage
print("context ok:", msg)
