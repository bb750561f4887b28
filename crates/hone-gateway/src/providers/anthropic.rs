//! Anthropic's Messages API behind the OpenAI chat-completions format:
//! requests are rewritten to `POST /v1/messages`, answers and stream events
//! are rewritten back into OpenAI responses and chunks.

use super::{
    http_client, read_answer, send_stream, sse_events, status_error, transport_error, ChunkStream, Provider,
    ProviderError, StreamEvent,
};
use futures::StreamExt;
use hone_config::ProviderConfig;
use hone_types::openai::{
    ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse, Choice, ChunkChoice, Content, ContentPart,
    Delta, Extra, FunctionCall, FunctionCallDelta, Message, Role, Tool, ToolCall, ToolCallDelta, Usage,
};
use hone_types::Route;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

const DEFAULT_VERSION: &str = "2023-06-01";
/// Anthropic requires `max_tokens`; used when the client set no limit.
const DEFAULT_MAX_TOKENS: u32 = 4096;

pub struct AnthropicProvider {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    version: String,
    timeout: Duration,
}

impl AnthropicProvider {
    pub fn new(config: &ProviderConfig, api_key: Option<String>) -> Result<Self, String> {
        Ok(Self {
            client: http_client(config)?,
            url: format!("{}/v1/messages", config.base_url),
            api_key,
            version: config.api_version.clone().unwrap_or_else(|| DEFAULT_VERSION.to_owned()),
            timeout: config.timeout,
        })
    }

    fn post(&self, body: &MessagesRequest<'_>) -> reqwest::RequestBuilder {
        self.post_to(&self.url, body)
    }

    fn post_to(&self, url: &str, body: &impl Serialize) -> reqwest::RequestBuilder {
        let builder = self
            .client
            .post(url)
            .header("anthropic-version", &self.version)
            .json(body);
        match &self.api_key {
            Some(key) => builder.header("x-api-key", key),
            None => builder,
        }
    }

    /// The request's input tokens, counted by Anthropic's
    /// `/v1/messages/count_tokens` (the same body, less `max_tokens`).
    pub async fn count_tokens(&self, request: &ChatCompletionRequest) -> Result<u64, ProviderError> {
        #[derive(Deserialize)]
        struct Counted {
            input_tokens: u64,
        }
        let mut body =
            serde_json::to_value(to_anthropic(request, false)?).map_err(|e| ProviderError::Protocol(e.to_string()))?;
        if let Some(fields) = body.as_object_mut() {
            fields.remove("max_tokens");
        }
        let response = self
            .post_to(&format!("{}/count_tokens", self.url), &body)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout))?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        let answer = read_answer(response, self.timeout).await?;
        Ok(parse::<Counted>("token count", &answer)?.input_tokens)
    }
}

impl Provider for AnthropicProvider {
    async fn complete(
        &self,
        request: &ChatCompletionRequest,
        _route: &Route,
    ) -> Result<ChatCompletionResponse, ProviderError> {
        let response = self
            .post(&to_anthropic(request, false)?)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout))?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        let body = read_answer(response, self.timeout).await?;
        Ok(from_anthropic(parse("message", &body)?, unix_now()))
    }

    async fn stream(&self, request: &ChatCompletionRequest, _route: &Route) -> Result<ChunkStream, ProviderError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let response = send_stream(self.post(&to_anthropic(request, true)?), deadline, self.timeout).await?;
        let events = sse_events(response, deadline, self.timeout);
        let stream = async_stream::stream! {
            futures::pin_mut!(events);
            let mut converter = StreamConverter::new(unix_now());
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                };
                let name = event.event.as_deref().unwrap_or_default();
                if let Some(item) = converter.on_event(name, &event.data) {
                    let failed = item.is_err();
                    yield item.map(|chunk| StreamEvent { chunk, raw: None });
                    if failed || converter.done {
                        return;
                    }
                }
            }
        };
        Ok(Box::pin(stream))
    }
}

fn unix_now() -> i64 {
    hone_types::time::now_ms() / 1000
}

