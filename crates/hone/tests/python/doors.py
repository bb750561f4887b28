"""Drives a running hone gateway through every door with real client
libraries: openai's Responses API (plain, streamed, a tool round trip with
previous_response_id, retrieve), the OpenAI Agents SDK with its default
(Responses) model and a function tool, the anthropic SDK (plain, streamed,
tools), and embeddings; bad inputs get each API's own error.

HONE_URL names the gateway's root URL. Prints one JSON line naming what it
made, for the Rust test to read back from the store.
"""
import json
import os

import anthropic
import openai

root = os.environ["HONE_URL"]
client = openai.OpenAI(base_url=root + "/v1", api_key="sdk-test-key")
report = {}

# --- OpenAI Responses API ---------------------------------------------------

# 1. Plain, with instructions; the episode comes back in a header.
raw = client.responses.with_raw_response.create(
    model="assistant", instructions="Answer briefly.", input="hello responses"
)
plain = raw.parse()
assert plain.output_text == "Echo: hello responses", plain
assert plain.status == "completed" and plain.id.startswith("resp_"), plain
assert plain.usage.input_tokens == 11 and plain.usage.output_tokens == 7, plain.usage
report["responses_plain"] = {"episode": raw.headers["x-hone-episode"], "id": plain.id}

# 2. Retrieved by id.
again = client.responses.retrieve(plain.id)
assert again.output_text == plain.output_text and again.id == plain.id, again

# 3. Streamed: the Responses event sequence, text deltas adding up.
events = list(client.responses.create(model="assistant", input="stream responses", stream=True))
kinds = [e.type for e in events]
assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
assert [e.sequence_number for e in events] == list(range(len(events))), kinds
text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
assert text == "Echo: stream responses", text
final = events[-1].response
assert final.output_text == text and final.usage.total_tokens == 18, final
report["responses_stream"] = final.id

# 4. A tool round trip chained with previous_response_id: one episode.
tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
raw = client.responses.with_raw_response.create(model="assistant", input="TOOL what is the weather?", tools=tools)
first = raw.parse()
calls = [item for item in first.output if item.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", first.output
assert json.loads(calls[0].arguments) == {"city": "Paris"}
raw_second = client.responses.with_raw_response.create(
    model="assistant",
    previous_response_id=first.id,
    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21C"}],
    tools=tools,
)
second = raw_second.parse()
assert raw_second.headers["x-hone-episode"] == raw.headers["x-hone-episode"], "a chained response joins the episode"
assert second.output_text == "Echo: tool said sunny, 21C", second.output
assert second.previous_response_id == first.id
report["responses_tools"] = raw.headers["x-hone-episode"]

# 5. Streamed tool call: arguments arrive as deltas and add up.
events = list(client.responses.create(model="assistant", input="TOOL stream", tools=tools, stream=True))
arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
assert json.loads(arguments) == {"city": "Paris"}, arguments
done = [e.item for e in events if e.type == "response.output_item.done"]
assert done and done[-1].type == "function_call" and done[-1].arguments == arguments, done

# 6. Bad input: OpenAI's error format, nothing recorded.
try:
    client.responses.create(model="assistant", input="hi", tools=[{"type": "web_search"}])
    raise AssertionError("a web_search tool was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "tools[0].type" and "function tools" in e.body["message"], e.body
try:
    client.responses.create(model="assistant", input="hi", previous_response_id="resp_" + "0" * 32)
    raise AssertionError("an unknown previous response was accepted")
except openai.NotFoundError as e:
    assert e.body["code"] == "previous_response_not_found", e.body

# --- The OpenAI Agents SDK, default model (Responses), a function tool ------

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

set_tracing_disabled(True)
set_default_openai_client(openai.AsyncOpenAI(base_url=root + "/v1", api_key="sdk-test-key"))
weather_calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    weather_calls.append(city)
    return f"sunny in {city}"


agent = Agent(name="weather", instructions="Use the tool.", model="assistant", tools=[get_weather])
result = Runner.run_sync(agent, "TOOL weather in Paris?")
assert weather_calls == ["Paris"], weather_calls
assert result.final_output == "Echo: tool said sunny in Paris", result.final_output
report["agents_sdk"] = [r.response_id for r in result.raw_responses]

# --- Anthropic Messages API ---------------------------------------------------

claude = anthropic.Anthropic(base_url=root, api_key="sdk-test-key")

# 7. Plain.
raw = claude.messages.with_raw_response.create(
    model="assistant", max_tokens=100, system="Be brief.", messages=[{"role": "user", "content": "hello anthropic"}]
)
message = raw.parse()
assert message.content[0].type == "text" and message.content[0].text == "Echo: hello anthropic", message
assert message.stop_reason == "end_turn" and message.usage.output_tokens == 7, message
report["anthropic_plain"] = raw.headers["x-hone-episode"]

# 8. Streamed, with the SDK's own stream helper.
with claude.messages.stream(
    model="assistant", max_tokens=100, messages=[{"role": "user", "content": "stream anthropic"}],
    extra_headers={"X-Hone-Episode": "anthropic-stream-1"},
) as stream:
    streamed = "".join(stream.text_stream)
    final = stream.get_final_message()
assert streamed == "Echo: stream anthropic", streamed
assert final.content[0].text == streamed and final.stop_reason == "end_turn", final
report["anthropic_stream"] = "anthropic-stream-1"

# 9. Tools: a tool_use block, then the tool_result, in one episode.
anthropic_tools = [{"name": "get_weather", "description": "Weather in a city",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
conversation = [{"role": "user", "content": "TOOL weather?"}]
raw = claude.messages.with_raw_response.create(
    model="assistant", max_tokens=100, tools=anthropic_tools, messages=conversation
)
first = raw.parse()
episode = raw.headers["x-hone-episode"]
use = [b for b in first.content if b.type == "tool_use"]
assert first.stop_reason == "tool_use" and use[0].name == "get_weather" and use[0].input == {"city": "Paris"}, first
conversation.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
conversation.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id, "content": "rainy"}]})
second = claude.messages.create(
    model="assistant", max_tokens=100, tools=anthropic_tools, messages=conversation,
    extra_headers={"X-Hone-Episode": episode},
)
assert second.content[0].text == "Echo: tool said rainy", second
report["anthropic_tools"] = episode

# 10. Streamed tool use: the input arrives as JSON deltas.
with claude.messages.stream(
    model="assistant", max_tokens=100, tools=anthropic_tools, messages=[{"role": "user", "content": "TOOL stream"}]
) as stream:
    final = stream.get_final_message()
assert final.stop_reason == "tool_use" and final.content[-1].input == {"city": "Paris"}, final

# 11. Bad input: Anthropic's error format.
try:
    claude.messages.create(model="assistant", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    raise AssertionError("max_tokens 0 was accepted")
except anthropic.BadRequestError as e:
    assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body
try:
    claude.messages.create(model="nobody", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    raise AssertionError("an unknown agent was accepted")
except anthropic.NotFoundError as e:
    assert e.body["error"]["type"] == "not_found_error", e.body

# --- Embeddings ---------------------------------------------------------------

embedded = client.embeddings.create(model="assistant/fake-embed", input=["one two", "three"])
assert [len(d.embedding) for d in embedded.data] == [3, 3] and embedded.usage.prompt_tokens == 3, embedded
try:
    client.embeddings.create(model="assistant", input=[])
    raise AssertionError("empty input was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "input", e.body

print(json.dumps(report))
