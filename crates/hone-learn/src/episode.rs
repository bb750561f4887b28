//! Reading an episode the way learning needs it: its final answer, its first
//! request, and the reference answer (a demonstration or label) to compare
//! with. Its task is [`hone_types::openai::task_of`] of the first request.

use hone_types::openai::{ChatCompletionRequest, Message};
use hone_types::{CallRecord, EpisodeDetail, SignalValue};
use serde_json::Value;

/// The last call that produced an answer.
pub fn final_call(episode: &EpisodeDetail) -> Option<&CallRecord> {
    episode.calls.iter().rev().find(|c| c.response.is_some())
}

/// The first choice's message of the last answered call.
pub fn final_message(episode: &EpisodeDetail) -> Option<&Message> {
    final_call(episode)?
        .response
        .as_ref()?
        .choices
        .first()
        .map(|c| &c.message)
}

/// The final answer's text ("" when there is none).
pub fn final_text(episode: &EpisodeDetail) -> String {
    final_message(episode).map(Message::text).unwrap_or_default()
}

pub fn first_request(episode: &EpisodeDetail) -> Option<&ChatCompletionRequest> {
    episode.calls.first().map(|c| &c.request)
}

/// The reference the episode carries: the newest signal named `signal`
/// (a demonstration's message, or a text / number label).
pub fn reference_from_signals(episode: &EpisodeDetail, signal: Option<&str>) -> Option<Value> {
    let name = signal?;
    episode
        .signals
        .iter()
        .rev()
        .find(|s| s.name == name)
        .and_then(|s| match &s.value {
            SignalValue::Demonstration(m) => Some(m.clone()),
            SignalValue::Text(t) => Some(Value::String(t.clone())),
            SignalValue::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number),
            SignalValue::Boolean(_) => None,
        })
}

/// A reference as text: a message's `content`, a string, or a number.
pub fn reference_text(reference: &Value) -> Option<String> {
    match reference {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(content @ Value::Array(_)) => serde_json::from_value::<hone_types::openai::Content>(content.clone())
                .ok()
                .map(|c| c.text()),
            _ => None,
        },
        _ => None,
    }
}
