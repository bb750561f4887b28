//! The OpenAI chat-completions wire format, as hone receives and returns it.
//!
//! Every struct keeps fields it does not know in `extra` so that a request or
//! response passes through hone unchanged (vLLM's `token_ids`, OpenAI's newer
//! options). Parsing goes through [`ChatCompletionRequest::from_json`], which
//! names the offending field on error and then checks rules across fields.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// An object's unknown fields, kept for passthrough.
pub type Extra = Map<String, Value>;

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A request the gateway cannot accept, with the field at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    /// Dotted path of the offending field (`messages[2].content`), if one is to blame.
    pub param: Option<String>,
    pub message: String,
}

impl RequestError {
    fn at(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.into()),
            message: message.into(),
        }
    }
}

/// The task of a conversation: its first user message, the text an agent's
/// endpoint receives and the one episodes are matched and grouped on.
pub fn task_of(messages: &[Message]) -> String {
    messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(Message::text)
        .unwrap_or_default()
}

/// Most choices one request may ask for.
pub const MAX_N: u32 = 128;
/// Most `top_logprobs` one request may ask for (OpenAI's own limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;

impl ChatCompletionRequest {
    /// Parses and validates a request body. Errors name the field at fault.
    pub fn from_json(body: &[u8]) -> Result<Self, RequestError> {
        let text = std::str::from_utf8(body).map_err(|e| RequestError {
            param: None,
            message: format!(
                "request body is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        })?;
        let deserializer = &mut serde_json::Deserializer::from_str(text);
        let request: Self = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let message = if inner.is_syntax() || inner.is_eof() {
                format!("request body is not valid JSON: {inner}")
            } else if path == "." {
                format!("invalid request body: {inner}")
            } else {
                format!("invalid value for `{path}`: {inner}")
            };
            RequestError {
                param: (path != ".").then_some(path),
                message,
            }
        })?;
        request.validate()?;
        Ok(request)
    }

    /// Rules across fields that serde cannot express.
    pub fn validate(&self) -> Result<(), RequestError> {
        if self.model.trim().is_empty() {
            return Err(RequestError::at("model", "`model` must name an agent"));
        }
        if self.messages.is_empty() {
            return Err(RequestError::at("messages", "`messages` must not be empty"));
        }
        for (i, message) in self.messages.iter().enumerate() {
            message.validate(i)?;
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(RequestError::at(
                    "temperature",
                    format!("`temperature` must be between 0 and 2, got {t}"),
                ));
            }
        }
        if let Some(p) = self.top_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(RequestError::at(
                    "top_p",
                    format!("`top_p` must be between 0 and 1, got {p}"),
                ));
            }
        }
        if let Some(n) = self.n {
            if n == 0 || n > MAX_N {
                return Err(RequestError::at(
                    "n",
                    format!("`n` must be between 1 and {MAX_N}, got {n}"),
                ));
            }
        }
        if let Some(k) = self.top_logprobs {
            if k > MAX_TOP_LOGPROBS {
                return Err(RequestError::at(
                    "top_logprobs",
                    format!("`top_logprobs` must be at most {MAX_TOP_LOGPROBS}, got {k}"),
                ));
            }
            if self.logprobs != Some(true) {
                return Err(RequestError::at(
                    "top_logprobs",
                    "`top_logprobs` requires `logprobs: true`",
                ));
            }
        }
        if self.stream_options.is_some() && self.stream != Some(true) {
            return Err(RequestError::at(
                "stream_options",
                "`stream_options` is only allowed when `stream` is true",
            ));
        }
        if let Some(tools) = &self.tools {
            let mut seen = std::collections::HashSet::new();
            for (i, tool) in tools.iter().enumerate() {
                if tool.function.name.is_empty() {
                    return Err(RequestError::at(
                        format!("tools[{i}].function.name"),
                        "tool name must not be empty",
                    ));
                }
                if !seen.insert(tool.function.name.as_str()) {
                    return Err(RequestError::at(
                        format!("tools[{i}].function.name"),
                        format!("tool `{}` is declared twice", tool.function.name),
                    ));
                }
                if let Some(params) = &tool.function.parameters {
                    if !params.is_object() && !params.is_boolean() {
                        return Err(RequestError::at(
                            format!("tools[{i}].function.parameters"),
                            "tool parameters must be a JSON Schema object",
                        ));
                    }
                }
            }
        }
        if let Some(Stop::Many(stops)) = &self.stop {
            if stops.len() > 4 {
                return Err(RequestError::at("stop", "`stop` takes at most 4 sequences"));
            }
        }
        Ok(())
    }

    pub fn is_stream(&self) -> bool {
        self.stream == Some(true)
    }

    /// Whether the client asked for a final usage chunk on a stream.
    pub fn wants_stream_usage(&self) -> bool {
        self.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true)
    }

    /// The effective output-token limit (`max_completion_tokens` wins).
    pub fn max_output_tokens(&self) -> Option<u32> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.as_deref()?.iter().find(|t| t.function.name == name)
    }
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

