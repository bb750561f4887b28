//! `POST /v1/messages`: Anthropic's Messages API in front of any provider,
//! so an agent built on the Anthropic SDK points its `base_url` at hone
//! unchanged. `system` becomes a system message, content blocks become
//! parts, `tool_use` blocks tool calls and `tool_result` blocks tool
//! messages; answers and stream events (`message_start` … `message_stop`)
//! and errors (`{"type":"error","error":{…}}`) are Anthropic's. The mapping
//! tables shared with the Anthropic provider (stop reasons, tool choice)
//! live in `providers::anthropic`.

use super::{chat_request, encode, set_settings, sse_frame, Door, Encoder, Incoming};
use crate::error::{ApiError, ErrorKind};
use crate::providers::anthropic::{anthropic_usage as usage, openai_tool_choice, stop_reason};
use crate::providers::StreamEvent;
use crate::state::AppState;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use hone_types::call::Door as DoorRecord;
use hone_types::openai::{ChatCompletionRequest, ChatCompletionResponse};
use hone_types::{CallId, CallRecord};
use serde::Deserialize;
use serde_json::{json, Value};

pub struct MessagesDoor;

#[derive(Debug, Deserialize)]
struct MessagesRequest {
    model: String,
    max_tokens: u32,
    messages: Vec<Turn>,
    #[serde(default)]
    system: Option<Text>,
    #[serde(default)]
    tools: Option<Vec<ToolDefinition>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    top_k: Option<u32>,
    /// Extended thinking: passed on to Anthropic upstreams (others cannot
    /// take it and do not get it).
    #[serde(default)]
    thinking: Option<Value>,
    #[serde(default, deserialize_with = "super::false_if_null")]
    stream: bool,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    #[serde(default)]
    user_id: Option<String>,
}

/// Content: a string or a list of blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Text {
    One(String),
    Blocks(Vec<Block>),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Speaker {
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
struct Turn {
    role: Speaker,
    content: Text,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    Image {
        source: ImageSource,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Text>,
        #[serde(default)]
        is_error: bool,
    },
    /// Extended thinking the client echoes back: not sent on (other
    /// providers cannot verify its signature).
    Thinking {},
    RedactedThinking {},
    #[serde(other)]
    Unsupported,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

#[derive(Debug, Deserialize)]
struct ToolDefinition {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_schema: Option<Value>,
}

fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError::invalid("invalid_request", message).with_param(Some(param.into()))
}

impl Text {
    fn blocks(self) -> Vec<Block> {
        match self {
            Text::One(text) => vec![Block::Text { text }],
            Text::Blocks(blocks) => blocks,
        }
    }

    /// The text of a system prompt or tool result.
    fn joined(self) -> String {
        self.blocks()
            .into_iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The chat-completions request an Anthropic request asks for.
fn to_chat(request: MessagesRequest) -> Result<ChatCompletionRequest, ApiError> {
    if request.max_tokens == 0 {
        return Err(invalid("max_tokens", "`max_tokens` must be at least 1"));
    }
    if request.messages.is_empty() {
        return Err(invalid("messages", "`messages` must not be empty"));
    }
    let mut messages = Vec::new();
    if let Some(system) = request.system {
        messages.push(json!({"role": "system", "content": system.joined()}));
    }
    for (i, turn) in request.messages.into_iter().enumerate() {
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for (j, block) in turn.content.blocks().into_iter().enumerate() {
            let at = || format!("messages[{i}].content[{j}]");
            match (block, &turn.role) {
                (Block::Text { text }, _) => parts.push(json!({"type": "text", "text": text})),
                (Block::Image { source }, Speaker::User) => {
                    let url = match source {
                        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
                        ImageSource::Url { url } => url,
                    };
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
                (Block::ToolUse { id, name, input }, Speaker::Assistant) => calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()},
                })),
                (
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    },
                    Speaker::User,
                ) => {
                    let text = content.map(Text::joined).unwrap_or_default();
                    let text = if is_error { format!("Error: {text}") } else { text };
                    messages.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}));
                }
                (Block::Thinking {} | Block::RedactedThinking {}, _) => {}
                (Block::Unsupported, _) => {
                    return Err(invalid(at(), "hone takes text, image, tool_use and tool_result blocks"))
                }
                (_, _) => return Err(invalid(at(), "this block type is not allowed in this role's turn")),
            }
        }
        let role = match turn.role {
            Speaker::User => "user",
            Speaker::Assistant => "assistant",
        };
        let only_text = parts.iter().all(|p| p["type"] == "text");
        let content = if only_text {
            let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            (!text.is_empty()).then(|| json!(text.join("")))
        } else {
            Some(json!(parts))
        };
        match (content, calls.is_empty()) {
            (None, true) => {}
            (content, true) => messages.push(json!({"role": role, "content": content})),
            (content, false) => messages.push(json!({"role": role, "content": content, "tool_calls": calls})),
        }
    }
    let mut chat = json!({
        "model": request.model,
        "messages": messages,
        "max_completion_tokens": request.max_tokens,
    });
    let fields = vec![
        ("temperature", request.temperature.map(Value::from)),
        ("top_p", request.top_p.map(Value::from)),
        ("stop", request.stop_sequences.map(Value::from)),
        ("top_k", request.top_k.map(Value::from)),
        (crate::providers::ANTHROPIC_THINKING, request.thinking),
        ("user", request.metadata.and_then(|m| m.user_id).map(Value::from)),
    ];
    set_settings(&mut chat, fields, request.stream);
    if let Some(tools) = request.tools {
        chat["tools"] = tools
            .into_iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description,
                    "parameters": t.input_schema.unwrap_or_else(|| json!({"type": "object"})),
                }})
            })
            .collect();
    }
    if let Some(choice) = request.tool_choice {
        chat["tool_choice"] = openai_tool_choice(&choice)
            .ok_or_else(|| invalid("tool_choice", format!("unknown tool_choice {choice}")))?;
        if choice["disable_parallel_tool_use"] == true {
            chat["parallel_tool_calls"] = json!(false);
        }
    }
    chat_request(chat).map_err(|e| ApiError::invalid("invalid_request", e.message))
}

