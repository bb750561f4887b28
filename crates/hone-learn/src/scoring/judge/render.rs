//! Turning episodes into text a judge reads: the conversation as the agent
//! saw it (the last answered call's messages plus its answer), the prefix a
//! group shares, and a plain transcript with tool calls spelled out.

use crate::episode::final_call;
use hone_types::EpisodeDetail;
use serde_json::Value;

/// The whole conversation of an episode as OpenAI messages.
pub fn conversation(episode: &EpisodeDetail) -> Vec<Value> {
    let Some(call) = final_call(episode).or(episode.calls.last()) else {
        return Vec::new();
    };
    let mut messages: Vec<Value> = call
        .request
        .messages
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok())
        .collect();
    if let Some(m) = call.response.as_ref().and_then(|r| r.choices.first()) {
        messages.extend(serde_json::to_value(&m.message).ok());
    }
    messages
}

/// How many leading messages every conversation has in common (at most one
/// less than the shortest, so each trajectory keeps something of its own).
pub fn shared_prefix(conversations: &[Vec<Value>]) -> usize {
    let Some(first) = conversations.first() else {
        return 0;
    };
    let shortest = conversations.iter().map(Vec::len).min().unwrap_or(0);
    let mut n = 0;
    while n + 1 < shortest && conversations.iter().all(|c| c[n] == first[n]) {
        n += 1;
    }
    n
}

/// `role: text` lines, tool calls as `→ name(arguments)`.
pub fn transcript(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("?");
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        };
        out.push_str(&format!("{role}: {text}\n"));
        for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let f = &call["function"];
            out.push_str(&format!(
                "  → {}({})\n",
                f["name"].as_str().unwrap_or("?"),
                f["arguments"].as_str().unwrap_or("")
            ));
        }
    }
    if out.is_empty() {
        out.push_str("(nothing)\n");
    }
    out
}
