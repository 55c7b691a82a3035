"""Log-probabilities: chat `logprobs` + `top_logprobs`, completions' integer `logprobs`."""
import math
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["MTPLX_BASE_URL"] + "/v1", api_key="unused")
MAX = 6

r = client.chat.completions.create(
    model="demo", messages=[{"role": "user", "content": "Say hello."}], max_tokens=MAX, temperature=0,
    logprobs=True, top_logprobs=3,
)
content = r.choices[0].logprobs.content
# One entry per token of text; usage also counts the end-of-sequence token when the model ended.
ended = r.choices[0].finish_reason == "stop"
assert len(content) == r.usage.completion_tokens - ended, (len(content), r.usage)
for e in content:
    assert e.logprob <= 0 and math.isfinite(e.logprob), e
    assert e.bytes == list(e.token.encode("utf-8")), e
    assert len(e.top_logprobs) == 3, e
    tops = [t.logprob for t in e.top_logprobs]
    assert tops == sorted(tops, reverse=True), tops
    # Greedy decoding picks the most likely token.
    assert e.top_logprobs[0].token == e.token and abs(tops[0] - e.logprob) < 1e-4, e
assert "".join(e.token for e in content) == r.choices[0].message.content

no = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Say hello."}], max_tokens=2, temperature=0)
assert no.choices[0].logprobs is None, no

streamed = list(client.chat.completions.create(
    model="demo", messages=[{"role": "user", "content": "Say hello."}], max_tokens=MAX, temperature=0,
    logprobs=True, top_logprobs=2, stream=True,
))
lp = [e for ch in streamed if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
assert [e.token for e in lp] == [e.token for e in content], (lp, content)
assert all(len(e.top_logprobs) == 2 for e in lp)

c = client.completions.create(model="demo", prompt="One, two, three,", max_tokens=MAX, temperature=0, logprobs=2)
l = c.choices[0].logprobs
n = c.usage.completion_tokens - (c.choices[0].finish_reason == "stop")
assert len(l.tokens) == len(l.token_logprobs) == len(l.top_logprobs) == len(l.text_offset) == n, l
assert "".join(l.tokens) == c.choices[0].text
assert all(len(alts) == 2 and max(alts.values()) <= 0 for alts in l.top_logprobs), l.top_logprobs
assert all(tok in alts and abs(alts[tok] - lp_) < 1e-4 for tok, lp_, alts in zip(l.tokens, l.token_logprobs, l.top_logprobs))
assert l.text_offset == sorted(l.text_offset) and l.text_offset[0] == 0, l.text_offset

print(f"logprobs ok: {[(e.token, round(e.logprob, 3)) for e in content]}")
