//! A call: one request through the gateway and everything hone learned about
//! it. This is the row the recorder makes durable before the client sees the
//! response.

use crate::ids::{CallId, EpisodeId, VersionId};
use crate::openai::{ChatCompletionRequest, ChatCompletionResponse, Choice, Usage};
use serde::{Deserialize, Serialize};

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The response was complete.
    Ok,
    /// Every provider of the version failed; the client got an error.
    UpstreamError,
    /// The client went away before the response was complete.
    ClientDisconnected,
}

impl CallOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::UpstreamError => "upstream_error",
            CallOutcome::ClientDisconnected => "client_disconnected",
        }
    }
}

/// Behaviour flags, computed at record time from the request and the answer
/// (the first choice). They feed penalties and monitors later.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BehaviourFlags {
    /// A tool call names an unknown tool, or its arguments don't parse or
    /// don't match the tool's JSON schema.
    pub invalid_tool_call: bool,
    /// The answer ends with a question and makes no tool call.
    pub clarifying_question: bool,
    pub refusal: bool,
    /// No text and no tool call.
    pub empty: bool,
    /// Stopped by the token limit.
    pub truncated: bool,
}

impl BehaviourFlags {
    /// Every flag's name (as in monitors and config).
    pub const NAMES: [&'static str; 5] = [
        "invalid_tool_call",
        "clarifying_question",
        "refusal",
        "empty",
        "truncated",
    ];

    /// The flag called `name` (one of [`Self::NAMES`]); false for any other.
    pub fn named(&self, name: &str) -> bool {
        match name {
            "invalid_tool_call" => self.invalid_tool_call,
            "clarifying_question" => self.clarifying_question,
            "refusal" => self.refusal,
            "empty" => self.empty,
            "truncated" => self.truncated,
            _ => false,
        }
    }
}

/// What went wrong upstream, as the client was told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallError {
    pub status: u16,
    pub message: String,
}

/// One try against one provider (retries and fallbacks each add one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub provider: String,
    pub model: String,
    /// HTTP status, or `None` for a connection error or timeout.
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: f64,
}

/// Everything recorded about one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub id: CallId,
    pub episode_id: EpisodeId,
    pub agent: String,
    pub version_id: VersionId,
    /// Unix ms when the gateway received the request.
    pub started_at: i64,
    pub outcome: CallOutcome,
    pub stream: bool,
    /// The request as the client sent it.
    pub request: ChatCompletionRequest,
    /// The answer (assembled from chunks for streams; partial on disconnect).
    pub response: Option<ChatCompletionResponse>,
    pub error: Option<CallError>,
    /// The provider and model that answered, if one did.
    pub provider: Option<String>,
    pub model: Option<String>,
    pub attempts: Vec<Attempt>,
    pub usage: Option<Usage>,
    pub cost_usd: Option<f64>,
    /// Request received → last byte handed to the client.
    pub latency_ms: f64,
    /// Request received → first content byte handed to the client (streams).
    pub ttft_ms: Option<f64>,
    /// Time spent waiting on providers, retries and back-off included.
    pub upstream_ms: f64,
    pub flags: BehaviourFlags,
    /// Shadow samples: further answers the engine sampled from the same
    /// prompt that the client never saw (`[agents.X.learn.shadow]`), kept
    /// for learning. Not calls: traffic counts never see them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<Choice>,
    /// The API the client called through; `request` and `response` are its
    /// call in chat-completions form either way.
    #[serde(default, skip_serializing_if = "Door::is_chat")]
    pub door: Door,
}

/// The API a call came in by, with what its own request said that the
/// chat-completions form cannot hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "api", rename_all = "snake_case")]
pub enum Door {
    /// `POST /v1/chat/completions`.
    #[default]
    ChatCompletions,
    /// `POST /v1/messages` (Anthropic's Messages API).
    Messages,
    /// `POST /v1/responses` (OpenAI's Responses API).
    Responses(ResponsesCall),
    /// A model call the agent made elsewhere, seen in an OpenTelemetry
    /// trace sent to `POST /v1/traces`.
    Traces { trace_id: String, span_id: String },
}

/// A Responses API call's own settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponsesCall {
    /// `instructions`, which became the request's first (system) message;
    /// a later response chained to this one does not inherit them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    /// The caller's `metadata`, returned with the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
}

impl Door {
    pub fn is_chat(&self) -> bool {
        matches!(self, Door::ChatCompletions)
    }
}

/// Where the embedded engine's answers carry their token ids: the
/// response's `prompt_token_ids`, and each choice's sampled `token_ids` with
/// their `token_logprobs` (vLLM's names for the first two; vLLM gives the
/// logprobs in the choice's OpenAI `logprobs`, one entry a token).
pub const PROMPT_TOKEN_IDS: &str = "prompt_token_ids";
pub const TOKEN_IDS: &str = "token_ids";
pub const TOKEN_LOGPROBS: &str = "token_logprobs";
/// Where a choice lists the `<tool_call>` blocks the engine could not read
/// (one reason each); behaviour flags count them as invalid tool calls.
pub const MALFORMED_TOOL_CALLS: &str = "malformed_tool_calls";

/// A call's exact tokens as the engine saw and sampled them, with the
/// sampler's logprob of each sampled token (what off-policy correction needs).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledTokens {
    pub prompt: Vec<u32>,
    pub completion: Vec<u32>,
    pub logprobs: Vec<f32>,
}

impl CallRecord {
    /// The first choice's tokens, when the provider recorded them (the
    /// embedded engine and vLLM do) and they are consistent.
    pub fn sampled_tokens(&self) -> Option<SampledTokens> {
        self.choice_tokens(self.response.as_ref()?.choices.first()?)
    }

    /// A choice's tokens (the served one or a shadow sample), sharing the
    /// response's prompt token ids.
    pub fn choice_tokens(&self, choice: &Choice) -> Option<SampledTokens> {
        let response = self.response.as_ref()?;
        let ids = |v: &serde_json::Value| -> Option<Vec<u32>> {
            v.as_array()?
                .iter()
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect()
        };
        let prompt = ids(response.extra.get(PROMPT_TOKEN_IDS)?)?;
        let completion = ids(choice.extra.get(TOKEN_IDS)?)?;
        let numbers = |values: &[serde_json::Value], at: &dyn Fn(&serde_json::Value) -> Option<f64>| {
            values
                .iter()
                .map(|v| at(v).map(|x| x as f32))
                .collect::<Option<Vec<f32>>>()
        };
        let logprobs = match choice.extra.get(TOKEN_LOGPROBS) {
            Some(list) => numbers(list.as_array()?, &serde_json::Value::as_f64)?,
            None => numbers(choice.logprobs()?.get("content")?.as_array()?, &|entry| {
                entry.get("logprob")?.as_f64()
            })?,
        };
        (!prompt.is_empty() && !completion.is_empty() && logprobs.len() == completion.len()).then_some(SampledTokens {
            prompt,
            completion,
            logprobs,
        })
    }

    /// The first choice's text, or the empty string.
    pub fn answer_text(&self) -> String {
        self.response
            .as_ref()
            .and_then(|r| r.choices.first())
            .map(|c| c.message.text())
            .unwrap_or_default()
    }
}