impl Door for MessagesDoor {
    fn name(&self) -> &'static str {
        "messages"
    }

    fn parse<'a>(&'a self, _state: &'a AppState, body: &'a [u8]) -> BoxFuture<'a, Result<Incoming, ApiError>> {
        Box::pin(async move {
            let request: MessagesRequest = crate::routes::parse_json(body)?;
            Ok(Incoming {
                request: to_chat(request)?,
                episode: None,
                door: DoorRecord::Messages,
            })
        })
    }

    fn answer(&self, call: &CallRecord) -> Result<Bytes, ApiError> {
        let response = call.response.as_ref().ok_or_else(no_answer)?;
        let (text, calls) = answer_blocks(response);
        let mut content: Vec<Value> = Vec::new();
        if !text.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        content.extend(calls);
        encode(&json!({
            "id": message_id(call.id),
            "type": "message",
            "role": "assistant",
            "model": call.request.model,
            "content": content,
            "stop_reason": stop_of(response.choices.first()).0,
            "stop_sequence": stop_of(response.choices.first()).1,
            "usage": usage(call.usage.as_ref()),
        }))
    }

    fn encoder(&self, call: CallId, request: &ChatCompletionRequest, _door: &DoorRecord) -> Box<dyn Encoder> {
        Box::new(MessagesEncoder {
            id: message_id(call),
            model: request.model.clone(),
            started: false,
            open: None,
            next_block: 0,
        })
    }

    fn error(&self, error: ApiError) -> Response {
        let status = error.status();
        let mut response = (status, encode(&error_body(&error)).unwrap_or_default()).into_response();
        response.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

fn no_answer() -> ApiError {
    ApiError::new(ErrorKind::Internal, "no_answer", "the call has no answer")
}

/// The Messages `stop_reason` and `stop_sequence` of an answer: a matched
/// stop sequence (an Anthropic upstream's, or vLLM's `stop_reason` string)
/// is `stop_sequence` with the sequence, as Anthropic reports it.
fn stop_of(choice: Option<&hone_types::openai::Choice>) -> (Option<&'static str>, Option<String>) {
    let Some(choice) = choice else {
        return (None, None);
    };
    let matched = choice
        .extra
        .get("stop_reason")
        .and_then(Value::as_str)
        .filter(|_| choice.finish_reason.as_deref() == Some("stop"));
    match matched {
        Some(sequence) => (Some("stop_sequence"), Some(sequence.to_owned())),
        None => (choice.finish_reason.as_deref().map(stop_reason), None),
    }
}

fn message_id(call: CallId) -> String {
    format!("msg_{}", call.hex())
}

/// The first choice's text and its tool calls as `tool_use` blocks
/// (arguments that are not a JSON object become `{}`: Anthropic's `input`
/// is always one; the call is flagged `invalid_tool_call` in the record).
fn answer_blocks(response: &ChatCompletionResponse) -> (String, Vec<Value>) {
    let Some(choice) = response.choices.first() else {
        return (String::new(), Vec::new());
    };
    let calls = choice
        .message
        .tool_calls()
        .iter()
        .map(|c| json!({"type": "tool_use", "id": c.id, "name": c.function.name, "input": tool_input(&c.function.arguments)}))
        .collect();
    (choice.message.text(), calls)
}

fn tool_input(arguments: &str) -> Value {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

fn error_type(error: &ApiError) -> &'static str {
    match error.kind {
        ErrorKind::InvalidRequest | ErrorKind::MethodNotAllowed | ErrorKind::Conflict => "invalid_request_error",
        ErrorKind::Unauthorized => "authentication_error",
        ErrorKind::Forbidden => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::PayloadTooLarge => "request_too_large",
        ErrorKind::RateLimited => "rate_limit_error",
        ErrorKind::Unavailable => "overloaded_error",
        ErrorKind::Upstream | ErrorKind::UpstreamTimeout | ErrorKind::Internal => "api_error",
    }
}

fn error_body(error: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(error), "message": error.message}})
}

