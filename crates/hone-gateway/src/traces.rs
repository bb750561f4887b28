//! OpenTelemetry GenAI spans as calls: the model calls an agent already
//! instrumented with OpenTelemetry made without going through hone, read
//! from an OTLP trace export (`POST /v1/traces`).
//!
//! A span is a model call when it carries the GenAI conventions
//! (`gen_ai.operation.name` `chat`/`text_completion`/`generate_content`, or
//! `gen_ai.request.model`), or OpenInference's `llm.*` attributes. Its
//! messages are read from whichever of three encodings it uses:
//!
//! - the current GenAI conventions: `gen_ai.system_instructions`,
//!   `gen_ai.input.messages` and `gen_ai.output.messages` (JSON, messages of
//!   typed `parts`);
//! - OpenLLMetry's indexed `gen_ai.prompt.N.*` and `gen_ai.completion.N.*`;
//! - OpenInference's `llm.input_messages.N.message.*` and
//!   `llm.output_messages.N.message.*`.
//!
//! The trace is the episode (its id in hex, or the span's
//! `gen_ai.conversation.id`, `session.id` or `hone.episode_id`), so feedback
//! by episode id works as for proxied calls; a span's call id is derived
//! from its trace and span ids, so a batch sent twice is recorded once.

use hone_types::openai::{ChatCompletionRequest, ChatCompletionResponse, Choice, Message, Role, ToolCall, Usage};
use hone_types::{CallId, EpisodeId};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// A span's attributes (the resource's under the span's own), as JSON values.
pub struct Attributes(BTreeMap<String, Value>);

/// One model call seen in a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedCall {
    pub id: CallId,
    pub episode: EpisodeId,
    /// `hone.agent` (span or resource), else the resource's `service.name`.
    pub agent: Option<String>,
    pub trace_id: String,
    pub span_id: String,
    /// Unix ms.
    pub started_at: i64,
    pub duration_ms: f64,
    /// `gen_ai.provider.name` / `gen_ai.system` / `llm.provider`.
    pub provider: Option<String>,
    pub model: Option<String>,
    pub request: ChatCompletionRequest,
    pub response: Option<ChatCompletionResponse>,
    pub usage: Option<Usage>,
    /// The span's error status message, when it failed.
    pub error: Option<String>,
}

/// A span that names a model call but cannot be read as one.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    pub span_id: String,
    pub reason: String,
}

fn json_of(value: &AnyValue) -> Value {
    match &value.value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::ArrayValue(a)) => Value::Array(a.values.iter().map(json_of).collect()),
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(
            kv.values
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.as_ref().map(json_of).unwrap_or(Value::Null)))
                .collect(),
        ),
        Some(any_value::Value::BytesValue(b)) => json!(hex::encode(b)),
        // An index into a profiles dictionary: meaningless in a trace.
        Some(any_value::Value::StringValueStrindex(_)) => Value::Null,
    }
}

