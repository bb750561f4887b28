//! Signals: feedback on a call or an episode (docs/ARCHITECTURE.md, "Concepts").

use crate::ids::{CallId, EpisodeId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The type a metric declares in config; a signal's value must match it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricType {
    Boolean,
    Float,
    Text,
    Demonstration,
}

/// Whether a metric is about one call or a whole episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricLevel {
    Call,
    Episode,
}

/// Who produced the signal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalSource {
    #[default]
    User,
    Implicit,
    Critic,
    Judge,
}

/// A typed signal value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum SignalValue {
    Boolean(bool),
    Float(f64),
    Text(String),
    /// The answer the assistant should have given: a message object
    /// (`{"role":"assistant","content":…}` or with tool calls).
    Demonstration(Value),
}

impl SignalValue {
    /// The value as a person reads it (`true`, `0.8`, the text, or "a
    /// demonstration").
    pub fn shown(&self) -> String {
        match self {
            SignalValue::Boolean(b) => b.to_string(),
            SignalValue::Float(f) => format!("{f}"),
            SignalValue::Text(t) => t.clone(),
            SignalValue::Demonstration(_) => "a demonstration".to_owned(),
        }
    }

    pub fn metric_type(&self) -> MetricType {
        match self {
            SignalValue::Boolean(_) => MetricType::Boolean,
            SignalValue::Float(_) => MetricType::Float,
            SignalValue::Text(_) => MetricType::Text,
            SignalValue::Demonstration(_) => MetricType::Demonstration,
        }
    }

    /// Reads a JSON feedback value as the declared type, or infers the type
    /// (bool, number, string, message object) when the metric is undeclared.
    pub fn from_json(value: &Value, declared: Option<MetricType>) -> Result<Self, String> {
        let inferred =
            match value {
                Value::Bool(b) => SignalValue::Boolean(*b),
                Value::Number(n) => match n.as_f64() {
                    Some(f) if f.is_finite() => SignalValue::Float(f),
                    _ => return Err("`value` must be a finite number".to_owned()),
                },
                Value::String(s) => SignalValue::Text(s.clone()),
                Value::Object(o) if o.contains_key("content") || o.contains_key("tool_calls") => {
                    SignalValue::Demonstration(value.clone())
                }
                _ => return Err(
                    "`value` must be a boolean, a number, a string, or a message object with `content` or `tool_calls`"
                        .to_owned(),
                ),
            };
        match (declared, inferred) {
            (None, v) => Ok(v),
            (Some(MetricType::Demonstration), SignalValue::Text(s)) => Ok(SignalValue::Demonstration(
                serde_json::json!({"role": "assistant", "content": s}),
            )),
            (Some(t), v) if v.metric_type() == t => Ok(v),
            (Some(t), v) => Err(format!(
                "`value` must be {} for this metric, got {}",
                type_phrase(t),
                type_phrase(v.metric_type())
            )),
        }
    }
}

fn type_phrase(t: MetricType) -> &'static str {
    match t {
        MetricType::Boolean => "a boolean",
        MetricType::Float => "a number",
        MetricType::Text => "a string",
        MetricType::Demonstration => "a demonstration (message object)",
    }
}

/// One stored piece of feedback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    pub id: uuid::Uuid,
    pub episode_id: EpisodeId,
    /// Set when the signal is about one call.
    pub call_id: Option<CallId>,
    pub name: String,
    pub value: SignalValue,
    pub source: SignalSource,
    pub comment: Option<String>,
    pub created_at: i64,
}

/// The body of `POST /v1/feedback`: a signal about an episode or one of its
/// calls (give `episode_id`, `call_id` or both; the ids stay text here so
/// the gateway can say which one is malformed). `value` is a boolean, a
/// number, a string or a message object. Episode ids are each agent's own:
/// `agent` says whose `episode_id` is meant when a key may use several
/// agents that have an episode of that id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub name: String,
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SignalSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}
