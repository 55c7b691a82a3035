"""Tool calls through the official `openai` package: each `tool_choice` value, two parallel
calls with indexes 0 and 1, a streamed call (its arguments in pieces) assembled by the SDK's
stream helper, a result sent back through the chat template, and the refusals (an unknown tool
in `tool_choice`, a bad tool name, a tool result that answers no call)."""
import json
import os

import openai
from openai import OpenAI

client = OpenAI(base_url=os.environ["MTPLX_BASE_URL"] + "/v1", api_key="unused", max_retries=0)
tools = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                    "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "description": "The time in a zone",
     "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                    "required": ["zone"], "additionalProperties": False}}},
]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]


def create(**kw):
    return client.chat.completions.create(model="demo", messages=kw.pop("messages", ask), tools=tools,
                                          max_tokens=kw.pop("max_tokens", 80), temperature=0, **kw)


# required: calls from the first token, valid arguments, finish_reason tool_calls.
r = create(tool_choice="required", parallel_tool_calls=False)
c = r.choices[0]
assert c.finish_reason == "tool_calls" and c.message.content is None, c
assert len(c.message.tool_calls) == 1, c.message.tool_calls
call = c.message.tool_calls[0]
assert call.type == "function" and call.function.name in ("get_weather", "get_time") and call.id, call
json.loads(call.function.arguments)

# A named function: that one.
r = create(tool_choice={"type": "function", "function": {"name": "get_time"}}, parallel_tool_calls=False)
call = r.choices[0].message.tool_calls[0]
assert call.function.name == "get_time" and json.loads(call.function.arguments)["zone"] in ("UTC", "CET"), call

# none: a plain answer.
r = create(tool_choice="none", max_tokens=8)
assert r.choices[0].message.tool_calls is None and r.choices[0].message.content, r

# auto: the model decides; whatever it does is well formed.
r = create(tool_choice="auto", max_tokens=40)
m = r.choices[0].message
assert m.content or m.tool_calls, r
for call in m.tool_calls or []:
    json.loads(call.function.arguments)

# Parallel calls: the grammar lets the model write several; this one writes two.
r = create(tool_choice="required", parallel_tool_calls=True)
calls = r.choices[0].message.tool_calls
assert len(calls) >= 2 and len({x.id for x in calls}) == len(calls), calls

# Streamed: the SDK's stream helper assembles the call; the raw chunks carry index 0 and 1.
with client.chat.completions.stream(model="demo", messages=ask, tools=tools, tool_choice="required",
                                    max_tokens=80, temperature=0) as stream:
    deltas = [tc for ev in stream if ev.type == "chunk" and ev.chunk.choices
              for tc in (ev.chunk.choices[0].delta.tool_calls or [])]
    final = stream.get_final_completion()
indexes = [tc.index for tc in deltas]
assert sorted(set(indexes)) == list(range(len(calls))), indexes
# The name comes once, with the id; the arguments follow in pieces as they are generated.
assert [tc.function.name for tc in deltas if tc.function.name] == [x.function.name for x in calls], deltas
pieces = [tc.function.arguments for tc in deltas if tc.index == 0 and tc.function.arguments]
assert len(pieces) > 1 and "".join(pieces) == calls[0].function.arguments, pieces
streamed = final.choices[0].message.tool_calls
assert [(x.function.name, x.function.arguments) for x in streamed] == \
    [(x.function.name, x.function.arguments) for x in calls], (streamed, calls)
assert final.choices[0].finish_reason == "tool_calls", final

# The result goes back through the template, and the conversation goes on.
turn = ask + [{"role": "assistant", "content": None, "tool_calls": [
    {"id": calls[0].id, "type": "function", "function": {"name": calls[0].function.name,
                                                          "arguments": calls[0].function.arguments}}]},
    {"role": "tool", "tool_call_id": calls[0].id, "content": "{\"temperature_c\": 21}"}]
r = create(messages=turn, tool_choice="none", max_tokens=8)
assert r.choices[0].message.content, r

for bad, param in [
    (dict(tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
    (dict(messages=ask + [{"role": "tool", "tool_call_id": "call_x", "content": "1"}]), "messages[1].tool_call_id"),
]:
    try:
        create(**bad)
        raise AssertionError(f"{bad} was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == param, e.body
try:
    client.chat.completions.create(model="demo", messages=ask, max_tokens=4, tools=[
        {"type": "function", "function": {"name": "bad name", "parameters": {"type": "object"}}}])
    raise AssertionError("a bad tool name was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "tools[0].function.name", e.body
# A format with tools: the answer is calls, or JSON of that schema from its first token.
verdict = {"type": "json_schema", "json_schema": {"name": "v", "strict": True, "schema": {
    "type": "object", "properties": {"answer": {"type": "string", "maxLength": 30}},
    "required": ["answer"], "additionalProperties": False}}}
for question in ["What is the weather in Paris?", "Say hello."]:
    r = create(messages=[{"role": "user", "content": question}], response_format=verdict, max_tokens=80,
               parallel_tool_calls=False)
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls" and not c.message.content, c
        assert len(c.message.tool_calls) == 1 and isinstance(json.loads(c.message.tool_calls[0].function.arguments), dict), c
    else:
        assert c.finish_reason == "stop" and set(json.loads(c.message.content)) == {"answer"}, c
print("tools ok")