impl Attributes {
    fn of(resource: &[KeyValue], span: &[KeyValue]) -> Self {
        let mut map = BTreeMap::new();
        for kv in resource.iter().chain(span) {
            map.insert(kv.key.clone(), kv.value.as_ref().map(json_of).unwrap_or(Value::Null));
        }
        Self(map)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn text(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    fn first_text(&self, keys: &[&str]) -> Option<String> {
        keys.iter().find_map(|k| self.text(k))
    }

    fn number(&self, keys: &[&str]) -> Option<u64> {
        keys.iter().find_map(|k| match self.get(k)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        })
    }

    /// A JSON document stored as a string attribute (or already structured).
    fn document(&self, key: &str) -> Option<Value> {
        match self.get(key)? {
            Value::String(s) => serde_json::from_str(s).ok(),
            other => Some(other.clone()),
        }
    }

    fn has_prefix(&self, prefix: &str) -> bool {
        self.0
            .range(prefix.to_owned()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(prefix))
    }

    /// `prefix.N.rest` for N = 0, 1, … while present, as maps of `rest`.
    fn indexed(&self, prefix: &str) -> Vec<BTreeMap<String, Value>> {
        let mut items: BTreeMap<usize, BTreeMap<String, Value>> = BTreeMap::new();
        let start = format!("{prefix}.");
        for (key, value) in self.0.range(start.clone()..) {
            let Some(tail) = key.strip_prefix(&start) else {
                break;
            };
            let Some((index, rest)) = tail.split_once('.') else {
                continue;
            };
            if let Ok(index) = index.parse::<usize>() {
                items.entry(index).or_default().insert(rest.to_owned(), value.clone());
            }
        }
        items.into_values().collect()
    }
}

fn role_of(name: &str) -> Option<Role> {
    Some(match name {
        "system" => Role::System,
        "developer" => Role::Developer,
        "user" | "human" => Role::User,
        "assistant" | "model" | "ai" => Role::Assistant,
        "tool" | "function" => Role::Tool,
        _ => return None,
    })
}

fn str_of(map: &BTreeMap<String, Value>, key: &str) -> Option<String> {
    match map.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Arguments as a JSON document in text (the conventions allow an object).
fn arguments_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn message(role: Role, text: String, calls: Vec<ToolCall>, tool_call_id: Option<String>) -> Message {
    let mut m = if role == Role::Assistant {
        Message::answer(text, calls, None)
    } else {
        Message::new(role, text)
    };
    m.tool_call_id = tool_call_id;
    m
}

fn tool_call(id: String, name: String, arguments: String) -> ToolCall {
    ToolCall {
        id,
        kind: "function".to_owned(),
        function: hone_types::openai::FunctionCall { name, arguments },
    }
}

/// Messages in the current GenAI form: `[{"role", "parts": [...]}]`. A
/// `tool_call_response` part becomes a tool message of its own.
fn semconv_messages(doc: &Value) -> Vec<(Message, Option<String>)> {
    let mut out = Vec::new();
    for item in doc.as_array().into_iter().flatten() {
        let Some(role) = item["role"].as_str().and_then(role_of) else {
            continue;
        };
        let (mut text, mut calls) = (String::new(), Vec::new());
        for part in item["parts"].as_array().into_iter().flatten() {
            match part["type"].as_str() {
                Some("text") => text.push_str(part["content"].as_str().unwrap_or_default()),
                Some("tool_call") => calls.push(tool_call(
                    part["id"].as_str().unwrap_or_default().to_owned(),
                    part["name"].as_str().unwrap_or_default().to_owned(),
                    arguments_text(part.get("arguments")),
                )),
                Some("tool_call_response") => {
                    let response = match &part["response"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let id = part["id"].as_str().map(str::to_owned);
                    out.push((message(Role::Tool, response, Vec::new(), id), None));
                }
                _ => {}
            }
        }
        if !text.is_empty() || !calls.is_empty() {
            let finish = item["finish_reason"].as_str().map(str::to_owned);
            out.push((message(role, text, calls, None), finish));
        }
    }
    out
}

/// OpenLLMetry's `gen_ai.prompt.N.*` / `gen_ai.completion.N.*`.
fn indexed_messages(items: Vec<BTreeMap<String, Value>>) -> Vec<(Message, Option<String>)> {
    items
        .into_iter()
        .filter_map(|m| {
            let role = role_of(&str_of(&m, "role")?)?;
            let calls: Vec<ToolCall> = (0..)
                .map_while(|j| {
                    let name = str_of(&m, &format!("tool_calls.{j}.name"))?;
                    Some(tool_call(
                        str_of(&m, &format!("tool_calls.{j}.id")).unwrap_or_default(),
                        name,
                        arguments_text(m.get(&format!("tool_calls.{j}.arguments"))),
                    ))
                })
                .collect();
            let text = str_of(&m, "content").unwrap_or_default();
            Some((
                message(role, text, calls, str_of(&m, "tool_call_id")),
                str_of(&m, "finish_reason"),
            ))
        })
        .collect()
}

/// OpenInference's `llm.*_messages.N.message.*`.
fn openinference_messages(items: Vec<BTreeMap<String, Value>>) -> Vec<(Message, Option<String>)> {
    items
        .into_iter()
        .filter_map(|m| {
            let role = role_of(&str_of(&m, "message.role")?)?;
            let calls: Vec<ToolCall> = (0..)
                .map_while(|j| {
                    let at = format!("message.tool_calls.{j}.tool_call");
                    let name = str_of(&m, &format!("{at}.function.name"))?;
                    Some(tool_call(
                        str_of(&m, &format!("{at}.id")).unwrap_or_default(),
                        name,
                        arguments_text(m.get(&format!("{at}.function.arguments"))),
                    ))
                })
                .collect();
            let text = str_of(&m, "message.content").unwrap_or_default();
            Some((message(role, text, calls, str_of(&m, "message.tool_call_id")), None))
        })
        .collect()
}

const MODEL_OPERATIONS: [&str; 3] = ["chat", "text_completion", "generate_content"];

/// Whether a span is a model call (not a tool, agent or embeddings span).
fn is_model_call(a: &Attributes) -> bool {
    match a.text("gen_ai.operation.name") {
        Some(op) => MODEL_OPERATIONS.contains(&op.as_str()),
        None => {
            a.get("gen_ai.request.model").is_some()
                || a.has_prefix("gen_ai.prompt.")
                || a.text("openinference.span.kind").as_deref() == Some("LLM")
        }
    }
}

/// The call id of a span: the same span always gets the same id.
fn call_id(trace_id: &[u8], span_id: &[u8]) -> CallId {
    let digest = Sha256::digest([trace_id, span_id].concat());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    CallId::from_uuid(uuid::Builder::from_custom_bytes(bytes).into_uuid())
}

fn read_span(span: &Span, a: &Attributes) -> Result<ObservedCall, String> {
    if span.trace_id.len() != 16 || span.span_id.len() != 8 {
        return Err("a span needs a 16-byte trace id and an 8-byte span id".into());
    }
    let trace_id = hex::encode(&span.trace_id);
    let episode_text = a
        .first_text(&["hone.episode_id", "gen_ai.conversation.id", "session.id"])
        .unwrap_or_else(|| trace_id.clone());
    let episode = EpisodeId::parse(&episode_text).map_err(|e| format!("episode id `{episode_text}` {e}"))?;

    let mut input: Vec<(Message, Option<String>)> = Vec::new();
    if let Some(system) = a.document("gen_ai.system_instructions") {
        let text: String = match &system {
            Value::String(s) => s.clone(),
            other => other
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        };
        if !text.is_empty() {
            input.push((Message::new(Role::System, text), None));
        }
    }
    let output;
    if let Some(doc) = a.document("gen_ai.input.messages") {
        input.extend(semconv_messages(&doc));
        output = a
            .document("gen_ai.output.messages")
            .map(|d| semconv_messages(&d))
            .unwrap_or_default();
    } else if a.has_prefix("gen_ai.prompt.") {
        input.extend(indexed_messages(a.indexed("gen_ai.prompt")));
        output = indexed_messages(a.indexed("gen_ai.completion"));
    } else {
        input.extend(openinference_messages(a.indexed("llm.input_messages")));
        output = openinference_messages(a.indexed("llm.output_messages"));
    }
    if !input.iter().any(|(m, _)| m.role != Role::System) {
        return Err("the span carries no input messages (record message content: gen_ai.input.messages, gen_ai.prompt.N.* or llm.input_messages.N.*)".into());
    }

    let model = a.first_text(&["gen_ai.request.model", "gen_ai.response.model", "llm.model_name"]);
    let usage = match (
        a.number(&[
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
        ]),
        a.number(&[
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        ]),
    ) {
        (None, None) => None,
        (prompt, completion) => {
            let (prompt, completion) = (prompt.unwrap_or(0), completion.unwrap_or(0));
            let mut usage = Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: prompt + completion,
                extra: Map::new(),
            };
            if let Some(cached) = a.number(&[
                "gen_ai.usage.cache_read.input_tokens",
                "gen_ai.usage.cache_read_input_tokens",
            ]) {
                usage.set_cached_prompt_tokens(cached);
            }
            Some(usage)
        }
    };
    let finish_reasons: Vec<String> = match a.get("gen_ai.response.finish_reasons") {
        Some(Value::Array(reasons)) => reasons.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    };
    let choices: Vec<Choice> = output
        .into_iter()
        .filter(|(m, _)| m.role == Role::Assistant)
        .enumerate()
        .map(|(i, (message, finish))| Choice {
            index: i as u32,
            message,
            finish_reason: finish.or_else(|| finish_reasons.get(i).cloned()),
            logprobs: None,
            extra: Map::new(),
        })
        .collect();
    let failed = span.status.as_ref().filter(|s| s.code == StatusCode::Error as i32);
    let response = (!choices.is_empty()).then(|| ChatCompletionResponse {
        id: a
            .text("gen_ai.response.id")
            .unwrap_or_else(|| hex::encode(&span.span_id)),
        object: "chat.completion".to_owned(),
        created: (span.start_time_unix_nano / 1_000_000_000) as i64,
        model: a
            .text("gen_ai.response.model")
            .or_else(|| model.clone())
            .unwrap_or_default(),
        choices,
        usage: usage.clone(),
        extra: Map::new(),
    });
    let mut request = json!({
        "model": "",
        "messages": input.into_iter().map(|(m, _)| m).collect::<Vec<_>>(),
    });
    for (key, attribute) in [
        ("temperature", "gen_ai.request.temperature"),
        ("top_p", "gen_ai.request.top_p"),
        ("max_tokens", "gen_ai.request.max_tokens"),
    ] {
        if let Some(value) = a.get(attribute) {
            request[key] = value.clone();
        }
    }
    let request: ChatCompletionRequest =
        serde_json::from_value(request).map_err(|e| format!("the span's request settings cannot be read: {e}"))?;
    Ok(ObservedCall {
        id: call_id(&span.trace_id, &span.span_id),
        episode,
        agent: a.first_text(&["hone.agent", "service.name"]),
        trace_id,
        span_id: hex::encode(&span.span_id),
        started_at: (span.start_time_unix_nano / 1_000_000) as i64,
        duration_ms: span.end_time_unix_nano.saturating_sub(span.start_time_unix_nano) as f64 / 1e6,
        provider: a.first_text(&["gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"]),
        model,
        request,
        response,
        usage,
        error: failed.map(|s| {
            if s.message.is_empty() {
                "the span ended with an error".to_owned()
            } else {
                s.message.clone()
            }
        }),
    })
}

/// The model calls in an export, and the model-call spans that could not be
/// read. Spans that are not model calls (tools, agents, HTTP) are neither.
pub fn observe(export: &ExportTraceServiceRequest) -> (Vec<ObservedCall>, Vec<Unreadable>) {
    let (mut calls, mut unreadable) = (Vec::new(), Vec::new());
    for resource_spans in &export.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or_default();
        for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
            let attributes = Attributes::of(resource, &span.attributes);
            if !is_model_call(&attributes) {
                continue;
            }
            match read_span(span, &attributes) {
                Ok(call) => calls.push(call),
                Err(reason) => unreadable.push(Unreadable {
                    span_id: hex::encode(&span.span_id),
                    reason,
                }),
            }
        }
    }
    (calls, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn s(key: &str, value: &str) -> KeyValue {
        kv(key, any_value::Value::StringValue(value.into()))
    }

    fn export(spans: Vec<Vec<KeyValue>>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![s("service.name", "assistant")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: spans
                        .into_iter()
                        .enumerate()
                        .map(|(i, attributes)| Span {
                            trace_id: vec![7; 16],
                            span_id: vec![i as u8 + 1; 8],
                            name: "chat".into(),
                            start_time_unix_nano: 1_700_000_000_000_000_000,
                            end_time_unix_nano: 1_700_000_000_250_000_000,
                            attributes,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn the_three_message_encodings_read_alike() {
        let semconv = vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.provider.name", "openai"),
            s("gen_ai.request.model", "gpt-4o-mini"),
            s(
                "gen_ai.system_instructions",
                r#"[{"type":"text","content":"Be brief."}]"#,
            ),
            s(
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"Weather?"}]}]"#,
            ),
            s(
                "gen_ai.output.messages",
                r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"get_weather","arguments":{"city":"Paris"}}],"finish_reason":"tool_call"}]"#,
            ),
            kv("gen_ai.usage.input_tokens", any_value::Value::IntValue(12)),
            kv("gen_ai.usage.output_tokens", any_value::Value::IntValue(5)),
        ];
        let openllmetry = vec![
            s("gen_ai.system", "openai"),
            s("gen_ai.request.model", "gpt-4o-mini"),
            s("gen_ai.prompt.0.role", "system"),
            s("gen_ai.prompt.0.content", "Be brief."),
            s("gen_ai.prompt.1.role", "user"),
            s("gen_ai.prompt.1.content", "Weather?"),
            s("gen_ai.completion.0.role", "assistant"),
            s("gen_ai.completion.0.finish_reason", "tool_calls"),
            s("gen_ai.completion.0.tool_calls.0.id", "c1"),
            s("gen_ai.completion.0.tool_calls.0.name", "get_weather"),
            s("gen_ai.completion.0.tool_calls.0.arguments", r#"{"city":"Paris"}"#),
            kv("gen_ai.usage.prompt_tokens", any_value::Value::IntValue(12)),
            kv("gen_ai.usage.completion_tokens", any_value::Value::IntValue(5)),
        ];
        let openinference = vec![
            s("openinference.span.kind", "LLM"),
            s("llm.model_name", "gpt-4o-mini"),
            s("llm.provider", "openai"),
            s("llm.input_messages.0.message.role", "system"),
            s("llm.input_messages.0.message.content", "Be brief."),
            s("llm.input_messages.1.message.role", "user"),
            s("llm.input_messages.1.message.content", "Weather?"),
            s("llm.output_messages.0.message.role", "assistant"),
            s("llm.output_messages.0.message.tool_calls.0.tool_call.id", "c1"),
            s(
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                "get_weather",
            ),
            s(
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
                r#"{"city":"Paris"}"#,
            ),
            kv("llm.token_count.prompt", any_value::Value::IntValue(12)),
            kv("llm.token_count.completion", any_value::Value::IntValue(5)),
        ];
        let not_a_model_call = vec![s("gen_ai.operation.name", "execute_tool"), s("gen_ai.tool.name", "x")];
        let (calls, unreadable) = observe(&export(vec![semconv, openllmetry, openinference, not_a_model_call]));
        assert!(unreadable.is_empty(), "{unreadable:?}");
        assert_eq!(calls.len(), 3);
        for call in &calls {
            let texts: Vec<String> = call.request.messages.iter().map(Message::text).collect();
            assert_eq!(texts, ["Be brief.", "Weather?"], "{:?}", call.span_id);
            let answer = &call.response.as_ref().unwrap().choices[0].message;
            assert_eq!(answer.tool_calls()[0].function.name, "get_weather");
            let arguments: Value = serde_json::from_str(&answer.tool_calls()[0].function.arguments).unwrap();
            assert_eq!(arguments, json!({"city": "Paris"}));
            let usage = call.usage.as_ref().unwrap();
            assert_eq!((usage.prompt_tokens, usage.completion_tokens), (12, 5));
            assert_eq!(
                (call.provider.as_deref(), call.model.as_deref()),
                (Some("openai"), Some("gpt-4o-mini"))
            );
            assert_eq!(call.agent.as_deref(), Some("assistant"));
            assert_eq!(call.episode.as_str(), "07".repeat(16));
            assert_eq!((call.started_at, call.duration_ms), (1_700_000_000_000, 250.0));
        }
        // The same span read twice is the same call; another span is another.
        let (again, _) = observe(&export(vec![calls_attributes()]));
        assert_eq!(again[0].id, call_id(&[7; 16], &[1; 8]));
        assert_ne!(calls[0].id, calls[1].id);
    }

    fn calls_attributes() -> Vec<KeyValue> {
        vec![
            s("gen_ai.operation.name", "chat"),
            s(
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"hi"}]}]"#,
            ),
        ]
    }

    #[test]
    fn a_model_call_without_messages_or_with_a_bad_id_is_unreadable() {
        let (calls, unreadable) = observe(&export(vec![vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.request.model", "m"),
        ]]));
        assert!(calls.is_empty());
        assert!(unreadable[0].reason.contains("no input messages"), "{unreadable:?}");
        let mut bad = export(vec![calls_attributes()]);
        bad.resource_spans[0].scope_spans[0].spans[0].trace_id = vec![1, 2];
        let (_, unreadable) = observe(&bad);
        assert!(unreadable[0].reason.contains("16-byte trace id"));
        let (calls, _) = observe(&export(vec![
            [calls_attributes(), vec![s("session.id", "ticket-42")]].concat()
        ]));
        assert_eq!(calls[0].episode.as_str(), "ticket-42", "a session id names the episode");
    }
}
