"""What the second hostile review found the doors got wrong, seen through
the real client libraries: streams whose first token comes 200 ms after the
opening chunk (through chat completions, Responses and Messages), the
Messages door's max_tokens towards an OpenAI upstream, a stop sequence hit
read back by the anthropic SDK, and a 429's Retry-After as the openai SDK
sees it, and token counting through the anthropic SDK.

HONE_URL names the gateway's root URL. Prints one JSON line for the Rust
test, which reads the recorded calls and the upstream's bodies.
"""
import json
import os

import anthropic
import openai

root = os.environ["HONE_URL"]
client = openai.OpenAI(base_url=root + "/v1", api_key="sdk-test-key", max_retries=0)
claude = anthropic.Anthropic(base_url=root, api_key="sdk-test-key", max_retries=0)
report = {}

# Time to first token, one stream per door.
chunks = list(client.chat.completions.create(
    model="assistant", messages=[{"role": "user", "content": "FIRSTTOKEN:200 hi"}], stream=True,
    extra_headers={"x-hone-episode": "sdk-ttft-chat"}))
assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Echo:"), chunks
events = list(client.responses.create(
    model="assistant", input="FIRSTTOKEN:200 hi", stream=True,
    extra_headers={"x-hone-episode": "sdk-ttft-responses"}))
assert events[-1].type == "response.completed", [e.type for e in events]
with claude.messages.stream(
        model="claude", max_tokens=50, messages=[{"role": "user", "content": "FIRSTTOKEN:200 hi"}],
        extra_headers={"x-hone-episode": "sdk-ttft-messages"}) as stream:
    text = "".join(stream.text_stream)
assert text.startswith("Echo:"), text

# The Messages door's required max_tokens, to an OpenAI upstream.
message = claude.messages.create(
    model="assistant", max_tokens=64, messages=[{"role": "user", "content": "sdk max tokens"}])
assert message.content[0].text.startswith("Echo:"), message

# A stop sequence hit, as the SDK reads it.
stopped = claude.messages.create(
    model="claude", max_tokens=50, stop_sequences=["END"],
    messages=[{"role": "user", "content": "STOPSEQ please"}])
report["stop"] = {"reason": stopped.stop_reason, "sequence": stopped.stop_sequence}

# A 429 from the upstream reaches the SDK with Retry-After.
try:
    client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "RATELIMITONCE:sdk"}])
    report["retry_after"] = None
except openai.RateLimitError as e:
    report["retry_after"] = e.response.headers.get("retry-after")

# Token counting: by the Anthropic upstream for an agent it serves; an
# OpenAI-compatible upstream has no such endpoint, and hone says so.
counted = claude.messages.count_tokens(
    model="claude", system="Be brief.", messages=[{"role": "user", "content": "count these four words"}])
report["counted"] = counted.input_tokens
try:
    claude.messages.count_tokens(model="assistant", messages=[{"role": "user", "content": "hi"}])
    report["uncounted"] = None
except anthropic.NotFoundError as e:
    report["uncounted"] = e.body

print(json.dumps(report))