/// One chat message, in a request or as a choice's answer. A `content` or
/// `refusal` the sender wrote as `null` is written back as `null` (OpenAI's
/// answers carry both, and clients check for them); one it left out stays out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "WireMessage", into = "WireMessage")]
pub struct Message {
    pub role: Role,
    pub content: Option<Content>,
    pub name: Option<String>,
    pub tool_calls: Option<Vec<ToolCall>>,
    pub tool_call_id: Option<String>,
    pub refusal: Option<String>,
    pub extra: Extra,
    /// Which of the fields above that are `None` were sent as an explicit `null`.
    pub nulls: Nulls,
}

/// Fields of a [`Message`] that were present as `null`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nulls {
    pub content: bool,
    pub refusal: bool,
}

/// A [`Message`] on the wire: absent and `null` told apart.
#[derive(Serialize, Deserialize)]
struct WireMessage {
    role: Role,
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    content: Option<Option<Content>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    refusal: Option<Option<String>>,
    #[serde(flatten)]
    extra: Extra,
}

/// `Some(None)` for an explicit `null`; a field left out stays `None` (`default`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `None` written as `null` when it was sent so, left out otherwise.
fn with_null<T>(value: Option<T>, null: bool) -> Option<Option<T>> {
    match value {
        Some(v) => Some(Some(v)),
        None if null => Some(None),
        None => None,
    }
}

impl From<WireMessage> for Message {
    fn from(w: WireMessage) -> Self {
        Self {
            role: w.role,
            nulls: Nulls {
                content: matches!(w.content, Some(None)),
                refusal: matches!(w.refusal, Some(None)),
            },
            content: w.content.flatten(),
            name: w.name,
            tool_calls: w.tool_calls,
            tool_call_id: w.tool_call_id,
            refusal: w.refusal.flatten(),
            extra: w.extra,
        }
    }
}

impl From<Message> for WireMessage {
    fn from(m: Message) -> Self {
        Self {
            role: m.role,
            content: with_null(m.content, m.nulls.content),
            name: m.name,
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
            refusal: with_null(m.refusal, m.nulls.refusal),
            extra: m.extra,
        }
    }
}

impl Message {
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(Content::Text(text.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            refusal: None,
            extra: Extra::new(),
            nulls: Nulls::default(),
        }
    }

    /// An assistant's answer in the one shape hone stores and returns
    /// whichever path made it (a stream, the engine, Anthropic), OpenAI's:
    /// `content` is `null` when the answer only calls tools, `refusal` is `null`.
    pub fn answer(text: String, tool_calls: Vec<ToolCall>, refusal: Option<String>) -> Self {
        let only_calls = text.is_empty() && !tool_calls.is_empty();
        Self {
            role: Role::Assistant,
            content: (!only_calls).then_some(Content::Text(text)),
            name: None,
            tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
            tool_call_id: None,
            refusal,
            extra: Extra::new(),
            nulls: Nulls {
                content: true,
                refusal: true,
            },
        }
    }

