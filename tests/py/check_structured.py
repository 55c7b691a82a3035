"""Structured outputs through the official `openai` package: `parse()` with a Pydantic model
returns a parsed object, `json_object` answers load as JSON objects, a streamed schema answer
joins into an instance, `/v1/completions` takes `response_format` too, a schema that cannot
compile is a 400 naming `response_format`, and a tiny `max_tokens` gives the SDK's length error."""
import json
import os
from typing import Literal

import openai
from openai import OpenAI
from pydantic import BaseModel, Field

client = OpenAI(base_url=os.environ["MTPLX_BASE_URL"] + "/v1", api_key="unused", max_retries=0)


class City(BaseModel):
    name: str = Field(max_length=16)
    population: int
    capital: bool
    continent: Literal["Africa", "America", "Asia", "Europe", "Oceania"]


ask = [{"role": "user", "content": "Describe Paris."}]
for draft in ("none", "auto"):
    c = client.chat.completions.parse(model="demo", messages=ask, response_format=City, max_tokens=80,
                                      temperature=0, extra_body={"mtplx": {"draft": draft}})
    city = c.choices[0].message.parsed
    assert isinstance(city, City), c
    assert c.choices[0].finish_reason == "stop", c
    if draft == "none":
        plain = c.choices[0].message.content
    else:
        assert c.choices[0].message.content == plain, (c.choices[0].message.content, plain)

# Sampled answers follow the schema too.
for seed in range(3):
    c = client.chat.completions.parse(model="demo", messages=ask, response_format=City, max_tokens=80,
                                      temperature=1.0, seed=seed)
    assert isinstance(c.choices[0].message.parsed, City), c

r = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Describe Paris as JSON."}],
                                   response_format={"type": "json_object"}, max_tokens=120, temperature=0)
assert r.choices[0].finish_reason == "stop", r
assert isinstance(json.loads(r.choices[0].message.content), dict), r

schema = {"name": "city", "strict": True, "schema": City.model_json_schema()}
stream = client.chat.completions.create(model="demo", messages=ask, max_tokens=80, temperature=0, stream=True,
                                        response_format={"type": "json_schema", "json_schema": schema})
text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
City.model_validate_json(text)

done = client.completions.create(model="demo", prompt="Paris, as JSON:", max_tokens=80, temperature=0,
                                 extra_body={"response_format": {"type": "json_schema", "json_schema": schema}})
City.model_validate_json(done.choices[0].text)

try:
    client.chat.completions.create(model="demo", messages=ask, max_tokens=8, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"type": "frobnicate"}}})
    raise AssertionError("a schema that cannot compile was accepted")
except openai.BadRequestError as e:
    err = e.body
    assert err["param"] == "response_format" and "frobnicate" in err["message"], err

try:
    client.chat.completions.parse(model="demo", messages=ask, response_format=City, max_tokens=3)
    raise AssertionError("a cut answer parsed")
except openai.LengthFinishReasonError:
    pass
print("structured ok")