/// A request Anthropic cannot serve; 400 so that it is neither retried nor
/// sent on to a fallback provider.
fn unsupported(what: impl std::fmt::Display) -> ProviderError {
    ProviderError::Status {
        status: 400,
        message: format!("provider `anthropic` does not support {what}"),
        retry_after: None,
    }
}

fn parse<T: DeserializeOwned>(what: &str, data: &[u8]) -> Result<T, ProviderError> {
    serde_json::from_slice(data).map_err(|e| ProviderError::Protocol(format!("not an Anthropic {what}: {e}")))
}

// ---- request: OpenAI → Anthropic ----

#[derive(Debug, Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<Turn>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<AnthropicTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Debug, Serialize)]
struct Turn {
    role: &'static str,
    content: Vec<Value>,
}

#[derive(Debug, Serialize)]
struct AnthropicTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Value,
}

/// Rewrites a request. System and developer messages become `system`; tool
/// results become `tool_result` blocks of a user turn; consecutive turns of one
/// role merge, since Anthropic wants user and assistant to alternate.
/// `response_format`, `logprobs` and `seed` have no equivalent and are dropped.
fn to_anthropic(request: &ChatCompletionRequest, stream: bool) -> Result<MessagesRequest<'_>, ProviderError> {
    if request.n.is_some_and(|n| n > 1) {
        return Err(unsupported("n > 1"));
    }
    let mut system = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    for message in &request.messages {
        let (role, content) = match message.role {
            Role::System | Role::Developer => {
                system.push(message.text());
                continue;
            }
            Role::User => ("user", content_blocks(message.content.as_ref())?),
            Role::Assistant => {
                let mut blocks = content_blocks(message.content.as_ref())?;
                for call in message.tool_calls() {
                    blocks.push(tool_use_block(call)?);
                }
                ("assistant", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.as_deref().unwrap_or_default(),
                    "content": message.text(),
                })],
            ),
            Role::Function => return Err(unsupported("the legacy `function` role")),
        };
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ if !content.is_empty() => turns.push(Turn { role, content }),
            _ => {}
        }
    }
    Ok(MessagesRequest {
        model: &request.model,
        max_tokens: request.max_output_tokens().unwrap_or(DEFAULT_MAX_TOKENS),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages: turns,
        temperature: request.temperature,
        top_p: request.top_p,
        // Carried through chat requests as extra fields (the Messages door
        // puts them there, a chat client may send `top_k`).
        top_k: request.extra.get("top_k"),
        thinking: request.extra.get(super::ANTHROPIC_THINKING),
        stop_sequences: request.stop.as_ref().map(|s| s.to_vec()),
        tools: request
            .tools
            .as_ref()
            .map(|tools| tools.iter().map(anthropic_tool).collect()),
        tool_choice: request.tool_choice.as_ref().map(tool_choice).transpose()?,
        stream,
    })
}

fn content_blocks(content: Option<&Content>) -> Result<Vec<Value>, ProviderError> {
    match content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(text_block(text).into_iter().collect()),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(|part| match part.kind.as_str() {
                "text" => text_block(part.text.as_deref().unwrap_or_default()).map(Ok),
                "image_url" => Some(image_block(part)),
                other => Some(Err(unsupported(format!("content parts of type `{other}`")))),
            })
            .collect(),
    }
}

/// Anthropic rejects blank text blocks, so none is made.
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn image_block(part: &ContentPart) -> Result<Value, ProviderError> {
    let url = part.image_url.as_ref().map(|i| i.url.as_str()).unwrap_or_default();
    let source = match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
        Some((media_type, data)) => json!({"type": "base64", "media_type": media_type, "data": data}),
        None if url.starts_with("https://") || url.starts_with("http://") => json!({"type": "url", "url": url}),
        None => return Err(unsupported("image URLs other than base64 data URLs and http(s) URLs")),
    };
    Ok(json!({"type": "image", "source": source}))
}

/// Empty arguments (a call without parameters) become `{}`.
fn tool_use_block(call: &ToolCall) -> Result<Value, ProviderError> {
    let arguments = call.function.arguments.trim();
    let input: Value = if arguments.is_empty() {
        json!({})
    } else {
        serde_json::from_str(arguments).map_err(|e| {
            ProviderError::Protocol(format!(
                "the arguments of tool call `{}` (`{}`) are not JSON: {e}",
                call.id, call.function.name
            ))
        })?
    };
    Ok(json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}))
}

