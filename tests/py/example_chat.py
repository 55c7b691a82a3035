from openai import OpenAI

client = OpenAI(base_url="http://127.0.0.1:8100/v1", api_key="unused")

resp = client.chat.completions.create(
    model="SmolLM2-135M-Instruct",  # any name: the loaded model answers
    messages=[
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    max_tokens=16,
    temperature=0,
)
print(resp.choices[0].message.content)
print(resp.choices[0].finish_reason, resp.usage.prompt_tokens, resp.usage.completion_tokens)
stats = resp.model_extra["mtplx_stats"]  # the request's metrics record
print(f"ttft={stats['ttft_s']:.3f}s tok_s={stats['tok_s']:.1f}")
