//! A fake OpenAI-compatible model on loopback (the one fake: a hosted model
//! cannot run here). It parses requests as `ChatCompletionRequest` and
//! answers `ChatCompletionResponse`s, i.e. the real wire format, and records
//! what it saw. As an oracle it replays the environment's demonstration one
//! assistant message per call.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hone_envs::{assistant_tool_calls, Environment};
use hone_types::openai::{task_of, ChatCompletionRequest, ChatCompletionResponse, Choice, Extra, Message, Role, Usage};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::task::JoinSet;

/// How the fake model answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The demonstration's next assistant message.
    Oracle,
    /// A wrong final answer straight away.
    Wrong,
    /// Always a call to a tool that does not exist.
    AlwaysBadTool,
    /// HTTP 500 with an OpenAI error body.
    Fails,
}

/// One request as the fake model saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub episode: Option<String>,
    pub version: Option<String>,
    pub authorization: Option<String>,
    pub request: ChatCompletionRequest,
}

pub struct Upstream {
    pub environment: Arc<dyn Environment>,
    pub mode: Mode,
    pub seen: Mutex<Vec<Seen>>,
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|v| v.to_str().unwrap().to_owned())
}

fn completion(model: &str, message: Message) -> ChatCompletionResponse {
    let finish = if message.tool_calls().is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    ChatCompletionResponse {
        id: "chatcmpl-fake".to_owned(),
        object: "chat.completion".to_owned(),
        created: 1_700_000_000,
        model: model.to_owned(),
        choices: vec![Choice {
            index: 0,
            message,
            finish_reason: Some(finish.to_owned()),
            logprobs: None,
            extra: Extra::new(),
        }],
        usage: Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15,
            extra: Extra::new(),
        }),
        extra: Extra::new(),
    }
}

async fn chat(State(up): State<Arc<Upstream>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    // Parsed exactly as the gateway parses requests, validation included.
    let request = ChatCompletionRequest::from_json(&body).unwrap();
    up.seen.lock().unwrap().push(Seen {
        episode: header(&headers, "x-hone-episode"),
        version: header(&headers, "x-hone-version"),
        authorization: header(&headers, "authorization"),
        request: request.clone(),
    });
    let message = match up.mode {
        Mode::Fails => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"error": {"message": "model crashed", "type": "server_error", "code": null}})),
            )
                .into_response()
        }
        Mode::Wrong => Message::new(Role::Assistant, "The answer is 123456789."),
        Mode::AlwaysBadTool => {
            let n = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
            let mut message = assistant_tool_calls(vec![(format!("call_{n}"), "nope".to_owned(), "{}".to_owned())]);
            message.content = Some(hone_types::openai::Content::Text("Let me try a tool.".to_owned()));
            message
        }
        Mode::Oracle => {
            let task = up.environment.task_from_prompt(&task_of(&request.messages)).unwrap();
            let answered = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
            up.environment
                .demonstration(&task)
                .into_iter()
                .filter(|m| m.role == Role::Assistant)
                .nth(answered)
                .unwrap()
        }
    };
    Json(completion(&request.model, message)).into_response()
}

/// Serves `app` on a loopback port; the server lives as long as `tasks`.
pub async fn serve(app: Router, tasks: &mut JoinSet<()>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tasks.spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{address}")
}

/// A fake model for `environment`, served; returns its base URL.
pub async fn upstream(
    environment: Arc<dyn Environment>,
    mode: Mode,
    tasks: &mut JoinSet<()>,
) -> (Arc<Upstream>, String) {
    let up = Arc::new(Upstream {
        environment,
        mode,
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(up.clone());
    let base = serve(app, tasks).await;
    (up, base)
}