fn anthropic_tool(tool: &Tool) -> AnthropicTool<'_> {
    AnthropicTool {
        name: &tool.function.name,
        description: tool.function.description.as_deref(),
        input_schema: tool
            .function
            .parameters
            .clone()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    }
}

/// An Anthropic `tool_choice` as OpenAI's; [`tool_choice`] is the other way.
pub(crate) fn openai_tool_choice(choice: &Value) -> Option<Value> {
    Some(match (choice["type"].as_str()?, choice["name"].as_str()) {
        ("auto", _) => json!("auto"),
        ("any", _) => json!("required"),
        ("none", _) => json!("none"),
        ("tool", Some(name)) => json!({"type": "function", "function": {"name": name}}),
        _ => return None,
    })
}

fn tool_choice(choice: &Value) -> Result<Value, ProviderError> {
    Ok(
        match (
            choice.as_str(),
            choice.pointer("/function/name").and_then(Value::as_str),
        ) {
            (Some("auto"), _) => json!({"type": "auto"}),
            (Some("required"), _) => json!({"type": "any"}),
            (Some("none"), _) => json!({"type": "none"}),
            (None, Some(name)) => json!({"type": "tool", "name": name}),
            _ => return Err(unsupported(format!("tool_choice {choice}"))),
        },
    )
}

// ---- response: Anthropic → OpenAI ----

#[derive(Debug, Deserialize)]
struct MessagesResponse {
    id: String,
    model: String,
    content: Vec<Block>,
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
    usage: AnthropicUsage,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking, server tools and blocks added later: not part of the answer.
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

/// Anthropic counts cache reads and writes apart from `input_tokens`;
/// OpenAI's `prompt_tokens` includes them, with the reads in
/// `prompt_tokens_details.cached_tokens` — so prices and budgets see every
/// prompt token once, at its own price.
fn usage(u: &AnthropicUsage) -> Usage {
    let read = u.cache_read_input_tokens.unwrap_or(0);
    let written = u.cache_creation_input_tokens.unwrap_or(0);
    let prompt = u.input_tokens + read + written;
    let mut extra = Extra::new();
    if let Some(written) = u.cache_creation_input_tokens {
        extra.insert(hone_types::openai::CACHE_WRITE_TOKENS.to_owned(), written.into());
    }
    let mut usage = Usage {
        prompt_tokens: prompt,
        completion_tokens: u.output_tokens,
        total_tokens: prompt + u.output_tokens,
        extra,
    };
    if u.cache_read_input_tokens.is_some() {
        usage.set_cached_prompt_tokens(read);
    }
    usage
}

/// The other way (the `/v1/messages` door): OpenAI usage as Anthropic
/// reports it, cache reads and writes apart from `input_tokens`.
pub(crate) fn anthropic_usage(usage: Option<&Usage>) -> Value {
    let Some(u) = usage else {
        return json!({"input_tokens": 0, "output_tokens": 0});
    };
    let (read, written) = (u.cached_prompt_tokens(), u.cache_write_tokens());
    json!({
        "input_tokens": u.prompt_tokens.saturating_sub(read + written),
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
        "output_tokens": u.completion_tokens,
    })
}

/// Anthropic's `stop_reason` as an OpenAI `finish_reason`; [`stop_reason`]
/// is the other way (the `/v1/messages` door).
pub(crate) fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop", // end_turn, stop_sequence, pause_turn
    }
    .to_owned()
}

pub(crate) fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

fn from_anthropic(message: MessagesResponse, created: i64) -> ChatCompletionResponse {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in message.content {
        match block {
            Block::Text { text: t } => text.push_str(&t),
            Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                kind: "function".to_owned(),
                function: FunctionCall {
                    name,
                    arguments: input.to_string(),
                },
            }),
            Block::Other => {}
        }
    }
    ChatCompletionResponse {
        id: message.id,
        object: "chat.completion".to_owned(),
        created,
        model: message.model,
        choices: vec![Choice {
            index: 0,
            message: Message::answer(text, tool_calls, None),
            finish_reason: message.stop_reason.as_deref().map(finish_reason),
            logprobs: Some(Value::Null),
            extra: matched_stop(message.stop_sequence),
        }],
        usage: Some(usage(&message.usage)),
        extra: Extra::new(),
    }
}

