import requests
import json

BASE_URL = "http://localhost:8100"

with requests.get(
    f"{BASE_URL}/v1/mtplx/metrics/stream",
    stream=True
) as r:
    for line in r.iter_lines():
        if line and line.startswith(b"data: "):
            payload = json.loads(line[6:])  # Strip "data: " prefix

            print(f"tok_s={payload['tok_s']:.1f}, "
                  f"accept_rate={payload['accept_rate']:.2f}")