/// Which content block is open in a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Open {
    Text(u32),
    /// A tool call: (block index, the chat stream's tool-call index).
    Tool(u32, u32),
}

struct MessagesEncoder {
    id: String,
    model: String,
    started: bool,
    open: Option<Open>,
    next_block: u32,
}

fn event(name: &str, body: Value) -> Bytes {
    sse_frame(Some(name), &serde_json::to_vec(&body).unwrap_or_default())
}

impl MessagesEncoder {
    fn start(&mut self, out: &mut Vec<Bytes>) {
        if !self.started {
            self.started = true;
            out.push(event(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                }}),
            ));
        }
    }

    fn close(&mut self, out: &mut Vec<Bytes>) {
        if let Some(Open::Text(index) | Open::Tool(index, _)) = self.open.take() {
            out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    fn open(&mut self, block: Value, out: &mut Vec<Bytes>) -> u32 {
        self.close(out);
        let index = self.next_block;
        self.next_block += 1;
        out.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        index
    }
}

impl Encoder for MessagesEncoder {
    fn event(&mut self, event_in: &StreamEvent) -> Vec<Bytes> {
        let mut out = Vec::new();
        self.start(&mut out);
        let Some(choice) = event_in.chunk.choices.first() else {
            return out;
        };
        if let Some(text) = choice.delta.content.as_deref().filter(|t| !t.is_empty()) {
            let index = match self.open {
                Some(Open::Text(index)) => index,
                _ => {
                    let index = self.open(json!({"type": "text", "text": ""}), &mut out);
                    self.open = Some(Open::Text(index));
                    index
                }
            };
            out.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
            ));
        }
        for call in choice.delta.tool_calls.iter().flatten() {
            let index = match self.open {
                Some(Open::Tool(index, of)) if of == call.index => index,
                _ => {
                    let function = call.function.as_ref();
                    let block = json!({
                        "type": "tool_use",
                        "id": call.id.clone().unwrap_or_default(),
                        "name": function.and_then(|f| f.name.clone()).unwrap_or_default(),
                        "input": {},
                    });
                    let index = self.open(block, &mut out);
                    self.open = Some(Open::Tool(index, call.index));
                    index
                }
            };
            if let Some(piece) = call
                .function
                .as_ref()
                .and_then(|f| f.arguments.as_deref())
                .filter(|a| !a.is_empty())
            {
                out.push(event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
        }
        out
    }

    fn done(&mut self, call: &CallRecord) -> Vec<Bytes> {
        let mut out = Vec::new();
        self.start(&mut out);
        self.close(&mut out);
        let (finish, sequence) = stop_of(call.response.as_ref().and_then(|r| r.choices.first()));
        out.push(event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": finish, "stop_sequence": sequence}, "usage": usage(call.usage.as_ref())}),
        ));
        out.push(event("message_stop", json!({"type": "message_stop"})));
        out
    }

    fn error(&mut self, error: &ApiError) -> Bytes {
        event("error", error_body(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ChatCompletionRequest, ApiError> {
        to_chat(serde_json::from_value(body).map_err(|e| ApiError::invalid("x", e.to_string()))?)
    }

    #[test]
    fn blocks_tools_and_results_become_chat_messages() {
        let request = chat(json!({
            "model": "assistant", "max_tokens": 64,
            "system": [{"type": "text", "text": "Be brief."}],
            "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "…", "signature": "s"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "And tomorrow?"}]},
                {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]}
            ]
        }))
        .unwrap();
        let m = serde_json::to_value(&request.messages).unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(m[1], json!({"role": "user", "content": "Weather in Paris?"}));
        assert_eq!(m[2]["content"], "Checking.");
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], r#"{"city":"Paris"}"#);
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "And tomorrow?"}));
        assert_eq!(m[5]["content"][0]["image_url"]["url"], "data:image/png;base64,AA");
        assert_eq!(request.tool_choice, Some(json!("required")));
        assert_eq!(request.extra["parallel_tool_calls"], false);
        assert_eq!(
            request.max_completion_tokens,
            Some(64),
            "the name every OpenAI model takes"
        );
        assert_eq!(request.max_tokens, None);
        assert_eq!(request.tools.as_ref().unwrap()[0].function.name, "get_weather");
    }

    #[test]
    fn stream_null_is_read_as_not_streamed_as_the_chat_door_does() {
        let request = chat(
            json!({"model": "a", "max_tokens": 5, "stream": null, "messages": [{"role": "user", "content": "x"}]}),
        )
        .unwrap();
        assert!(!request.is_stream());
    }

    #[test]
    fn what_cannot_be_served_is_refused_naming_the_block() {
        let e = chat(json!({"model": "a", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content[0]"));
        let e = chat(json!({"model": "a", "max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]})).unwrap_err();
        assert!(e.message.contains("not allowed"), "{}", e.message);
        let e =
            chat(json!({"model": "a", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
    }
}