// ---- streaming: Anthropic events → OpenAI chunks ----

#[derive(Debug, Deserialize)]
struct MessageStart {
    message: StartedMessage,
}

#[derive(Debug, Deserialize)]
struct StartedMessage {
    id: String,
    model: String,
    #[serde(default)]
    usage: AnthropicUsage,
}

#[derive(Debug, Deserialize)]
struct BlockStart {
    index: u32,
    content_block: Block,
}

#[derive(Debug, Deserialize)]
struct BlockDeltaEvent {
    index: u32,
    delta: BlockDelta,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// Thinking and signature deltas.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct MessageDelta {
    delta: StopInfo,
    usage: Option<AnthropicUsage>,
}

#[derive(Debug, Deserialize)]
struct StopInfo {
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
}

/// The stop sequence that ended the answer, kept beside `finish_reason`
/// (which says only `stop`) as vLLM keeps it: in the choice's `stop_reason`.
/// The `/v1/messages` door gives it back as `stop_sequence`.
fn matched_stop(stop_sequence: Option<String>) -> Extra {
    let mut extra = Extra::new();
    if let Some(sequence) = stop_sequence {
        extra.insert("stop_reason".to_owned(), Value::String(sequence));
    }
    extra
}

#[derive(Debug, Deserialize)]
struct ErrorEvent {
    error: ErrorInfo,
}

#[derive(Debug, Deserialize)]
struct ErrorInfo {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

/// Turns one Anthropic stream, event by event, into OpenAI chunks. Pure: the
/// HTTP side only feeds it events.
#[derive(Debug)]
struct StreamConverter {
    id: String,
    model: String,
    created: i64,
    usage: AnthropicUsage,
    /// Anthropic content-block index → OpenAI tool-call index.
    tool_indices: HashMap<u32, u32>,
    /// Set after `message_stop` or an error: nothing follows.
    done: bool,
}

impl StreamConverter {
    fn new(created: i64) -> Self {
        Self {
            id: String::new(),
            model: String::new(),
            created,
            usage: AnthropicUsage::default(),
            tool_indices: HashMap::new(),
            done: false,
        }
    }

    /// The chunk (or error) one event becomes, if any: `ping`,
    /// `content_block_stop` and unknown events become nothing.
    fn on_event(&mut self, name: &str, data: &[u8]) -> Option<Result<ChatCompletionChunk, ProviderError>> {
        let result = self.convert(name, data).transpose();
        if matches!(result, Some(Err(_))) {
            self.done = true;
        }
        result
    }

