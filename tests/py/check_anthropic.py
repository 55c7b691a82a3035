"""Anthropic's Messages API through the official `anthropic` package: a whole answer, a
streamed one (its events in the documented order, assembled by the SDK's stream helper), a
prefill, stop sequences, token counting, beta headers and `?beta=true`, and errors in
Anthropic's shape. MTPLX_API_KEY is the server's key, which the SDK sends as `x-api-key`."""
import os

import anthropic

BASE = os.environ["MTPLX_BASE_URL"]
client = anthropic.Anthropic(base_url=BASE, api_key=os.environ["MTPLX_API_KEY"], max_retries=0)
messages = [{"role": "user", "content": "Write one sentence about the sea."}]
MAX = 12

# A whole answer.
m = client.messages.create(model="demo", max_tokens=MAX, messages=messages, extra_body={"temperature": 0},
                           system="You are a poet.")
assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_"), m
assert len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text, m.content
assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
assert 0 < m.usage.output_tokens <= MAX and m.usage.input_tokens > 10, m.usage
whole_text = m.content[0].text

# The same request streamed: the same text at temperature 0, the events in order.
with client.messages.stream(model="demo", max_tokens=MAX, messages=messages, extra_body={"temperature": 0},
                            system="You are a poet.") as stream:
    kinds = [e.type for e in stream]
    final = stream.get_final_message()
assert final.content[0].text == whole_text, (final.content, whole_text)
assert final.usage.output_tokens == m.usage.output_tokens, final.usage
assert final.stop_reason == m.stop_reason, final.stop_reason
# The SDK's stream yields its own `text` events beside the raw ones; keep the raw ones.
raw = [k for k in kinds if k in ("message_start", "content_block_start", "content_block_delta",
                                 "content_block_stop", "message_delta", "message_stop")]
assert raw[0] == "message_start" and raw[1] == "content_block_start", raw
assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"], raw
assert set(raw[2:-3]) == {"content_block_delta"}, raw

# max_tokens cuts: stop_reason says so.
m = client.messages.create(model="demo", max_tokens=1, messages=messages)
assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 1, m

# A stop sequence ends the answer before it and is named.
m = client.messages.create(model="demo", max_tokens=40, extra_body={"temperature": 0}, stop_sequences=[" the", "."],
                           messages=[{"role": "user", "content": "Tell me about the moon and the sea."}])
assert m.stop_reason == "stop_sequence" and m.stop_sequence in (" the", "."), m
assert m.stop_sequence not in m.content[0].text, m.content

# A prefill: the answer continues the last assistant turn and does not repeat it.
m = client.messages.create(model="demo", max_tokens=8, extra_body={"temperature": 0},
                           messages=messages + [{"role": "assistant", "content": "The sea"}])
assert not m.content[0].text.startswith("The sea"), m.content

# Token counting agrees with what a generation reports as its input.
count = client.messages.count_tokens(model="demo", messages=messages, system="You are a poet.")
first = client.messages.create(model="demo", max_tokens=1, messages=messages, system="You are a poet.")
# The same prompt ran before: its prefix is read from the cache, and Anthropic's parts add up.
read = first.usage.cache_read_input_tokens
assert read > 0 and first.usage.cache_creation_input_tokens == 0, first.usage
assert count.input_tokens == first.usage.input_tokens + read, (count, first.usage)

# Beta headers this server does not know are accepted, and so is the beta client's `?beta=true`.
m = client.messages.create(model="demo", max_tokens=2, messages=messages,
                           extra_headers={"anthropic-beta": "some-future-feature-2099-01-01"})
assert m.content[0].type == "text", m
m = client.beta.messages.create(model="demo", max_tokens=2, messages=messages, betas=["another-beta-2099"])
assert m.content[0].type == "text", m

# Structured output: the SDK's parse() with a Pydantic model.
from pydantic import BaseModel, ConfigDict  # noqa: E402


class City(BaseModel):
    # The SDK moves constraints such as maxLength into the description before sending the
    # schema, so they do not bind the answer: nothing here relies on one (an integer could run
    # on for ever). No other keys, so that the object can close.
    model_config = ConfigDict(extra="forbid")
    name: str
    capital: bool


p = client.messages.parse(model="demo", max_tokens=60, output_format=City, extra_body={"temperature": 0},
                          messages=[{"role": "user", "content": "Describe Paris."}])
assert isinstance(p.parsed_output, City), p

# Tools: a forced call comes back as a tool_use block whose input is a dict, streamed too.
tools = [{"name": "get_weather", "description": "The weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                           "required": ["city"], "additionalProperties": False}}]
m = client.messages.create(model="demo", max_tokens=60, tools=tools, messages=messages,
                           tool_choice={"type": "any", "disable_parallel_tool_use": True})
assert m.stop_reason == "tool_use", m
uses = [b for b in m.content if b.type == "tool_use"]
assert len(uses) == 1 and uses[0].name == "get_weather" and isinstance(uses[0].input, dict), m.content
assert isinstance(uses[0].input.get("city"), str) and uses[0].id.startswith("toolu_"), uses
with client.messages.stream(model="demo", max_tokens=60, tools=tools, messages=messages,
                            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}) as stream:
    partial = [e.delta.partial_json for e in stream
               if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    final = stream.get_final_message()
# The input arrives in pieces as it is generated.
assert len(partial) > 1, partial
streamed = [b for b in final.content if b.type == "tool_use"]
assert streamed and all(isinstance(b.input, dict) and b.name == "get_weather" for b in streamed), final.content
assert final.stop_reason == "tool_use", final
# The result goes back, and the conversation goes on.
turn = messages + [{"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id, "name": "get_weather",
                                                      "input": uses[0].input}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "21 C"}]}]
m = client.messages.create(model="demo", max_tokens=6, tools=tools, messages=turn, tool_choice={"type": "none"})
assert m.content[0].type == "text" and m.stop_reason in ("end_turn", "max_tokens"), m
try:
    client.messages.create(model="demo", max_tokens=6, messages=messages + [
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_none", "content": "x"}]}])
    raise AssertionError("a tool_result answering no call was accepted")
except anthropic.BadRequestError as e:
    assert "answers no tool_use" in e.body["error"]["message"], e.body

# Errors in Anthropic's shape, with the statuses of the OpenAI routes.
try:
    client.messages.create(model="demo", max_tokens=5, messages=[{"role": "assistant", "content": "hi"}])
    raise AssertionError("a conversation that starts with the assistant was accepted")
except anthropic.BadRequestError as e:
    assert e.status_code == 400 and e.body["error"]["type"] == "invalid_request_error", e.body
    assert "messages[0].role" in e.body["error"]["message"], e.body
try:
    # Recent SDKs no longer send sampling fields; older clients and agents still do.
    client.messages.create(model="demo", max_tokens=5, messages=messages, extra_body={"temperature": 1.5})
    raise AssertionError("temperature 1.5 was accepted")
except anthropic.BadRequestError as e:
    assert "between 0 and 1" in e.body["error"]["message"], e.body
bad = anthropic.Anthropic(base_url=BASE, api_key="not-the-key", max_retries=0)
try:
    bad.messages.create(model="demo", max_tokens=5, messages=messages)
    raise AssertionError("a wrong x-api-key was accepted")
except anthropic.AuthenticationError as e:
    assert e.status_code == 401 and e.body["error"]["type"] == "authentication_error", e.body
print("anthropic ok")
