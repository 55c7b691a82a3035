"""Legacy completions through the official `openai` package, whole and streamed."""
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["MTPLX_BASE_URL"] + "/v1", api_key="unused")
PROMPT = "The capital of France is"
MAX = 8

whole = client.completions.create(model="demo", prompt=PROMPT, max_tokens=MAX, temperature=0)
assert whole.object == "text_completion", whole
c = whole.choices[0]
assert c.text, "empty completion"
assert c.finish_reason in ("stop", "length"), c.finish_reason
u = whole.usage
assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= MAX and u.total_tokens == u.prompt_tokens + u.completion_tokens, u
stats = whole.model_extra["mtplx_stats"]
assert stats["route"] == "/v1/completions" and stats["completion_tokens"] == u.completion_tokens, stats
assert stats["prompt_tokens"] == u.prompt_tokens, stats

chunks = list(client.completions.create(
    model="demo", prompt=PROMPT, max_tokens=MAX, temperature=0, stream=True, stream_options={"include_usage": True}
))
assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == u.completion_tokens, chunks[-1]
body = chunks[:-1]
text = "".join(ch.choices[0].text for ch in body)
assert text == c.text, (text, c.text)
finishes = [ch.choices[0].finish_reason for ch in body if ch.choices[0].finish_reason]
assert finishes == [c.finish_reason], finishes

print(f"completions ok: {PROMPT!r} -> {c.text!r}")