    fn convert(&mut self, name: &str, data: &[u8]) -> Result<Option<ChatCompletionChunk>, ProviderError> {
        Ok(match name {
            "message_start" => {
                let MessageStart { message } = parse(name, data)?;
                (self.id, self.model, self.usage) = (message.id, message.model, message.usage);
                Some(self.chunk(Delta {
                    role: Some(Role::Assistant),
                    ..Delta::default()
                }))
            }
            "content_block_start" => match parse(name, data)? {
                BlockStart {
                    index,
                    content_block: Block::ToolUse { id, name, .. },
                } => {
                    let tool_index = self.tool_indices.len() as u32;
                    self.tool_indices.insert(index, tool_index);
                    Some(self.tool_chunk(ToolCallDelta {
                        index: tool_index,
                        id: Some(id),
                        kind: Some("function".to_owned()),
                        function: Some(FunctionCallDelta {
                            name: Some(name),
                            arguments: Some(String::new()),
                        }),
                    }))
                }
                _ => None,
            },
            "content_block_delta" => match parse(name, data)? {
                BlockDeltaEvent {
                    delta: BlockDelta::TextDelta { text },
                    ..
                } => Some(self.chunk(Delta {
                    content: Some(text),
                    ..Delta::default()
                })),
                BlockDeltaEvent {
                    index,
                    delta: BlockDelta::InputJsonDelta { partial_json },
                } => {
                    let tool_index = *self.tool_indices.get(&index).ok_or_else(|| {
                        ProviderError::Protocol(format!(
                            "input_json_delta for content block {index}, which is no tool_use"
                        ))
                    })?;
                    Some(self.tool_chunk(ToolCallDelta {
                        index: tool_index,
                        function: Some(FunctionCallDelta {
                            name: None,
                            arguments: Some(partial_json),
                        }),
                        ..ToolCallDelta::default()
                    }))
                }
                BlockDeltaEvent {
                    delta: BlockDelta::Other,
                    ..
                } => None,
            },
            "message_delta" => {
                let MessageDelta { delta, usage } = parse(name, data)?;
                if let Some(usage) = usage {
                    self.usage.output_tokens = usage.output_tokens;
                }
                let matched = delta.stop_sequence;
                delta.stop_reason.map(|reason| {
                    let mut chunk = self.chunk(Delta::default());
                    chunk.choices[0].finish_reason = Some(finish_reason(&reason));
                    chunk.choices[0].extra = matched_stop(matched);
                    chunk
                })
            }
            "message_stop" => {
                self.done = true;
                let mut chunk = self.chunk(Delta::default());
                chunk.choices.clear();
                chunk.usage = Some(usage(&self.usage));
                Some(chunk)
            }
            "error" => {
                let ErrorEvent { error } = parse(name, data)?;
                return Err(ProviderError::Status {
                    status: if error.kind == "overloaded_error" { 529 } else { 502 },
                    message: error.message,
                    retry_after: None,
                });
            }
            _ => None,
        })
    }

