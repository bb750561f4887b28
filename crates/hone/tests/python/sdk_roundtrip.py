"""Drives a running hone gateway with the official openai SDK.

HONE_BASE_URL names the gateway's /v1 URL. Prints one JSON line naming the
episodes it made, for the Rust test to read back.
"""
import json
import os
import urllib.request
import uuid

import openai

base_url = os.environ["HONE_BASE_URL"]
client = openai.OpenAI(base_url=base_url, api_key="sdk-test-key")


def new_episode():
    return f"sdk-{uuid.uuid4()}"


# 1. A plain call; the episode id comes back in a response header.
raw = client.chat.completions.with_raw_response.create(
    model="assistant", messages=[{"role": "user", "content": "hello from the SDK"}]
)
plain = raw.headers["x-hone-episode"]
completion = raw.parse()
assert completion.choices[0].message.content == "Echo: hello from the SDK", completion

# 2. A streaming call with usage.
stream_episode = new_episode()
stream = client.chat.completions.create(
    model="assistant",
    messages=[{"role": "user", "content": "stream from the SDK"}],
    stream=True,
    stream_options={"include_usage": True},
    extra_headers={"X-Hone-Episode": stream_episode},
)
text, usage = "", None
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
    if chunk.usage:
        usage = chunk.usage
assert text == "Echo: stream from the SDK", text
assert usage is not None and usage.total_tokens == 18, usage

# 3. A tool-calling round trip in one episode, then feedback on it.
tools_episode = new_episode()
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
messages = [{"role": "user", "content": "TOOL what is the weather?"}]
first = client.chat.completions.create(
    model="assistant", messages=messages, tools=tools, extra_headers={"X-Hone-Episode": tools_episode}
)
call = first.choices[0].message.tool_calls[0]
assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
messages.append(first.choices[0].message.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"})
second = client.chat.completions.create(
    model="assistant", messages=messages, tools=tools, extra_headers={"X-Hone-Episode": tools_episode}
)
assert second.choices[0].message.content.startswith("Echo:")

feedback = urllib.request.Request(
    base_url + "/feedback",
    data=json.dumps({"episode_id": tools_episode, "name": "resolved", "value": True}).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer sdk-test-key"},
)
with urllib.request.urlopen(feedback) as response:
    assert response.status == 200

print(json.dumps({"plain": plain, "stream": stream_episode, "tools": tools_episode}))
