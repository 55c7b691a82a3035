import requests

BASE_URL = "http://localhost:8100"

resp = requests.get(f"{BASE_URL}/metrics")
data = resp.json()

print(f"Tokens/sec: {data['latest']['tok_s']}")
print(f"Accept rate: {data['latest']['accept_rate']:.1%}")
