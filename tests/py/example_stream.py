from openai import OpenAI

client = OpenAI(base_url="http://127.0.0.1:8100/v1", api_key="unused")

stream = client.chat.completions.create(
    model="SmolLM2-135M-Instruct",
    messages=[{"role": "user", "content": "Write a haiku about rust."}],
    max_tokens=24,
    stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
    if chunk.usage:
        print(f"\n[{chunk.usage.completion_tokens} tokens]")
