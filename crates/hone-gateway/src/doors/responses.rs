//! `POST /v1/responses` and `GET /v1/responses/{id}`: OpenAI's Responses
//! API, translated to chat completions for every provider (the embedded
//! engine included) and back. Input items (messages, `function_call`,
//! `function_call_output`), `instructions`, function tools, `text.format`
//! (structured output) and `previous_response_id` are read; the answer is a
//! `response` object with `message` and `function_call` output items, and a
//! stream is the Responses event sequence (`response.created` …
//! `response.completed`).
//!
//! A response is a recorded call: its id is `resp_` and the call id's hex
//! digits, so `previous_response_id` and `GET` read the store, and a chained
//! response joins its predecessor's episode.

use super::{chat_request, encode, set_settings, sse_frame, Door, Encoder, Incoming};
use crate::error::{ApiError, ErrorKind};
use crate::providers::StreamEvent;
use crate::state::AppState;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use hone_types::call::{Door as DoorRecord, ResponsesCall};
use hone_types::openai::{ChatCompletionRequest, Message, Role};
use hone_types::{CallId, CallOutcome, CallRecord, EpisodeId};
use serde::Deserialize;
use serde_json::{json, Map, Value};

pub struct ResponsesDoor;

/// The id of the response a call made.
pub fn response_id(call: CallId) -> String {
    format!("resp_{}", call.hex())
}

fn call_of(response_id: &str) -> Option<CallId> {
    CallId::parse(response_id.strip_prefix("resp_")?)
}

/// The call whose output a client sends back as input: clients that keep
/// the conversation themselves (the OpenAI Agents SDK by default) echo the
/// output items with their ids, `msg_<call>` and `fc_<call>_<n>`. The
/// newest such item names the call the request continues.
fn echoed_call(input: Option<&Input>) -> Option<CallId> {
    let Some(Input::Items(items)) = input else {
        return None;
    };
    items.iter().rev().find_map(|item| {
        let id = item.get("id")?.as_str()?;
        let rest = id.strip_prefix("msg_").or_else(|| id.strip_prefix("fc_"))?;
        CallId::parse(rest.split('_').next()?)
    })
}

#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    model: String,
    #[serde(default)]
    input: Option<Input>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Option<Vec<ToolDefinition>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    text: Option<TextSettings>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default, deserialize_with = "super::false_if_null")]
    stream: bool,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    reasoning: Option<Reasoning>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    service_tier: Option<String>,
    #[serde(default)]
    prompt_cache_key: Option<String>,
    #[serde(default)]
    safety_identifier: Option<String>,
    #[serde(default)]
    top_logprobs: Option<u32>,
    #[serde(default)]
    store: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct Reasoning {
    #[serde(default)]
    effort: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TextSettings {
    #[serde(default)]
    format: Option<Value>,
    #[serde(default)]
    verbosity: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ToolDefinition {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default)]
    strict: Option<bool>,
}

/// An input message (`type` may be left out).
#[derive(Debug, Deserialize)]
struct MessageItem {
    role: Role,
    content: MessageContent,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum MessageContent {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    InputText {
        text: String,
    },
    OutputText {
        text: String,
    },
    Refusal {
        refusal: String,
    },
    InputImage {
        #[serde(default)]
        image_url: Option<String>,
        #[serde(default)]
        detail: Option<String>,
    },
    #[serde(other)]
    Unsupported,
}

#[derive(Debug, Deserialize)]
struct FunctionCallItem {
    call_id: String,
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Debug, Deserialize)]
struct FunctionOutputItem {
    call_id: String,
    output: MessageContent,
}

fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError::invalid("invalid_request", message).with_param(Some(param.into()))
}

fn typed<T: serde::de::DeserializeOwned>(item: Value, at: &str) -> Result<T, ApiError> {
    serde_json::from_value(item).map_err(|e| invalid(at, format!("invalid value for `{at}`: {e}")))
}

