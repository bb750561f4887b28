//! The fake model for the environment tests: the shared fake upstream with
//! a brain that parses each request as `ChatCompletionRequest` (exactly as
//! the gateway does, validation included), records what it saw and, as an
//! oracle, replays the environment's demonstration one assistant message
//! per call.

use axum::http::{HeaderMap, StatusCode};
use axum::Router;
use hone_envs::{assistant_tool_calls, Environment};
use hone_test_support::{FakeUpstream, Reply};
use hone_types::openai::{task_of, ChatCompletionRequest, Message, Role};
use serde_json::{json, Value};
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

fn answer(up: &Upstream, body: &Value, headers: &HeaderMap) -> Reply {
    let request = ChatCompletionRequest::from_json(&serde_json::to_vec(body).unwrap()).unwrap();
    up.seen.lock().unwrap().push(Seen {
        episode: header(headers, "x-hone-episode"),
        version: header(headers, "x-hone-version"),
        authorization: header(headers, "authorization"),
        request: request.clone(),
    });
    let message = match up.mode {
        Mode::Fails => {
            return Reply::Error(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": {"message": "model crashed", "type": "server_error", "code": null}}),
            )
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
    Reply::Message(serde_json::to_value(message).unwrap())
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
pub async fn upstream(environment: Arc<dyn Environment>, mode: Mode) -> (Arc<Upstream>, String) {
    let up = Arc::new(Upstream {
        environment,
        mode,
        seen: Mutex::new(Vec::new()),
    });
    let model = up.clone();
    let fake = FakeUpstream::with_brain(move |body, headers| Some(answer(&model, body, headers))).await;
    (up, fake.root())
}
