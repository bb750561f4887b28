"""Sends GenAI spans to a running hone gateway with the OpenTelemetry Python
SDK and its OTLP/HTTP (protobuf) exporter, as an instrumented agent would.

Trace 1: an agent turn in the current GenAI conventions — a chat span that
calls a tool, the tool's span (not a model call), and a second chat span
with the tool result. Trace 2: one chat span in OpenLLMetry's indexed form.
Trace 3: a chat span for an agent hone does not know (refused, named).

HONE_URL names the gateway's root URL. Prints one JSON line with the trace
ids (hex), which are the episode ids.
"""
import json
import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

root = os.environ["HONE_URL"]
exporter = OTLPSpanExporter(endpoint=root + "/v1/traces", headers={"Authorization": "Bearer sdk-test-key"})
provider = TracerProvider(resource=Resource.create({"service.name": "assistant"}))
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("agent")

tools = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "What is the weather in Paris?"}]}])


def chat_span(inputs, outputs, input_tokens, output_tokens):
    with tracer.start_as_current_span("chat gpt-4o-mini") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "openai")
        span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
        span.set_attribute("gen_ai.request.temperature", 0.3)
        span.set_attribute("gen_ai.system_instructions", json.dumps([{"type": "text", "content": "You answer weather questions."}]))
        span.set_attribute("gen_ai.input.messages", json.dumps(inputs))
        span.set_attribute("gen_ai.output.messages", json.dumps(outputs))
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        return span.get_span_context().trace_id


with tracer.start_as_current_span("invoke_agent weather") as agent_span:
    agent_span.set_attribute("gen_ai.operation.name", "invoke_agent")
    question = {"role": "user", "parts": [{"type": "text", "content": "What is the weather in Paris?"}]}
    call = {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}], "finish_reason": "tool_call"}
    first_trace = chat_span([question], [call], 40, 12)
    with tracer.start_as_current_span("execute_tool get_weather") as tool_span:
        tool_span.set_attribute("gen_ai.operation.name", "execute_tool")
        tool_span.set_attribute("gen_ai.tool.name", "get_weather")
    result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "sunny, 21C"}]}
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "It is sunny and 21C in Paris."}], "finish_reason": "stop"}
    chat_span([question, call, result], [answer], 60, 9)
    semconv_trace = agent_span.get_span_context().trace_id
assert first_trace == semconv_trace

with tracer.start_as_current_span("openai.chat") as span:
    span.set_attribute("gen_ai.system", "openai")
    span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
    span.set_attribute("gen_ai.prompt.0.role", "user")
    span.set_attribute("gen_ai.prompt.0.content", "Say hi")
    span.set_attribute("gen_ai.completion.0.role", "assistant")
    span.set_attribute("gen_ai.completion.0.content", "hi")
    span.set_attribute("gen_ai.completion.0.finish_reason", "stop")
    span.set_attribute("gen_ai.usage.prompt_tokens", 5)
    span.set_attribute("gen_ai.usage.completion_tokens", 1)
    openllmetry_trace = span.get_span_context().trace_id

with tracer.start_as_current_span("chat") as span:
    span.set_attribute("hone.agent", "nobody")
    span.set_attribute("gen_ai.operation.name", "chat")
    span.set_attribute("gen_ai.input.messages", tools)
    unknown_trace = span.get_span_context().trace_id

provider.shutdown()
print(json.dumps({
    "semconv": format(semconv_trace, "032x"),
    "openllmetry": format(openllmetry_trace, "032x"),
    "unknown": format(unknown_trace, "032x"),
}))