    /// The message's text: the string content, or its text parts joined.
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }

    pub fn tool_calls(&self) -> &[ToolCall] {
        self.tool_calls.as_deref().unwrap_or(&[])
    }

    fn validate(&self, i: usize) -> Result<(), RequestError> {
        match self.role {
            Role::Tool if self.tool_call_id.is_none() => Err(RequestError::at(
                format!("messages[{i}].tool_call_id"),
                format!("messages[{i}] has role `tool` but no `tool_call_id`"),
            )),
            Role::Assistant => Ok(()),
            _ if self.tool_calls.is_some() => Err(RequestError::at(
                format!("messages[{i}].tool_calls"),
                format!("messages[{i}]: only assistant messages carry `tool_calls`"),
            )),
            Role::User | Role::System | Role::Developer if self.content.is_none() => Err(RequestError::at(
                format!("messages[{i}].content"),
                format!("messages[{i}] needs `content`"),
            )),
            _ => {
                if let Some(Content::Parts(parts)) = &self.content {
                    for (j, part) in parts.iter().enumerate() {
                        if part.kind == "text" && part.text.is_none() {
                            return Err(RequestError::at(
                                format!("messages[{i}].content[{j}].text"),
                                "a content part of type `text` needs `text`",
                            ));
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

/// Message content: a plain string or a list of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Content {
    pub fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;
        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
                Ok(Content::Text(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Content, E> {
                Ok(Content::Text(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(1));
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Content::Parts(parts))
            }
        }
        deserializer.deserialize_any(ContentVisitor)
    }
}

/// One part of multi-part content (`text`, `image_url`, `input_audio`, `file`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<ImageUrl>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A tool the model may call (`{"type":"function","function":{…}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionDefinition,
}

fn function_kind() -> String {
    "function".to_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A tool call made by the assistant; `arguments` is a JSON document as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A complete (non-streamed) response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    pub id: String,
    #[serde(default = "completion_object")]
    pub object: String,
    #[serde(default)]
    pub created: i64,
    #[serde(default)]
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn completion_object() -> String {
    "chat.completion".to_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub index: u32,
    pub message: Message,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// `Some(Value::Null)` when the upstream sent `"logprobs": null`, which is kept.
    #[serde(default, deserialize_with = "keep_null", skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Choice {
    /// The choice's logprobs, if it has any (not `null`).
    pub fn logprobs(&self) -> Option<&Value> {
        self.logprobs.as_ref().filter(|v| !v.is_null())
    }
}

/// A present field as `Some`, an explicit `null` included.
fn keep_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, deserialize_with = "count_or_zero")]
    pub prompt_tokens: u64,
    #[serde(default, deserialize_with = "count_or_zero")]
    pub completion_tokens: u64,
    #[serde(default, deserialize_with = "count_or_zero")]
    pub total_tokens: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A token count some servers send as `null` (not counted): read as 0, so
/// that a delivered answer is never failed over its usage.
fn count_or_zero<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.unwrap_or(0))
}

impl Usage {
    /// Prompt tokens served from the provider's prompt cache
    /// (`prompt_tokens_details.cached_tokens`; Anthropic's cache reads are
    /// mapped there).
    pub fn cached_prompt_tokens(&self) -> u64 {
        self.extra
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    /// Records `cached` prompt tokens as served from the prompt cache, where
    /// OpenAI reports them.
    pub fn set_cached_prompt_tokens(&mut self, cached: u64) {
        self.extra.insert(
            "prompt_tokens_details".to_owned(),
            serde_json::json!({"cached_tokens": cached}),
        );
    }

    /// Prompt tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`).
    pub fn cache_write_tokens(&self) -> u64 {
        self.extra.get(CACHE_WRITE_TOKENS).and_then(Value::as_u64).unwrap_or(0)
    }
}

/// The usage field counting prompt tokens written to a prompt cache.
pub const CACHE_WRITE_TOKENS: &str = "cache_creation_input_tokens";

/// One `data:` event of a streamed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    #[serde(default = "chunk_object")]
    pub object: String,
    #[serde(default)]
    pub created: i64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn chunk_object() -> String {
    "chat.completion.chunk".to_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Delta {
    /// Whether this delta carries a generated token: text, a refusal, a
    /// tool call or reasoning. The opening chunk that only names the role
    /// (`"content": ""`, as OpenAI and vLLM send it) says nothing, so the
    /// time to first token is not taken from it.
    pub fn says_something(&self) -> bool {
        let some_text = |t: &Option<String>| t.as_deref().is_some_and(|t| !t.is_empty());
        some_text(&self.content)
            || some_text(&self.refusal)
            || self.tool_calls.as_ref().is_some_and(|c| !c.is_empty())
            || ["reasoning_content", "reasoning"].iter().any(|k| {
                self.extra
                    .get(*k)
                    .and_then(|v| v.as_str())
                    .is_some_and(|t| !t.is_empty())
            })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// `{"error": {...}}`, the body of every error hone returns over HTTP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
}

/// `GET /v1/models` entry: one per agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelEntry {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub owned_by: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ChatCompletionRequest, RequestError> {
        ChatCompletionRequest::from_json(body.as_bytes())
    }

    #[test]
    fn upstream_usage_with_null_counts_no_longer_fails_a_delivered_answer() {
        let usage: Usage =
            serde_json::from_str(r#"{"prompt_tokens":12,"completion_tokens":null,"total_tokens":null}"#).unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
            (12, 0, 0)
        );
    }

    #[test]
    fn the_opening_role_chunk_says_nothing_a_token_does() {
        let delta = |json: &str| serde_json::from_str::<Delta>(json).unwrap().says_something();
        assert!(!delta(r#"{"role":"assistant","content":""}"#));
        assert!(!delta(r#"{"role":"assistant","content":null,"tool_calls":[]}"#));
        assert!(delta(r#"{"content":"Hi"}"#));
        assert!(delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}"#));
        assert!(delta(r#"{"reasoning_content":"Let me think"}"#));
    }

    #[test]
    fn parses_multi_part_content_tools_and_keeps_unknown_fields() {
        let r = parse(
            r#"{"model":"assistant","messages":[{"role":"user","content":[{"type":"text","text":"hi "},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]}],
                "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
                "stop":"x","n":2,"logprobs":true,"top_logprobs":3,"user":"u-1"}"#,
        )
        .unwrap();
        assert_eq!(r.messages[0].text(), "hi ");
        assert_eq!(r.stop, Some(Stop::One("x".into())));
        assert_eq!(r.extra.get("user"), Some(&Value::from("u-1")));
        let round: Value = serde_json::to_value(&r).unwrap();
        assert_eq!(round["user"], "u-1");
        assert_eq!(
            round["messages"][0]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AA"
        );
    }

    #[test]
    fn errors_name_the_field_at_fault() {
        let e = parse(r#"{"model":"a","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let e = parse(r#"{"model":"a","messages":[{"role":"user","content":5}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content"), "{e}");
        let e = parse(r#"{"model":"a","messages":[{"role":"tool","content":"x"}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].tool_call_id"));
        let e = parse(r#"{"model":"a","messages":[{"role":"wizard","content":"x"}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = parse(r#"{"model":"a","messages":[]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = parse(r#"{"messages":[{"role":"user","content":"x"}]}"#).unwrap_err();
        assert!(e.message.contains("model"), "{e}");
        let e = parse(r#"{"model":"a","#).unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{e}");
        let e = ChatCompletionRequest::from_json(b"{\"model\":\"\xff\"}").unwrap_err();
        assert!(e.message.contains("UTF-8"), "{e}");
    }
}
