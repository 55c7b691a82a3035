from openai import OpenAI

client = OpenAI(base_url="http://127.0.0.1:8100/v1", api_key="unused")

resp = client.completions.create(
    model="SmolLM2-135M-Instruct",
    prompt="The three primary colours are",
    max_tokens=12,
    temperature=0,
    logprobs=2,
)
choice = resp.choices[0]
print(choice.text)
for token, logprob in zip(choice.logprobs.tokens, choice.logprobs.token_logprobs):
    print(f"{token!r}: {logprob:.3f}")
