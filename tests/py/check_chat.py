"""Non-streamed chat through the official `openai` package: the answer, its usage, and the
`mtplx_stats` record it carries. Run by tests/openai_client.rs with MTPLX_BASE_URL set."""
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["MTPLX_BASE_URL"] + "/v1", api_key="unused")

# The record fields DESIGN.md promises in every per-request record.
RECORD_FIELDS = [
    "request_id", "timestamp", "route", "status", "prompt_tokens", "completion_tokens",
    "ttft_s", "ttlt_s", "tok_s", "decode_tok_s", "prefill_tok_s", "accept_rate", "mtp_depth",
    "drafted_tokens", "accepted_tokens", "verify_calls", "accepted_by_depth",
    "session_prompt_prefix_commit", "session_postcommit_snapshot",
]

models = client.models.list().data
assert len(models) == 1, models
served = models[0]
assert served.owned_by and served.created > 0, served
assert served.model_extra["context_length"] > 0, served

MAX = 8
resp = client.chat.completions.create(
    model="any-name-is-served",
    messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name three colours."},
    ],
    max_tokens=MAX,
    temperature=0,
    extra_body={"an_unknown_field": {"is": "ignored"}},
)
assert resp.object == "chat.completion", resp
assert resp.id and resp.created > 0, resp
assert resp.model == served.id, (resp.model, served.id)
assert len(resp.choices) == 1
choice = resp.choices[0]
assert choice.message.role == "assistant"
assert choice.message.content, "empty answer"
assert choice.finish_reason in ("stop", "length"), choice.finish_reason
u = resp.usage
assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= MAX, u
assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
if choice.finish_reason == "length":
    assert u.completion_tokens == MAX, u

stats = resp.model_extra["mtplx_stats"]
missing = [f for f in RECORD_FIELDS if f not in stats]
assert not missing, f"mtplx_stats lacks {missing}: {stats}"
assert stats["request_id"] == resp.id, (stats["request_id"], resp.id)
assert stats["route"] == "/v1/chat/completions", stats
assert stats["prompt_tokens"] == u.prompt_tokens and stats["completion_tokens"] == u.completion_tokens, (stats, u)
assert stats["status"] == {"length": "length", "stop": "done"}[choice.finish_reason], stats
assert 0 <= stats["ttft_s"] <= stats["ttlt_s"], stats
assert stats["tok_s"] > 0, stats
# Speculative decoding's counts agree with each other (a chat answer may or may not draft).
assert stats["accepted_tokens"] <= stats["drafted_tokens"], stats
assert stats["accept_rate"] == (stats["accepted_tokens"] / stats["drafted_tokens"] if stats["drafted_tokens"] else 0.0), stats
assert sum(stats["accepted_by_depth"]) == stats["accepted_tokens"], stats
assert stats["timestamp"].endswith("Z"), stats

# Content as an array of text parts is the same message as the joined string.
parts = client.chat.completions.create(
    model=served.id,
    messages=[{"role": "user", "content": [{"type": "text", "text": "Name three "}, {"type": "text", "text": "colours."}]}],
    max_tokens=MAX,
    temperature=0,
)
plain = client.chat.completions.create(
    model=served.id, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=MAX, temperature=0
)
assert parts.usage.prompt_tokens == plain.usage.prompt_tokens, (parts.usage, plain.usage)
assert parts.choices[0].message.content == plain.choices[0].message.content

# max_completion_tokens is the newer name of max_tokens.
short = client.chat.completions.create(
    model=served.id, messages=[{"role": "user", "content": "Count from one to twenty."}], max_completion_tokens=3, temperature=0
)
assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length", short

# The defaults SDKs and agent frameworks send, asking for nothing, answer as without them.
defaults = client.chat.completions.create(
    model=served.id,
    messages=[{"role": "user", "content": "Name three colours."}],
    max_tokens=MAX,
    temperature=0,
    response_format={"type": "text"},
    tools=[],
    tool_choice="none",
)
assert defaults.choices[0].message.content == plain.choices[0].message.content, (defaults, plain)

print(f"chat ok: {choice.message.content!r} ({u.completion_tokens} tokens, {stats['tok_s']:.1f} tok/s)")
