//! The one fake model server of hone's tests: OpenAI-compatible chat
//! completions (JSON and SSE, with logprobs and `n`), Anthropic messages
//! (JSON and SSE) and token counting, embeddings, and vLLM's dynamic LoRA
//! loading — each in its provider's real wire format, on loopback (a hosted
//! model cannot run here). Every request it receives is kept for assertions.
//!
//! What it answers is decided in two places. A test suite may give it a
//! [`Brain`]: a function of the request that returns the assistant message
//! (or an error) its scenario needs — an arithmetic model, an environment's
//! oracle, a judge. Where there is no brain, or it passes, the last user
//! message scripts the answer:
//!
//! - `TOOL`: answers with a `get_weather` tool call (`BADTOOL`: an unknown tool)
//! - `FAIL503ONCE:<key>` / `RATELIMITONCE:<key>`: fails the first try for that key
//! - `ALWAYS500`: always fails with HTTP 500
//! - `BADREQUEST`: answers HTTP 400 with an OpenAI error body
//! - `SLOW:<ms>`: waits before answering (streams wait between chunks)
//! - `CUT`: a stream that stops after two chunks without `[DONE]`
//! - `ASK`: answers with a clarifying question
//! - `HUGE:<MiB>`: a 200 answer of that many MiB (sent in chunks, no length)
//! - `BIGEVENT:<MiB>`: a stream whose first event never ends (no blank line)
//! - `JSONSTREAM`: answers a stream request with one JSON document
//! - `HUGESTREAM:<MiB>`: a well-formed stream whose content totals that many
//!   MiB, 64 KiB per chunk (the fake holds one chunk in memory)
//! - `FIRSTTOKEN:<ms>`: a stream whose opening role chunk comes at once and
//!   whose first token comes that much later
//! - `STOPSEQ` (Anthropic): an answer ended by the stop sequence `END`
//! - anything else: `Echo: <text>` (after a tool result: `Echo: tool said <result>`)
//!
//! `/v1/messages/count_tokens` counts a token per word of the system prompt
//! and the messages (as Anthropic's, without `max_tokens`).
//!
//! `/v1/embeddings` answers one 3-dimensional vector per input, counting a
//! token per word (and fails as scripted above when an input says so).
//!
//! `/v1/load_lora_adapter` (vLLM) loads any adapter except those whose name
//! starts with `broken`, which it refuses with HTTP 400.
//!
//! OpenAI's fine-tuning API (files and jobs) is [`crate::fine_tuning`]'s.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake has received, and the failures it has scripted.
#[derive(Default)]
pub struct Seen {
    /// Every request: its path, JSON body and headers, oldest first.
    pub requests: Vec<(String, Value, HeaderMap)>,
    failures: HashMap<String, u32>,
}

/// What a [`Brain`] answers a request with.
pub enum Reply {
    /// An OpenAI assistant message (`{"role": "assistant", "content": …,
    /// "tool_calls": […]}`), sent in the wire format that was asked for.
    Message(Value),
    /// An error status and its JSON body, sent as they are.
    Error(StatusCode, Value),
}

impl Reply {
    /// An assistant message saying `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Reply::Message(json!({"role": "assistant", "content": text.into()}))
    }
}

/// A test suite's model: the request body and headers in, a reply out, or
/// `None` to let the scripts above answer.
pub type Brain = Arc<dyn Fn(&Value, &HeaderMap) -> Option<Reply> + Send + Sync>;

struct Shared {
    seen: Mutex<Seen>,
    brain: Option<Brain>,
}

impl Shared {
    fn record(&self, path: &str, body: &Value, headers: &HeaderMap) {
        self.seen
            .lock()
            .unwrap()
            .requests
            .push((path.to_owned(), body.clone(), headers.clone()));
    }

    fn think(&self, body: &Value, headers: &HeaderMap) -> Option<Reply> {
        self.brain.as_ref().and_then(|brain| brain(body, headers))
    }
}

pub struct FakeUpstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    fine_tuning: crate::fine_tuning::Shared,
}

impl FakeUpstream {
    /// The fake with the scripted answers only.
    pub async fn start() -> Self {
        Self::serve(None).await
    }

    /// The fake answering with `brain` first.
    pub async fn with_brain(brain: impl Fn(&Value, &HeaderMap) -> Option<Reply> + Send + Sync + 'static) -> Self {
        Self::serve(Some(Arc::new(brain))).await
    }

