//! Reassembles a streamed response from its chunks: text, refusals, tool-call
//! deltas (name and arguments arrive in pieces, keyed by index), finish
//! reasons, usage, logprobs and provider extras such as token ids.
//!
//! The gateway feeds every chunk it forwards, so the recorded call holds the
//! same answer the client assembled, also when the stream was cut short.

use crate::openai::{
    ChatCompletionChunk, ChatCompletionResponse, Choice, Extra, FunctionCall, Message, ToolCall, Usage,
};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Default)]
struct ToolCallParts {
    id: String,
    kind: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Debug, Default)]
struct ChoiceParts {
    text: String,
    refusal: Option<String>,
    tool_calls: BTreeMap<u32, ToolCallParts>,
    finish_reason: Option<String>,
    logprobs: Option<Value>,
    extra: Extra,
}

/// Folds chunks into one [`ChatCompletionResponse`].
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    id: String,
    created: i64,
    model: String,
    choices: BTreeMap<u32, ChoiceParts>,
    usage: Option<Usage>,
    extra: Extra,
    chunks: usize,
    /// About how many bytes the chunks' content holds (text, tool calls,
    /// logprobs and extra fields as JSON): what the answer weighs once recorded.
    bytes: usize,
}

/// About how many bytes `value` takes as JSON, without writing it out.
fn json_bytes(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| json_bytes(v) + 1).sum::<usize>(),
        Value::Object(map) => 2 + map.iter().map(|(k, v)| k.len() + 4 + json_bytes(v)).sum::<usize>(),
    }
}

/// Appends arrays, concatenates strings, and otherwise keeps the newest value:
/// how streamed logprobs (`{"content":[…]}`) and token-id lists combine.
fn merge_value(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Array(a), Value::Array(b)) => a.extend(b),
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge_value(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, Value::Null) if !slot.is_null() => {}
        (slot, other) => *slot = other,
    }
}

impl StreamAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of chunks seen so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// About how many bytes the answer so far weighs as recorded JSON.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn push(&mut self, chunk: &ChatCompletionChunk) {
        self.chunks += 1;
        self.bytes += chunk.extra.values().map(json_bytes).sum::<usize>();
        if self.id.is_empty() {
            self.id.clone_from(&chunk.id);
            self.created = chunk.created;
            self.model.clone_from(&chunk.model);
        }
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.clone());
        }
        for (k, v) in &chunk.extra {
            merge_value(self.extra.entry(k.clone()).or_insert(Value::Null), v.clone());
        }
        for choice in &chunk.choices {
            let parts = self.choices.entry(choice.index).or_default();
            self.bytes +=
                choice.extra.values().map(json_bytes).sum::<usize>() + choice.logprobs.as_ref().map_or(0, json_bytes);
            if let Some(text) = &choice.delta.content {
                self.bytes += text.len();
                parts.text.push_str(text);
            }
            if let Some(refusal) = &choice.delta.refusal {
                self.bytes += refusal.len();
                parts.refusal.get_or_insert_with(String::new).push_str(refusal);
            }
            for call in choice.delta.tool_calls.iter().flatten() {
                let slot = parts.tool_calls.entry(call.index).or_default();
                if let Some(id) = &call.id {
                    slot.id.clone_from(id);
                }
                if call.kind.is_some() {
                    slot.kind.clone_from(&call.kind);
                }
                if let Some(function) = &call.function {
                    if let Some(name) = &function.name {
                        slot.name.push_str(name);
                    }
                    if let Some(arguments) = &function.arguments {
                        self.bytes += arguments.len();
                        slot.arguments.push_str(arguments);
                    }
                }
            }
            if choice.finish_reason.is_some() {
                parts.finish_reason.clone_from(&choice.finish_reason);
            }
            if let Some(logprobs) = &choice.logprobs {
                merge_value(parts.logprobs.get_or_insert(Value::Null), logprobs.clone());
            }
            for (k, v) in &choice.extra {
                merge_value(parts.extra.entry(k.clone()).or_insert(Value::Null), v.clone());
            }
        }
    }

    /// The response as assembled so far.
    pub fn response(&self) -> ChatCompletionResponse {
        let choices = self
            .choices
            .iter()
            .map(|(&index, parts)| {
                let tool_calls: Vec<ToolCall> = parts
                    .tool_calls
                    .values()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        kind: c.kind.clone().unwrap_or_else(|| "function".to_owned()),
                        function: FunctionCall {
                            name: c.name.clone(),
                            arguments: c.arguments.clone(),
                        },
                    })
                    .collect();
                Choice {
                    index,
                    message: Message::answer(parts.text.clone(), tool_calls, parts.refusal.clone()),
                    finish_reason: parts.finish_reason.clone(),
                    logprobs: Some(parts.logprobs.clone().unwrap_or(Value::Null)),
                    extra: parts.extra.clone(),
                }
            })
            .collect();
        ChatCompletionResponse {
            id: self.id.clone(),
            object: "chat.completion".to_owned(),
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: self.usage.clone(),
            extra: self.extra.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(v: Value) -> ChatCompletionChunk {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn tool_call_deltas_and_logprobs_reassemble() {
        let mut acc = StreamAccumulator::new();
        acc.push(&chunk(json!({"id":"c1","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]})));
        acc.push(&chunk(json!({"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"logprobs":{"content":[{"token":"a","logprob":-0.1}]}}]})));
        acc.push(&chunk(json!({"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"logprobs":{"content":[{"token":"b","logprob":-0.2}]}}]})));
        acc.push(&chunk(
            json!({"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        ));
        acc.push(&chunk(
            json!({"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}),
        ));
        let r = acc.response();
        let m = &r.choices[0].message;
        assert_eq!(m.tool_calls()[0].function.name, "get_weather");
        assert_eq!(m.tool_calls()[0].function.arguments, r#"{"city":"Paris"}"#);
        assert!(m.content.is_none());
        // Stored as a non-streamed OpenAI answer is: content and refusal null.
        let stored = serde_json::to_value(&r.choices[0]).unwrap();
        assert_eq!(stored["message"]["content"], Value::Null);
        assert!(stored["message"].as_object().unwrap().contains_key("content"));
        assert!(stored["message"].as_object().unwrap().contains_key("refusal"));
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.choices[0].logprobs().unwrap()["content"].as_array().unwrap().len(), 2);
        assert_eq!(r.usage.unwrap().total_tokens, 7);
    }
}
