"""Refusals in OpenAI's error shape, seen through the official `openai` package (and `requests`
for what that package cannot send: malformed JSON, unknown routes)."""
import os

import openai
import requests
from openai import OpenAI

BASE = os.environ["MTPLX_BASE_URL"]
client = OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0)
HI = [{"role": "user", "content": "hi"}]


def refused(call, status, param, *needles, code=None):
    try:
        call()
    except openai.APIStatusError as e:
        assert e.status_code == status, (e.status_code, e.body)
        assert e.body["param"] == param, e.body
        assert e.body["type"] == ("invalid_request_error" if status < 500 else "server_error"), e.body
        for n in needles:
            assert n in e.body["message"], (n, e.body)
        if code is not None:
            assert e.code == code, e.body
        return e
    raise AssertionError(f"accepted, expected {status} on {param}")


chat = client.chat.completions.create
refused(lambda: chat(model="m", messages=HI, temperature=3), 400, "temperature", "between 0 and 2")
refused(lambda: chat(model="m", messages=HI, temperature="hot"), 400, "temperature", "number")
refused(lambda: chat(model="m", messages=HI, top_p=1.5), 400, "top_p", "between 0 and 1")
refused(lambda: chat(model="m", messages=HI, presence_penalty=-3), 400, "presence_penalty", "between -2 and 2")
refused(lambda: chat(model="m", messages=HI, max_tokens=0), 400, "max_tokens", "between 1 and")
refused(lambda: chat(model="m", messages=HI, logprobs=True, top_logprobs=21), 400, "top_logprobs", "between 0 and 20")
refused(lambda: chat(model="m", messages=HI, stop=["a", "b", "c", "d", "e"]), 400, "stop", "at most 4")
refused(lambda: chat(model="m", messages=HI, stream="yes"), 400, "stream", "boolean")
refused(lambda: chat(model="m", messages=HI, n=2), 400, "n", "only n: 1 is supported")
refused(lambda: chat(model="m", messages=[]), 400, "messages", "at least one")
refused(lambda: chat(model="m", messages=[{"role": "wizard", "content": "hi"}]), 400, "messages[0].role", "must be one of")
refused(lambda: client.completions.create(model="m", prompt="hi", logprobs=6), 400, "logprobs", "between 0 and 5")
refused(lambda: client.completions.create(model="m", prompt=7, max_tokens=1), 400, "prompt", "string")

# Malformed JSON: the client library cannot send that, a raw POST can.
r = requests.post(f"{BASE}/v1/chat/completions", data=b'{"messages": [', headers={"Content-Type": "application/json"})
assert r.status_code == 400, r.text
err = r.json()["error"]
assert err["type"] == "invalid_request_error" and err["code"] == "invalid_json" and "not valid JSON" in err["message"], err
assert set(err) == {"message", "type", "param", "code"}, err

# A required field missing, and a wrong type the client library would not let through.
r = requests.post(f"{BASE}/v1/chat/completions", json={"model": "m"})
assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
r = requests.post(f"{BASE}/v1/chat/completions", json={"messages": "hi"})
assert r.status_code == 400 and r.json()["error"]["param"] == "messages" and "array" in r.json()["error"]["message"], r.text

# Unknown route: 404 in the same shape.
r = requests.get(f"{BASE}/v1/no/such/route")
assert r.status_code == 404, r.text
assert r.json()["error"]["code"] == "not_found", r.text
try:
    client.get("/no/such/route", cast_to=object)
    raise AssertionError("unknown route answered")
except openai.NotFoundError as e:
    assert e.status_code == 404

# The server still answers after all that.
ok = chat(model="m", messages=HI, max_tokens=2)
assert ok.usage.completion_tokens >= 1

print("errors ok")
