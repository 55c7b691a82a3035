"""Streamed chat through the official `openai` package: role first, content deltas, one finish
chunk, a usage chunk (stream_options.include_usage), then [DONE] (which ends the iterator)."""
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["MTPLX_BASE_URL"] + "/v1", api_key="unused")
messages = [{"role": "user", "content": "Write one sentence about the sea."}]
MAX = 12

chunks = list(client.chat.completions.create(
    model="demo", messages=messages, max_tokens=MAX, temperature=0,
    stream=True, stream_options={"include_usage": True},
))
assert len(chunks) >= 4, chunks
assert all(c.object == "chat.completion.chunk" for c in chunks), chunks
assert len({c.id for c in chunks}) == 1, "every chunk of one answer has the same id"

first = chunks[0]
assert first.choices[0].delta.role == "assistant", first

usage_chunk = chunks[-1]
assert usage_chunk.choices == [] and usage_chunk.usage is not None, usage_chunk
u = usage_chunk.usage
assert u.total_tokens == u.prompt_tokens + u.completion_tokens and 0 < u.completion_tokens <= MAX, u

body = chunks[:-1]
finishes = [c for c in body if c.choices[0].finish_reason is not None]
assert len(finishes) == 1 and finishes[0] is body[-1], "exactly one finish chunk, the last one before usage"
reason = finishes[0].choices[0].finish_reason
assert reason in ("stop", "length"), reason
assert all(c.usage is None for c in body), "usage only in the usage chunk"
text = "".join(c.choices[0].delta.content or "" for c in body)
deltas = [c for c in body if c.choices[0].delta.content]
assert text and deltas, "content deltas"
assert finishes[0].model_extra["mtplx_stats"]["completion_tokens"] == u.completion_tokens

# The same request answered whole says the same thing (greedy decoding).
whole = client.chat.completions.create(model="demo", messages=messages, max_tokens=MAX, temperature=0)
assert whole.choices[0].message.content == text, (whole.choices[0].message.content, text)
assert whole.choices[0].finish_reason == reason
assert whole.usage.completion_tokens == u.completion_tokens and whole.usage.prompt_tokens == u.prompt_tokens

# Without include_usage, no usage chunk.
plain = list(client.chat.completions.create(model="demo", messages=messages, max_tokens=3, temperature=0, stream=True))
assert all(c.usage is None and len(c.choices) == 1 for c in plain), plain
assert plain[-1].choices[0].finish_reason == "length", plain[-1]

print(f"stream ok: {len(deltas)} content deltas, {text!r}, finish_reason={reason}")