    async fn serve(brain: Option<Brain>) -> Self {
        let shared = Arc::new(Shared {
            seen: Mutex::new(Seen::default()),
            brain,
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/load_lora_adapter", post(load_lora))
            .with_state(shared.clone());
        let fine_tuning = crate::fine_tuning::Shared::default();
        let app = {
            use crate::fine_tuning as ft;
            app.merge(
                Router::new()
                    .route("/v1/files", post(ft::upload))
                    .route("/v1/fine_tuning/jobs", post(ft::create))
                    .route("/v1/fine_tuning/jobs/{id}", axum::routing::get(ft::read))
                    .route("/v1/fine_tuning/jobs/{id}/events", axum::routing::get(ft::events))
                    .route(
                        "/v1/fine_tuning/jobs/{id}/checkpoints",
                        axum::routing::get(ft::checkpoints),
                    )
                    .route("/v1/fine_tuning/jobs/{id}/cancel", post(ft::cancel))
                    .with_state(fine_tuning.clone()),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            addr,
            shared,
            fine_tuning,
        }
    }

    /// The fine-tuning API's files and jobs, and how its next jobs end.
    pub fn fine_tuning(&self) -> std::sync::MutexGuard<'_, crate::fine_tuning::FineTuning> {
        self.fine_tuning.lock().unwrap()
    }

    /// `http://127.0.0.1:port`.
    pub fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The OpenAI-style base URL (`http://127.0.0.1:port/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root())
    }

    /// The Anthropic-style base URL (no `/v1`).
    pub fn anthropic_url(&self) -> String {
        self.root()
    }

    /// Request bodies received on a path, oldest first.
    pub fn bodies(&self, path: &str) -> Vec<Value> {
        self.seen()
            .requests
            .iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, b, _)| b.clone())
            .collect()
    }

    /// Chat completion request bodies, oldest first.
    pub fn chats(&self) -> Vec<Value> {
        self.bodies("/v1/chat/completions")
    }

    /// Every request's headers, oldest first.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.seen().requests.iter().map(|(_, _, h)| h.clone()).collect()
    }

    /// Everything received so far.
    pub fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.shared.seen.lock().unwrap()
    }
}

fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    // After a tool result the model answers in words.
    if let Some(last) = messages.last().filter(|m| m["role"] == "tool") {
        return format!("tool said {}", last["content"].as_str().unwrap_or_default());
    }
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .cloned()
        .unwrap_or(Value::Null);
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

enum Script {
    Text(String),
    Tool(&'static str),
    Fail(StatusCode, Option<&'static str>),
    /// A brain's message.
    Message(Value),
}

/// Why the finish: a message with tool calls ends in them.
fn finish_of(message: &Value) -> &'static str {
    if message["tool_calls"].as_array().is_some_and(|calls| !calls.is_empty()) {
        "tool_calls"
    } else {
        "stop"
    }
}

/// `text` cut into pieces of at most `width` characters, as a stream sends it.
fn pieces(text: &str, width: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(width.max(1)).map(|c| c.iter().collect()).collect()
}

fn script(seen: &Mutex<Seen>, text: &str) -> Script {
    let once = |prefix: &str| -> Option<bool> {
        let key = text.split_whitespace().find_map(|w| w.strip_prefix(prefix))?;
        let mut seen = seen.lock().unwrap();
        let count = seen.failures.entry(format!("{prefix}{key}")).or_default();
        *count += 1;
        Some(*count == 1)
    };
    if once("FAIL503ONCE:") == Some(true) {
        return Script::Fail(StatusCode::SERVICE_UNAVAILABLE, None);
    }
    if once("RATELIMITONCE:") == Some(true) {
        return Script::Fail(StatusCode::TOO_MANY_REQUESTS, Some("0"));
    }
    if text.contains("ALWAYS500") {
        return Script::Fail(StatusCode::INTERNAL_SERVER_ERROR, None);
    }
    if text.contains("BADREQUEST") {
        return Script::Fail(StatusCode::BAD_REQUEST, None);
    }
    if text.contains("BADTOOL") {
        return Script::Tool("get_wether");
    }
    if text.contains("TOOL") {
        return Script::Tool("get_weather");
    }
    if text.contains("ASK") {
        return Script::Text("Which city do you mean?".into());
    }
    Script::Text(format!("Echo: {text}"))
}

/// `HUGE:<MiB>` and `BIGEVENT:<MiB>`: answers far larger than any real one,
/// produced a chunk at a time (the fake holds only one chunk in memory).
fn oversized(text: &str) -> Option<Response> {
    let mib = |prefix: &str| -> Option<usize> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(prefix))
            .and_then(|n| n.parse().ok())
    };
    let (mib, head, content_type) = if let Some(mib) = mib("HUGE:") {
        (mib, &b"{\"id\":\"x\",\"pad\":\""[..], "application/json")
    } else if let Some(mib) = mib("BIGEVENT:") {
        (mib, &b"data: {\"pad\":\""[..], "text/event-stream")
    } else {
        return None;
    };
    let stream = async_stream::stream! {
        yield Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(head));
        let chunk = bytes::Bytes::from(vec![b'x'; 64 << 10]);
        for _ in 0..mib * 16 {
            yield Ok(chunk.clone());
        }
    };
    let mut response = Response::new(Body::from_stream(stream));
    response
        .headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    Some(response)
}

fn number_after(text: &str, prefix: &str) -> u64 {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(prefix))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn slow_ms(text: &str) -> u64 {
    number_after(text, "SLOW:")
}

/// `HUGESTREAM:<MiB>`: a stream of 64 KiB content chunks, then its end.
fn huge_stream(mib: u64) -> Response {
    let stream = async_stream::stream! {
        let open = json!({"id": "chatcmpl-huge", "object": "chat.completion.chunk", "created": 1, "model": "fake", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]});
        yield Ok::<_, std::convert::Infallible>(bytes::Bytes::from(format!("data: {open}\n\n")));
        let piece = "x".repeat(64 << 10);
        let chunk = json!({"id": "chatcmpl-huge", "object": "chat.completion.chunk", "created": 1, "model": "fake", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
        let frame = bytes::Bytes::from(format!("data: {chunk}\n\n"));
        for _ in 0..mib * 16 {
            yield Ok(frame.clone());
        }
        let end = json!({"id": "chatcmpl-huge", "object": "chat.completion.chunk", "created": 1, "model": "fake", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        yield Ok(bytes::Bytes::from(format!("data: {end}\n\ndata: [DONE]\n\n")));
    };
    let mut response = Response::new(Body::from_stream(stream));
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

fn fail(status: StatusCode, retry_after: Option<&str>) -> Response {
    let mut response = (status, Json(json!({"error": {"message": format!("fake upstream says {}", status.as_u16()), "type": "server_error", "code": null}}))).into_response();
    if let Some(after) = retry_after {
        response.headers_mut().insert("retry-after", after.parse().unwrap());
    }
    response
}

fn sse(frames: Vec<String>, delay: Duration, first_token: Duration, finish: bool) -> Response {
    let stream = async_stream::stream! {
        for (i, frame) in frames.into_iter().enumerate() {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if i == 1 && !first_token.is_zero() {
                tokio::time::sleep(first_token).await;
            }
            yield Ok::<_, std::convert::Infallible>(bytes::Bytes::from(frame));
        }
        if finish {
            yield Ok(bytes::Bytes::from_static(b"data: [DONE]\n\n"));
        }
    };
    let mut response = Response::new(Body::from_stream(stream));
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

/// vLLM's `return_token_ids` answer fields for `text`: one id a piece, as
/// [`logprobs_for`] gives one logprob a piece (small ids: inside the
/// vocabulary of the tiny checkpoints tests train on).
fn token_ids_for(text: &str) -> Value {
    json!((0..text.split_inclusive(' ').count())
        .map(|i| 100 + i)
        .collect::<Vec<_>>())
}

/// The prompt's token ids vLLM returns: one a word of the last user message.
fn prompt_ids_for(text: &str) -> Value {
    json!((1..=text.split_whitespace().count().max(1)).collect::<Vec<_>>())
}

fn logprobs_for(text: &str) -> Value {
    json!({"content": text.split_inclusive(' ').enumerate().map(|(i, t)| json!({"token": t, "logprob": -0.1 * (i as f64 + 1.0), "bytes": t.as_bytes(), "top_logprobs": []})).collect::<Vec<_>>()})
}

async fn openai(State(shared): State<Arc<Shared>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    shared.record("/v1/chat/completions", &body, &headers);
    let thought = match shared.think(&body, &headers) {
        Some(Reply::Error(status, error)) => return (status, Json(error)).into_response(),
        Some(Reply::Message(message)) => Some(Script::Message(message)),
        None => None,
    };
    let text = last_user_text(&body);
    let model = body["model"].as_str().unwrap_or("fake").to_owned();
    let delay = Duration::from_millis(slow_ms(&text));
    let stream = body["stream"] == true;
    let want_logprobs = body["logprobs"] == true;
    // vLLM's `return_token_ids`: the prompt's ids at the top (the first
    // chunk of a stream) and each answer's beside it (each chunk's own).
    let want_ids = body["return_token_ids"] == true;
    let n = body["n"].as_u64().unwrap_or(1);
    if let Some(response) = oversized(&text) {
        return response;
    }
    if stream && text.contains("HUGESTREAM:") {
        return huge_stream(number_after(&text, "HUGESTREAM:"));
    }
    let first_token = Duration::from_millis(number_after(&text, "FIRSTTOKEN:"));
    let script = thought.unwrap_or_else(|| script(&shared.seen, &text));
    if let Script::Fail(status, retry_after) = script {
        return fail(status, retry_after);
    }
    if stream && text.contains("JSONSTREAM") {
        return Json(
            json!({"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": model, "choices": []}),
        )
        .into_response();
    }
    if !stream && !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let id = "chatcmpl-fake";
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18});
    match (script, stream) {
        (Script::Text(answer), false) => {
            let choices: Vec<Value> = (0..n)
                .map(|i| {
                    let mut c = json!({"index": i, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop", "token_ids": [101, 102, 103]});
                    if want_logprobs {
                        c["logprobs"] = logprobs_for(&answer);
                    }
                    if want_ids {
                        c["token_ids"] = token_ids_for(&answer);
                    }
                    c
                })
                .collect();
            let mut answer = json!({"id": id, "object": "chat.completion", "created": 1, "model": model, "choices": choices, "usage": usage});
            if want_ids {
                answer["prompt_token_ids"] = prompt_ids_for(&text);
            }
            Json(answer).into_response()
        }
        (Script::Tool(name), false) => Json(json!({"id": id, "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{\"city\": \"Paris\"}"}}]}, "logprobs": null, "finish_reason": "tool_calls"}],
            "usage": usage})).into_response(),
        (Script::Message(message), false) => {
            let finish = finish_of(&message);
            let choices: Vec<Value> = (0..n)
                .map(|i| {
                    let mut c = json!({"index": i, "message": message, "finish_reason": finish});
                    if let Some(content) = message["content"].as_str().filter(|_| want_logprobs) {
                        c["logprobs"] = logprobs_for(content);
                    }
                    if let Some(content) = message["content"].as_str().filter(|_| want_ids) {
                        c["token_ids"] = token_ids_for(content);
                    }
                    c
                })
                .collect();
            let mut answer = json!({"id": id, "object": "chat.completion", "created": 1, "model": model, "choices": choices, "usage": usage});
            if want_ids {
                answer["prompt_token_ids"] = prompt_ids_for(&text);
            }
            Json(answer).into_response()
        }
        (script, true) => {
            let chunk = |delta: Value, finish: Value| {
                format!("data: {}\n\n", json!({"id": id, "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
            };
            let mut first: Value = serde_json::from_str(chunk(json!({"role": "assistant", "content": ""}), Value::Null).trim_start_matches("data: ").trim()).unwrap();
            if want_ids {
                first["prompt_token_ids"] = prompt_ids_for(&text);
            }
            let mut frames = vec![format!("data: {first}\n\n")];
            // A piece of the answer's text, with its logprob and token id
            // when asked for.
            let content_frame = |piece: &str| {
                let mut frame = json!({"id": id, "object": "chat.completion.chunk", "created": 1, "model": model,
                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
                if want_logprobs {
                    frame["choices"][0]["logprobs"] = logprobs_for(piece);
                }
                if want_ids {
                    frame["choices"][0]["token_ids"] = token_ids_for(piece);
                }
                format!("data: {frame}\n\n")
            };
            let finish_reason = match &script {
                Script::Text(answer) => {
                    frames.extend(answer.split_inclusive(' ').map(&content_frame));
                    "stop"
                }
                Script::Tool(name) => {
                    frames.push(chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}]}), Value::Null));
                    for piece in ["{\"city\"", ": \"Par", "is\"}"] {
                        frames.push(chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}), Value::Null));
                    }
                    "tool_calls"
                }
                Script::Message(message) => {
                    if let Some(content) = message["content"].as_str() {
                        frames.extend(content.split_inclusive(' ').map(&content_frame));
                    }
                    for (index, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
                        let function = &call["function"];
                        frames.push(chunk(json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": {"name": function["name"], "arguments": ""}}]}), Value::Null));
                        for piece in pieces(function["arguments"].as_str().unwrap_or(""), 6) {
                            frames.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), Value::Null));
                        }
                    }
                    finish_of(message)
                }
                Script::Fail(..) => unreachable!(),
            };
            let cut = text.contains("CUT");
            if cut {
                frames.truncate(2);
            } else {
                frames.push(chunk(json!({}), json!(finish_reason)));
                if body["stream_options"]["include_usage"] == true {
                    frames.push(format!("data: {}\n\n", json!({"id": id, "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [], "usage": usage})));
                }
            }
            sse(frames, delay, first_token, !cut)
        }
        (Script::Fail(status, retry_after), false) => fail(status, retry_after),
    }
}

async fn anthropic(State(shared): State<Arc<Shared>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    shared.record("/v1/messages", &body, &headers);
    let text = last_user_text(&body);
    let model = body["model"].as_str().unwrap_or("claude-fake").to_owned();
    let script = match shared.think(&body, &headers) {
        Some(Reply::Error(status, error)) => return (status, Json(error)).into_response(),
        Some(Reply::Message(message)) => Script::Message(message),
        None => script(&shared.seen, &text),
    };
    if let Script::Fail(status, retry_after) = script {
        let mut response = (status, Json(json!({"type": "error", "error": {"type": "api_error", "message": format!("fake anthropic says {}", status.as_u16())}}))).into_response();
        if let Some(after) = retry_after {
            response.headers_mut().insert("retry-after", after.parse().unwrap());
        }
        return response;
    }
    let (content, stop_reason) = match &script {
        Script::Text(answer) => (json!([{"type": "text", "text": answer}]), "end_turn"),
        Script::Tool(name) => (
            json!([{"type": "text", "text": "Let me check."}, {"type": "tool_use", "id": "toolu_1", "name": name, "input": {"city": "Paris"}}]),
            "tool_use",
        ),
        Script::Message(message) => anthropic_content(message),
        Script::Fail(..) => unreachable!(),
    };
    let (stop_reason, stop_sequence) = if text.contains("STOPSEQ") {
        ("stop_sequence", json!("END"))
    } else {
        (stop_reason, Value::Null)
    };
    if body["stream"] != true {
        return Json(
            json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": {"input_tokens": 13, "output_tokens": 9}}),
        )
        .into_response();
    }
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut frames = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "usage": {"input_tokens": 13, "output_tokens": 1}}}),
    )];
    frames.push(event("ping", json!({"type": "ping"})));
    for (index, block) in content.as_array().unwrap().iter().enumerate() {
        if block["type"] == "text" {
            frames.push(event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            ));
            for piece in block["text"].as_str().unwrap().split_inclusive(' ') {
                frames.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})));
            }
        } else {
            frames.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})));
            for piece in pieces(&block["input"].to_string(), 10) {
                frames.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})));
            }
        }
        frames.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    frames.push(event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence}, "usage": {"output_tokens": 9}})));
    frames.push(event("message_stop", json!({"type": "message_stop"})));
    let first_token = Duration::from_millis(number_after(&text, "FIRSTTOKEN:"));
    sse(frames, Duration::ZERO, first_token, false)
}

/// Anthropic's token counting: a token per word of the system prompt and
/// the messages' text.
async fn count_tokens(State(shared): State<Arc<Shared>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    shared.record("/v1/messages/count_tokens", &body, &headers);
    let words = |v: &Value| -> usize {
        match v {
            Value::String(s) => s.split_whitespace().count(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .map(|t| t.split_whitespace().count())
                .sum(),
            _ => 0,
        }
    };
    let tokens = words(&body["system"])
        + body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().map(|m| words(&m["content"])).sum());
    Json(json!({"input_tokens": tokens})).into_response()
}

async fn embeddings(State(shared): State<Arc<Shared>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    shared.record("/v1/embeddings", &body, &headers);
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().map(|i| i.as_str().unwrap_or("x").to_owned()).collect(),
        _ => return fail(StatusCode::BAD_REQUEST, None),
    };
    // `FAIL503ONCE:<key>` in an input fails its first try.
    if let Script::Fail(status, retry_after) = script(&shared.seen, &inputs.join(" ")) {
        return fail(status, retry_after);
    }
    let tokens: usize = inputs.iter().map(|i| i.split_whitespace().count()).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": [text.len() as f64, 1.0, 0.5]}))
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})).into_response()
}

/// An OpenAI assistant message as Anthropic content blocks, and why it ends.
fn anthropic_content(message: &Value) -> (Value, &'static str) {
    let mut blocks = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let input: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("{}")).unwrap_or(json!({}));
        blocks.push(json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": input}));
    }
    let stop = if finish_of(message) == "tool_calls" {
        "tool_use"
    } else {
        "end_turn"
    };
    (Value::Array(blocks), stop)
}

/// vLLM's dynamic LoRA loading: adapters named `broken…` are refused.
async fn load_lora(State(shared): State<Arc<Shared>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    shared.record("/v1/load_lora_adapter", &body, &headers);
    if body["lora_name"].as_str().unwrap_or("").starts_with("broken") {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "adapter not found", "type": "invalid_request_error"}})),
        )
            .into_response();
    }
    "Success: LoRA adapter loaded".into_response()
}