    fn chunk(&self, delta: Delta) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".to_owned(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason: None,
                logprobs: None,
                extra: Extra::new(),
            }],
            usage: None,
            extra: Extra::new(),
        }
    }

    fn tool_chunk(&self, call: ToolCallDelta) -> ChatCompletionChunk {
        self.chunk(Delta {
            tool_calls: Some(vec![call]),
            ..Delta::default()
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "the fake upstream lives as long as the test")]
mod tests {
    use super::*;
    use crate::sse::SseParser;
    use hone_types::stream::StreamAccumulator;

    fn mapped(request: Value) -> Result<Value, ProviderError> {
        let request: ChatCompletionRequest = serde_json::from_value(request).unwrap();
        to_anthropic(&request, false).map(|body| serde_json::to_value(body).unwrap())
    }

    fn with_messages(messages: Value) -> Value {
        json!({"model": "claude", "messages": messages})
    }

    #[test]
    fn maps_system_tool_calls_tool_results_and_images() {
        let body = mapped(json!({
            "model": "claude-sonnet-4-5",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
                {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
                {"role": "user", "content": [
                    {"type": "text", "text": "And this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}
                ]}
            ],
            "tools": [
                {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "now"}}
            ],
            "tool_choice": "auto", "max_completion_tokens": 100, "max_tokens": 5, "temperature": 0.5, "top_p": 0.9,
            "stop": "END", "response_format": {"type": "json_object"}, "seed": 7, "logprobs": true
        }))
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 100,
                "system": "Be brief.\n\nUse metric units.",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "call_2", "name": "now", "input": {}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                        {"type": "tool_result", "tool_use_id": "call_2", "content": "noon"},
                        {"type": "text", "text": "And this?"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}
                    ]}
                ],
                "temperature": 0.5,
                "top_p": 0.9,
                "stop_sequences": ["END"],
                "tools": [
                    {"name": "get_weather", "description": "Current weather",
                        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                    {"name": "now", "input_schema": {"type": "object", "properties": {}}}
                ],
                "tool_choice": {"type": "auto"}
            })
        );
        let user = with_messages(json!([{"role": "user", "content": "hi"}]));
        assert_eq!(mapped(user).unwrap()["max_tokens"], 4096);
    }

    #[test]
    fn maps_tool_choice_and_rejects_what_anthropic_cannot_do() {
        let choice = |choice: Value| {
            let mut request = with_messages(json!([{"role": "user", "content": "hi"}]));
            request["tool_choice"] = choice;
            mapped(request).map(|body| body["tool_choice"].clone())
        };
        assert_eq!(choice(json!("required")).unwrap(), json!({"type": "any"}));
        assert_eq!(choice(json!("none")).unwrap(), json!({"type": "none"}));
        assert_eq!(
            choice(json!({"type": "function", "function": {"name": "get_weather"}})).unwrap(),
            json!({"type": "tool", "name": "get_weather"})
        );
        assert_eq!(choice(json!("sometimes")).unwrap_err().status(), Some(400));

        let mut request = with_messages(json!([{"role": "user", "content": "hi"}]));
        request["n"] = json!(2);
        match mapped(request).unwrap_err() {
            ProviderError::Status {
                status,
                message,
                retry_after,
            } => {
                assert_eq!((status, retry_after), (400, None));
                assert_eq!(message, "provider `anthropic` does not support n > 1");
            }
            other => panic!("unexpected {other:?}"),
        }

        let bad_arguments = with_messages(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}
        ]));
        match mapped(bad_arguments).unwrap_err() {
            ProviderError::Protocol(message) => assert!(message.contains("call_9"), "{message}"),
            other => panic!("unexpected {other:?}"),
        }
        let audio = with_messages(json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]));
        assert_eq!(mapped(audio).unwrap_err().status(), Some(400));
    }

    #[test]
    fn maps_a_response_with_text_tool_use_and_cache_usage() {
        let message: MessagesResponse = serde_json::from_value(json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [
                {"type": "thinking", "thinking": "…", "signature": "sig"},
                {"type": "text", "text": "Checking "},
                {"type": "text", "text": "now."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris", "days": 2}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 30, "output_tokens": 7}
        }))
        .unwrap();
        let response = from_anthropic(message, 1_700_000_000);
        assert_eq!(
            (response.id.as_str(), response.object.as_str()),
            ("msg_01", "chat.completion")
        );
        assert_eq!(
            (response.model.as_str(), response.created),
            ("claude-sonnet-4-5", 1_700_000_000)
        );
        let choice = &response.choices[0];
        assert_eq!(choice.message.text(), "Checking now.");
        let call = &choice.message.tool_calls()[0];
        assert_eq!((call.id.as_str(), call.kind.as_str()), ("toolu_01", "function"));
        assert_eq!(call.function.name, "get_weather");
        assert_eq!(call.function.arguments, r#"{"city":"Paris","days":2}"#);
        assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
        let usage = response.usage.unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
            (42, 7, 49),
            "prompt tokens include the 30 read from the cache"
        );
        assert_eq!((usage.cached_prompt_tokens(), usage.cache_write_tokens()), (30, 0));
        // And back, as the `/v1/messages` door reports it: Anthropic's own numbers.
        let back = anthropic_usage(Some(&usage));
        assert_eq!(
            (
                &back["input_tokens"],
                &back["cache_read_input_tokens"],
                &back["output_tokens"]
            ),
            (&json!(12), &json!(30), &json!(7))
        );

        for (stop, finish) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
        ] {
            assert_eq!(finish_reason(stop), finish);
            if stop != "stop_sequence" {
                assert_eq!(stop_reason(finish), stop, "the two directions agree");
            }
        }
    }

    /// A recorded stream: text, then two tool calls whose input arrives in pieces.
    const TRANSCRIPT: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_read_input_tokens":100,"output_tokens":2}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me check"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" both cities."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"is\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_02","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Rome\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"#;

    fn convert(transcript: &str) -> Vec<Result<ChatCompletionChunk, ProviderError>> {
        let mut parser = SseParser::default();
        parser.push(transcript.as_bytes());
        let mut converter = StreamConverter::new(1_700_000_000);
        let mut out = Vec::new();
        while let Some(event) = parser.next_event() {
            assert!(!converter.done, "an event after the end");
            out.extend(converter.on_event(event.event.as_deref().unwrap_or_default(), &event.data));
        }
        out
    }

    fn assert_reassembles(chunks: &[ChatCompletionChunk]) {
        assert_eq!(chunks[0].choices[0].delta.role, Some(Role::Assistant));
        assert!(chunks
            .iter()
            .all(|c| c.id == "msg_01" && c.model == "claude-sonnet-4-5"));
        let last = chunks.last().unwrap();
        assert!(last.choices.is_empty() && last.usage.is_some());
        let mut accumulator = StreamAccumulator::new();
        chunks.iter().for_each(|c| accumulator.push(c));
        let response = accumulator.response();
        let choice = &response.choices[0];
        assert_eq!(choice.message.text(), "Let me check both cities.");
        let calls: Vec<_> = choice
            .message
            .tool_calls()
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.kind.as_str(),
                    c.function.name.as_str(),
                    c.function.arguments.as_str(),
                )
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("toolu_01", "function", "get_weather", r#"{"city": "Paris"}"#),
                ("toolu_02", "function", "get_weather", r#"{"city": "Rome"}"#),
            ]
        );
        assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
        let usage = response.usage.unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
            (572, 89, 661)
        );
        assert_eq!(usage.cached_prompt_tokens(), 100);
    }

    #[test]
    fn a_recorded_stream_reassembles_into_text_tool_calls_and_usage() {
        let chunks: Vec<_> = convert(TRANSCRIPT).into_iter().map(Result::unwrap).collect();
        assert_reassembles(&chunks);
    }

    #[test]
    fn error_events_become_status_errors() {
        let overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let out = convert(overloaded);
        assert!(
            matches!(&out[..], [Err(ProviderError::Status { status: 529, message, retry_after: None })] if message == "Overloaded")
        );
        let api =
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n";
        assert_eq!(convert(api)[0].as_ref().unwrap_err().status(), Some(502));
        let garbled = "event: content_block_delta\ndata: {\"index\":0}\n\n";
        assert!(matches!(convert(garbled)[..], [Err(ProviderError::Protocol(_))]));
    }

    /// The HTTP side, against a local stand-in for the Messages API.
    #[tokio::test]
    async fn talks_to_the_messages_endpoint() {
        use axum::http::HeaderMap;
        use std::sync::{Arc, Mutex};

        let seen: Arc<Mutex<Vec<(HeaderMap, Value)>>> = Arc::default();
        let record = seen.clone();
        let app = axum::Router::new().route(
            "/v1/messages",
            axum::routing::post(move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| async move {
                let stream = body["stream"] == true;
                record.lock().unwrap().push((headers, body));
                if stream {
                    ([("content-type", "text/event-stream")], TRANSCRIPT.to_owned())
                } else {
                    let message = json!({"id": "msg_02", "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                        "content": [{"type": "text", "text": "Hello."}], "usage": {"input_tokens": 3, "output_tokens": 2}});
                    ([("content-type", "application/json")], message.to_string())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });

        let config = ProviderConfig {
            name: "claude".into(),
            kind: hone_config::ProviderKind::Anthropic,
            base_url: format!("http://{address}"),
            api_key_env: None,
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            max_retries: 0,
            backoff: Duration::ZERO,
            api_version: None,
            engine: None,
            prices: Default::default(),
            local: None,
        };
        let route = Route {
            provider: "claude".into(),
            model: "claude-sonnet-4-5".into(),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        };
        let provider = AnthropicProvider::new(&config, Some("sk-ant-test".into())).unwrap();
        let request: ChatCompletionRequest = serde_json::from_value(json!({
            "model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();

        let response = provider.complete(&request, &route).await.unwrap();
        assert_eq!(response.choices[0].message.text(), "Hello.");
        assert_eq!(response.choices[0].finish_reason.as_deref(), Some("stop"));

        let events: Vec<_> = provider.stream(&request, &route).await.unwrap().collect().await;
        let chunks: Vec<_> = events.into_iter().map(|e| e.unwrap().chunk).collect();
        assert_reassembles(&chunks);

        let seen = seen.lock().unwrap();
        let (headers, body) = &seen[0];
        assert_eq!(headers["x-api-key"], "sk-ant-test");
        assert_eq!(headers["anthropic-version"], "2023-06-01");
        assert_eq!(headers["content-type"], "application/json");
        assert!(body.get("stream").is_none());
        assert_eq!(seen[1].1["stream"], true);
    }
}