impl MessageContent {
    /// Chat content: a string when it is all text, parts otherwise.
    fn into_chat(self, at: &str) -> Result<Value, ApiError> {
        let parts = match self {
            MessageContent::Text(text) => return Ok(json!(text)),
            MessageContent::Parts(parts) => parts,
        };
        let mut out = Vec::new();
        for (j, part) in parts.into_iter().enumerate() {
            out.push(match part {
                Part::InputText { text } | Part::OutputText { text } | Part::Refusal { refusal: text } => {
                    json!({"type": "text", "text": text})
                }
                Part::InputImage {
                    image_url: Some(url),
                    detail,
                } => json!({"type": "image_url", "image_url": {"url": url, "detail": detail}}),
                Part::InputImage { image_url: None, .. } | Part::Unsupported => {
                    return Err(invalid(
                        format!("{at}.content[{j}]"),
                        "hone takes input_text, output_text, refusal and input_image (by URL) content",
                    ))
                }
            });
        }
        if out.iter().all(|p| p["type"] == "text") {
            let text: Vec<&str> = out.iter().filter_map(|p| p["text"].as_str()).collect();
            return Ok(json!(text.join("")));
        }
        Ok(json!(out))
    }

    fn text(self) -> String {
        match self {
            MessageContent::Text(text) => text,
            MessageContent::Parts(parts) => parts
                .into_iter()
                .filter_map(|p| match p {
                    Part::InputText { text } | Part::OutputText { text } => Some(text),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// Appends input items to chat messages: a `function_call` joins the
/// assistant message before it (one turn may hold text and several calls).
fn push_items(messages: &mut Vec<Value>, items: Vec<Value>) -> Result<(), ApiError> {
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("message").to_owned();
        match kind.as_str() {
            "message" => {
                let message: MessageItem = typed(item, &at)?;
                let content = message.content.into_chat(&at)?;
                messages.push(json!({"role": message.role, "content": content}));
            }
            "function_call" => {
                let call: FunctionCallItem = typed(item, &at)?;
                let call = json!({"id": call.call_id, "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments}});
                match messages.last_mut() {
                    Some(last) if last["role"] == "assistant" => match last["tool_calls"].as_array_mut() {
                        Some(calls) => calls.push(call),
                        None => last["tool_calls"] = json!([call]),
                    },
                    _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let output: FunctionOutputItem = typed(item, &at)?;
                messages.push(json!({"role": "tool", "tool_call_id": output.call_id, "content": output.output.text()}));
            }
            // The model's reasoning from an earlier turn: not sent on.
            "reasoning" => {}
            other => {
                return Err(invalid(
                    format!("{at}.type"),
                    format!("hone takes message, function_call and function_call_output input items, not `{other}`"),
                ))
            }
        }
    }
    Ok(())
}

/// The conversation a chained response continues: the earlier call's
/// messages (less its own instructions) and its answer.
fn history(previous: &CallRecord) -> Vec<Value> {
    let skip = match &previous.door {
        DoorRecord::Responses(ResponsesCall {
            instructions: Some(_), ..
        }) => 1,
        _ => 0,
    };
    let mut messages: Vec<Value> = previous
        .request
        .messages
        .iter()
        .skip(skip)
        .map(|m| serde_json::to_value(m).unwrap_or_default())
        .collect();
    if let Some(choice) = previous.response.as_ref().and_then(|r| r.choices.first()) {
        let mut answer = choice.message.clone();
        answer.extra.clear();
        messages.push(serde_json::to_value(&answer).unwrap_or_default());
    }
    messages
}

async fn previous_call(state: &AppState, id: &str, agent: &str) -> Result<CallRecord, ApiError> {
    let not_found = || {
        ApiError::not_found(
            "previous_response_not_found",
            format!("previous response `{id}` was not found"),
        )
        .with_param(Some("previous_response_id".into()))
    };
    let call = stored(state, id).await?.ok_or_else(not_found)?;
    // Another agent's response answers exactly like one that does not exist.
    if call.agent != agent || call.outcome != CallOutcome::Ok {
        return Err(not_found());
    }
    Ok(call)
}

/// The episode of the call whose output items the request sends back, when
/// it was this agent's; otherwise none (the request starts an episode).
async fn echoed_episode(state: &AppState, request: &ResponsesRequest) -> Option<EpisodeId> {
    let call = echoed_call(request.input.as_ref())?;
    match stored(state, &response_id(call)).await {
        Ok(Some(previous)) if previous.agent == request.model => Some(previous.episode_id),
        _ => None,
    }
}

/// The recorded call a response id names, once the recorder has caught up.
pub(crate) async fn stored(state: &AppState, id: &str) -> Result<Option<CallRecord>, ApiError> {
    let Some(call) = call_of(id) else {
        return Ok(None);
    };
    state.caught_up(false).await?;
    let store = state.store.clone();
    let record = tokio::task::spawn_blocking(move || store.call(call))
        .await
        .map_err(|e| ApiError::new(ErrorKind::Internal, "store_task_failed", e.to_string()))??;
    Ok(record.filter(|c| matches!(c.door, DoorRecord::Responses(_))))
}

/// The chat-completions request a Responses request asks for; `history`
/// is the conversation it continues.
fn to_chat(request: ResponsesRequest, history: Vec<Value>) -> Result<(ChatCompletionRequest, ResponsesCall), ApiError> {
    let mut messages = Vec::new();
    if let Some(instructions) = &request.instructions {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    messages.extend(history);
    match request.input {
        Some(Input::Text(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Input::Items(items)) => push_items(&mut messages, items)?,
        None => {}
    }
    let mut chat = json!({"model": request.model, "messages": messages});
    let fields = vec![
        ("temperature", request.temperature.map(Value::from)),
        ("top_p", request.top_p.map(Value::from)),
        ("max_completion_tokens", request.max_output_tokens.map(Value::from)),
        ("parallel_tool_calls", request.parallel_tool_calls.map(Value::from)),
        ("user", request.user.map(Value::from)),
        (
            "reasoning_effort",
            request.reasoning.and_then(|r| r.effort).map(Value::from),
        ),
        // Settings with the same meaning in Chat Completions pass through.
        ("service_tier", request.service_tier.map(Value::from)),
        ("prompt_cache_key", request.prompt_cache_key.map(Value::from)),
        ("safety_identifier", request.safety_identifier.map(Value::from)),
        ("logprobs", request.top_logprobs.map(|_| Value::from(true))),
        ("top_logprobs", request.top_logprobs.map(Value::from)),
        ("store", request.store.map(Value::from)),
        ("metadata", request.metadata.clone()),
        (
            "verbosity",
            request.text.as_ref().and_then(|t| t.verbosity.clone()).map(Value::from),
        ),
    ];
    set_settings(&mut chat, fields, request.stream);
    if let Some(tools) = request.tools {
        let mut chat_tools = Vec::new();
        for (i, tool) in tools.into_iter().enumerate() {
            if tool.kind != "function" {
                return Err(invalid(
                    format!("tools[{i}].type"),
                    format!("hone serves function tools only, not `{}`", tool.kind),
                ));
            }
            let name = tool
                .name
                .ok_or_else(|| invalid(format!("tools[{i}].name"), "a function tool needs `name`"))?;
            chat_tools.push(json!({"type": "function", "function": {
                "name": name, "description": tool.description, "parameters": tool.parameters, "strict": tool.strict,
            }}));
        }
        chat["tools"] = json!(chat_tools);
    }
    if let Some(choice) = request.tool_choice {
        chat["tool_choice"] = match (choice.as_str(), choice["type"].as_str(), choice["name"].as_str()) {
            (Some(mode @ ("auto" | "none" | "required")), _, _) => json!(mode),
            (None, Some("function"), Some(name)) => json!({"type": "function", "function": {"name": name}}),
            _ => return Err(invalid("tool_choice", format!("unsupported tool_choice {choice}"))),
        };
    }
    if let Some(format) = request.text.and_then(|t| t.format) {
        chat["response_format"] = match format["type"].as_str() {
            Some("text") => Value::Null,
            Some("json_object") => json!({"type": "json_object"}),
            Some("json_schema") => {
                let mut schema = format.clone();
                if let Some(o) = schema.as_object_mut() {
                    o.remove("type");
                }
                json!({"type": "json_schema", "json_schema": schema})
            }
            _ => return Err(invalid("text.format.type", format!("unsupported text format {format}"))),
        };
        if chat["response_format"].is_null() {
            if let Some(o) = chat.as_object_mut() {
                o.remove("response_format");
            }
        }
    }
    let chat = chat_request(chat).map_err(|e| {
        let message = if e.param.as_deref() == Some("messages") {
            "`input` must not be empty".to_owned()
        } else {
            e.message
        };
        ApiError::invalid("invalid_request", message)
    })?;
    let call = ResponsesCall {
        instructions: request.instructions,
        previous_response_id: request.previous_response_id,
        metadata: request.metadata,
    };
    Ok((chat, call))
}

impl Door for ResponsesDoor {
    fn name(&self) -> &'static str {
        "responses"
    }

    fn parse<'a>(&'a self, state: &'a AppState, body: &'a [u8]) -> BoxFuture<'a, Result<Incoming, ApiError>> {
        Box::pin(async move {
            let request: ResponsesRequest = crate::routes::parse_json(body)?;
            let (history, episode) = match &request.previous_response_id {
                Some(id) => {
                    let previous = previous_call(state, id, &request.model).await?;
                    (history(&previous), Some(previous.episode_id))
                }
                None => (Vec::new(), echoed_episode(state, &request).await),
            };
            let (request, call) = to_chat(request, history)?;
            Ok(Incoming {
                request,
                episode,
                door: DoorRecord::Responses(call),
            })
        })
    }

    fn answer(&self, call: &CallRecord) -> Result<Bytes, ApiError> {
        encode(&response_object(call))
    }

    fn encoder(&self, call: CallId, request: &ChatCompletionRequest, door: &DoorRecord) -> Box<dyn Encoder> {
        Box::new(ResponsesEncoder {
            call,
            skeleton: skeleton(call, request, door, hone_types::time::now_ms()),
            sequence: 0,
            items: 0,
            open: None,
        })
    }

    fn error(&self, error: ApiError) -> Response {
        error.into_response()
    }
}

fn responses_call(door: &DoorRecord) -> ResponsesCall {
    match door {
        DoorRecord::Responses(call) => call.clone(),
        _ => ResponsesCall::default(),
    }
}

/// A `response` object's settings, as the request gave them.
fn skeleton(call: CallId, request: &ChatCompletionRequest, door: &DoorRecord, started_at: i64) -> Map<String, Value> {
    let settings = responses_call(door);
    let tools: Vec<Value> = request
        .tools
        .iter()
        .flatten()
        .map(|t| {
            json!({"type": "function", "name": t.function.name, "description": t.function.description,
                "parameters": t.function.parameters, "strict": t.function.strict})
        })
        .collect();
    let tool_choice = match &request.tool_choice {
        Some(Value::String(mode)) => json!(mode),
        Some(choice) => json!({"type": "function", "name": choice.pointer("/function/name")}),
        None => json!("auto"),
    };
    let format = match &request.response_format {
        Some(f) if f["type"] == "json_schema" => {
            let mut format = f["json_schema"].clone();
            format["type"] = json!("json_schema");
            format
        }
        Some(f) => f.clone(),
        None => json!({"type": "text"}),
    };
    let value = json!({
        "id": response_id(call),
        "object": "response",
        "created_at": started_at / 1000,
        "status": "in_progress",
        "error": null,
        "incomplete_details": null,
        "instructions": settings.instructions,
        "max_output_tokens": request.max_output_tokens(),
        "model": request.model,
        "output": [],
        "parallel_tool_calls": request.extra.get("parallel_tool_calls").cloned().unwrap_or(json!(true)),
        "previous_response_id": settings.previous_response_id,
        "reasoning": {"effort": request.reasoning_effort, "summary": null},
        "store": true,
        "temperature": request.temperature,
        "text": {"format": format},
        "tool_choice": tool_choice,
        "tools": tools,
        "top_p": request.top_p,
        "truncation": "disabled",
        "usage": null,
        "user": request.extra.get("user"),
        "metadata": settings.metadata.unwrap_or_else(|| json!({})),
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn message_item_id(call: CallId) -> String {
    format!("msg_{}", call.hex())
}

fn function_item_id(call: CallId, index: usize) -> String {
    format!("fc_{}_{index}", call.hex())
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

fn message_item(call: CallId, content: Vec<Value>, status: &str) -> Value {
    json!({"type": "message", "id": message_item_id(call), "status": status, "role": "assistant", "content": content})
}

fn function_item(call: CallId, index: usize, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": function_item_id(call, index), "call_id": call_id,
        "name": name, "arguments": arguments, "status": status})
}

/// The `response` object of a recorded call.
pub(crate) fn response_object(call: &CallRecord) -> Value {
    let mut response = skeleton(call.id, &call.request, &call.door, call.started_at);
    let choice = call.response.as_ref().and_then(|r| r.choices.first());
    let mut output = Vec::new();
    if let Some(choice) = choice {
        let message: &Message = &choice.message;
        let mut content = Vec::new();
        let text = message.text();
        if !text.is_empty() {
            content.push(text_part(&text));
        }
        if let Some(refusal) = &message.refusal {
            content.push(json!({"type": "refusal", "refusal": refusal}));
        }
        if !content.is_empty() {
            output.push(message_item(call.id, content, "completed"));
        }
        for (i, c) in message.tool_calls().iter().enumerate() {
            output.push(function_item(
                call.id,
                i,
                &c.id,
                &c.function.name,
                &c.function.arguments,
                "completed",
            ));
        }
    }
    let truncated = choice.and_then(|c| c.finish_reason.as_deref()) == Some("length");
    let status = match call.outcome {
        CallOutcome::Ok if truncated => "incomplete",
        CallOutcome::Ok => "completed",
        _ => "failed",
    };
    response.insert("status".into(), json!(status));
    if truncated {
        response.insert("incomplete_details".into(), json!({"reason": "max_output_tokens"}));
    }
    if let Some(error) = &call.error {
        response.insert(
            "error".into(),
            json!({"code": "server_error", "message": error.message}),
        );
    }
    response.insert("output".into(), json!(output));
    if let Some(u) = &call.usage {
        let reasoning = u
            .extra
            .get("completion_tokens_details")
            .and_then(|d| d.get("reasoning_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        response.insert(
            "usage".into(),
            json!({
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_prompt_tokens()},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": u.prompt_tokens + u.completion_tokens,
            }),
        );
    }
    Value::Object(response)
}

/// The output item a stream is writing.
enum OpenItem {
    Text {
        output_index: u32,
        text: String,
    },
    Function {
        output_index: u32,
        /// The chat stream's tool-call index.
        index: u32,
        call_id: String,
        name: String,
        arguments: String,
    },
}

struct ResponsesEncoder {
    call: CallId,
    skeleton: Map<String, Value>,
    sequence: u64,
    /// Output items opened so far.
    items: u32,
    open: Option<OpenItem>,
}

impl ResponsesEncoder {
    fn emit(&mut self, out: &mut Vec<Bytes>, kind: &str, mut body: Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push(sse_frame(Some(kind), &serde_json::to_vec(&body).unwrap_or_default()));
    }

    fn start(&mut self, out: &mut Vec<Bytes>) {
        if self.sequence == 0 {
            let response = Value::Object(self.skeleton.clone());
            self.emit(out, "response.created", json!({"response": response}));
            self.emit(out, "response.in_progress", json!({"response": response}));
        }
    }

    fn close(&mut self, out: &mut Vec<Bytes>) {
        let call = self.call;
        match self.open.take() {
            None => {}
            Some(OpenItem::Text { output_index, text }) => {
                let id = message_item_id(call);
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": output_index, "content_index": 0, "text": text}),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": text_part(&text)}),
                );
                let item = message_item(call, vec![text_part(&text)], "completed");
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": item}),
                );
            }
            Some(OpenItem::Function {
                output_index,
                index,
                call_id,
                name,
                arguments,
            }) => {
                let id = function_item_id(call, index as usize);
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": output_index, "arguments": arguments}),
                );
                let item = function_item(call, index as usize, &call_id, &name, &arguments, "completed");
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": item}),
                );
            }
        }
    }

    fn next_index(&mut self) -> u32 {
        self.items += 1;
        self.items - 1
    }
}

impl Encoder for ResponsesEncoder {
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        let mut out = Vec::new();
        self.start(&mut out);
        let Some(choice) = event.chunk.choices.first() else {
            return out;
        };
        let call = self.call;
        if let Some(delta) = choice.delta.content.as_deref().filter(|t| !t.is_empty()) {
            if !matches!(self.open, Some(OpenItem::Text { .. })) {
                self.close(&mut out);
                let output_index = self.next_index();
                self.emit(
                    &mut out,
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": message_item(call, vec![], "in_progress")}),
                );
                self.emit(
                    &mut out,
                    "response.content_part.added",
                    json!({"item_id": message_item_id(call), "output_index": output_index, "content_index": 0, "part": text_part("")}),
                );
                self.open = Some(OpenItem::Text {
                    output_index,
                    text: String::new(),
                });
            }
            if let Some(OpenItem::Text { output_index, text }) = &mut self.open {
                text.push_str(delta);
                let output_index = *output_index;
                self.emit(
                    &mut out,
                    "response.output_text.delta",
                    json!({"item_id": message_item_id(call), "output_index": output_index, "content_index": 0, "delta": delta}),
                );
            }
        }
        for tool in choice.delta.tool_calls.iter().flatten() {
            let same = matches!(&self.open, Some(OpenItem::Function { index, .. }) if *index == tool.index);
            if !same {
                self.close(&mut out);
                let output_index = self.next_index();
                let call_id = tool.id.clone().unwrap_or_default();
                let name = tool.function.as_ref().and_then(|f| f.name.clone()).unwrap_or_default();
                let item = function_item(call, tool.index as usize, &call_id, &name, "", "in_progress");
                self.emit(
                    &mut out,
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": item}),
                );
                self.open = Some(OpenItem::Function {
                    output_index,
                    index: tool.index,
                    call_id,
                    name,
                    arguments: String::new(),
                });
            }
            let piece = tool
                .function
                .as_ref()
                .and_then(|f| f.arguments.as_deref())
                .filter(|a| !a.is_empty());
            if let (
                Some(piece),
                Some(OpenItem::Function {
                    output_index,
                    index,
                    arguments,
                    ..
                }),
            ) = (piece, &mut self.open)
            {
                arguments.push_str(piece);
                let (output_index, index) = (*output_index, *index);
                self.emit(
                    &mut out,
                    "response.function_call_arguments.delta",
                    json!({"item_id": function_item_id(call, index as usize), "output_index": output_index, "delta": piece}),
                );
            }
        }
        out
    }

    fn done(&mut self, call: &CallRecord) -> Vec<Bytes> {
        let mut out = Vec::new();
        self.start(&mut out);
        self.close(&mut out);
        let response = response_object(call);
        let kind = match response["status"].as_str() {
            Some("incomplete") => "response.incomplete",
            _ => "response.completed",
        };
        self.emit(&mut out, kind, json!({"response": response}));
        out
    }

    /// An `error` event and then `response.failed` with the response's
    /// status and error, as OpenAI ends a stream that fails.
    fn error(&mut self, error: &ApiError) -> Bytes {
        let mut out = Vec::new();
        self.start(&mut out);
        self.emit(
            &mut out,
            "error",
            json!({"code": error.code, "message": error.message, "param": error.param}),
        );
        let mut response = Value::Object(self.skeleton.clone());
        response["status"] = json!("failed");
        response["error"] = json!({"code": error.code, "message": error.message});
        self.emit(&mut out, "response.failed", json!({"response": response}));
        Bytes::from(out.concat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ChatCompletionRequest, ApiError> {
        let request: ResponsesRequest =
            serde_json::from_value(body).map_err(|e| ApiError::invalid("x", e.to_string()))?;
        to_chat(request, Vec::new()).map(|(chat, _)| chat)
    }

    #[test]
    fn settings_with_a_chat_equivalent_are_no_longer_dropped() {
        let request = chat(json!({
            "model": "assistant", "input": "hi", "stream": null,
            "service_tier": "flex", "prompt_cache_key": "k-1", "safety_identifier": "u-hash",
            "top_logprobs": 3, "store": false, "metadata": {"team": "support"},
            "text": {"verbosity": "low"}
        }))
        .unwrap();
        let sent = serde_json::to_value(&request).unwrap();
        assert!(!request.is_stream());
        for (field, value) in [
            ("service_tier", json!("flex")),
            ("prompt_cache_key", json!("k-1")),
            ("safety_identifier", json!("u-hash")),
            ("logprobs", json!(true)),
            ("top_logprobs", json!(3)),
            ("store", json!(false)),
            ("metadata", json!({"team": "support"})),
            ("verbosity", json!("low")),
        ] {
            assert_eq!(sent[field], value, "{field}: {sent}");
        }
    }

    #[test]
    fn input_items_tools_and_formats_become_a_chat_request() {
        let request = chat(json!({
            "model": "assistant",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "Weather in Paris?"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]}
            ],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
            "max_output_tokens": 50,
            "reasoning": {"effort": "low"}
        }))
        .unwrap();
        let m = serde_json::to_value(&request.messages).unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(m[1], json!({"role": "user", "content": "Weather in Paris?"}));
        assert_eq!(m[2]["content"], "Checking.");
        assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2, "{m}");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})
        );
        assert_eq!(m[4]["content"], "rain");
        assert_eq!(request.tools.as_ref().unwrap()[0].function.strict, Some(true));
        assert_eq!(
            request.tool_choice,
            Some(json!({"type": "function", "function": {"name": "get_weather"}}))
        );
        assert_eq!(
            request.response_format,
            Some(
                json!({"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}})
            )
        );
        assert_eq!(request.max_completion_tokens, Some(50));
        assert_eq!(request.reasoning_effort.as_deref(), Some("low"));
    }

    #[test]
    fn what_cannot_be_served_is_refused_naming_the_field() {
        let e = chat(json!({"model": "a", "input": "hi", "tools": [{"type": "web_search"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].type"));
        let e = chat(json!({"model": "a", "input": [{"type": "item_reference", "id": "x"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].type"));
        let e = chat(
            json!({"model": "a", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].content[0]"));
        let e = chat(json!({"model": "a", "input": []})).unwrap_err();
        assert!(e.message.contains("`input` must not be empty"), "{}", e.message);
        assert_eq!(call_of("resp_zz"), None);
        let echoed = CallId::new_v7();
        let items = Input::Items(vec![
            json!({"role": "user", "content": "x"}),
            json!({"type": "function_call", "id": format!("fc_{}_0", echoed.hex()), "call_id": "c", "name": "f"}),
            json!({"type": "function_call_output", "call_id": "c", "output": "y"}),
        ]);
        assert_eq!(echoed_call(Some(&items)), Some(echoed));
        assert_eq!(echoed_call(Some(&Input::Text("x".into()))), None);
        let id = CallId::new_v7();
        assert_eq!(call_of(&response_id(id)), Some(id));
    }
}
