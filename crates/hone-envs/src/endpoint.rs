//! `POST /run`: the agent endpoint hone's evaluation calls
//! (`hone eval --endpoint http://…/run`). The body is `{"input": <the task's
//! text>}`; the `X-Hone-Version` and `X-Hone-Episode` headers are passed on
//! to every model call of the run, so the gateway records the run as that
//! episode under that version. The reply is `{"output", "score", "calls"}`.
//!
//! With a simulated user ([`router_with_user`]) the endpoint also sends the
//! user's reaction to each run as feedback on its episode before replying,
//! at once: a sandbox, where rollouts and evaluations whose reward spec
//! reads only user signals get a user's reaction on demand (never the
//! hidden score itself). Production has no such user — people react only
//! to answers they were served — so `hone demo` uses it only with
//! `--sandbox-users`.
//!
//! `POST /step` is the environment's side of an episode for a trainer that
//! samples the model itself (TRL in `hone bench learn`): the body is
//! `{"input": <the task's text>, "turn": <one raw assistant turn>, "last":
//! bool}`; a turn with tool calls (not the last allowed) gets the tools'
//! results, as the runner would send them; any other turn is the final
//! answer and gets its hidden score. The rules (tool-call parsing, tool
//! results, the score) stay hone's, in one place.
//!
//! Handlers stay thin: parse, recover the task, hand it to the
//! [`Runner`], map errors to a status and an OpenAI-style error body.

use crate::runner::{RunContext, RunError, Runner};
use crate::users::SimulatedUser;
use crate::{Difficulty, Split};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hone_types::openai::{ErrorBody, ErrorDetail};
use hone_types::EpisodeId;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;

/// `POST /run` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The task's text: its first user message.
    pub input: String,
}

/// `POST /run` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResponse {
    /// The agent's final answer.
    pub output: String,
    /// The hidden score of the answer, in [0, 1].
    pub score: f64,
    /// Model calls the run made.
    pub calls: u32,
    /// The signals the simulated user sent about the run, if there is one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
}

/// `POST /step` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRequest {
    /// The task's text: its first user message.
    pub input: String,
    /// One assistant turn as the model wrote it (Hermes `<tool_call>`
    /// blocks included, the end-of-turn token left out).
    pub turn: String,
    /// The episode's last allowed turn: scored as the answer even if it calls tools.
    #[serde(default)]
    pub last: bool,
}

/// `POST /step` reply: the tools' results to continue with, or the
/// final answer's hidden score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepResponse {
    /// One result text per tool call, in order (a refused call's error too).
    ToolResults(Vec<String>),
    /// The hidden score of the turn as the final answer, in [0, 1].
    Score(f64),
}

/// What the routes share: the runner and the optional simulated user with
/// its random stream.
struct EndpointState {
    runner: Arc<Runner>,
    user: Option<(SimulatedUser, std::sync::Mutex<rand::rngs::StdRng>)>,
}

/// The endpoint's routes, serving `runner`'s environment.
pub fn router(runner: Arc<Runner>) -> Router {
    routes(EndpointState { runner, user: None })
}

/// The routes with `user` reacting to every run (see the module docs).
pub fn router_with_user(runner: Arc<Runner>, user: SimulatedUser) -> Router {
    let rng = std::sync::Mutex::new(user.rng());
    routes(EndpointState {
        runner,
        user: Some((user, rng)),
    })
}

fn routes(served: EndpointState) -> Router {
    Router::new()
        .route("/run", post(run))
        .route("/step", post(step))
        .with_state(Arc::new(served))
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

/// What the endpoint refuses, or could not do.
#[derive(Debug)]
enum EndpointError {
    Invalid {
        code: &'static str,
        message: String,
        param: Option<&'static str>,
    },
    UnknownTask(String),
    Gateway(RunError),
}

impl IntoResponse for EndpointError {
    fn into_response(self) -> Response {
        let (status, kind, code, message, param) = match self {
            EndpointError::Invalid { code, message, param } => {
                (StatusCode::BAD_REQUEST, "invalid_request_error", code, message, param)
            }
            EndpointError::UnknownTask(message) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request_error",
                "unknown_task",
                message,
                Some("input"),
            ),
            EndpointError::Gateway(error) => {
                let code = match &error {
                    RunError::Client(_) => "client_error",
                    RunError::Unreachable { .. } => "gateway_unreachable",
                    RunError::Status { .. } => "gateway_error",
                    RunError::BadResponse(_) | RunError::NoChoices => "gateway_bad_response",
                };
                (StatusCode::BAD_GATEWAY, "upstream_error", code, error.to_string(), None)
            }
        };
        let body = ErrorBody {
            error: ErrorDetail {
                message,
                kind: kind.to_owned(),
                code: Some(code.to_owned()),
                param: param.map(str::to_owned),
            },
        };
        (status, Json(body)).into_response()
    }
}

fn header(headers: &HeaderMap, name: &'static str) -> Result<Option<String>, EndpointError> {
    headers
        .get(name)
        .map(|value| {
            value.to_str().map(str::to_owned).map_err(|_| EndpointError::Invalid {
                code: "invalid_header",
                message: format!("header `{name}` must be visible ASCII"),
                param: Some(name),
            })
        })
        .transpose()
}

async fn run(
    State(served): State<Arc<EndpointState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, EndpointError> {
    let runner = &served.runner;
    let episode = header(&headers, "x-hone-episode")?
        .map(|raw| {
            EpisodeId::parse(&raw).map_err(|e| EndpointError::Invalid {
                code: "invalid_episode_id",
                message: format!("X-Hone-Episode `{raw}` {e}"),
                param: Some("x-hone-episode"),
            })
        })
        .transpose()?;
    let version = header(&headers, "x-hone-version")?;
    let request: RunRequest = serde_json::from_slice(&body).map_err(|e| EndpointError::Invalid {
        code: "invalid_body",
        message: format!("invalid body ({e}); send {{\"input\": \"<the task's text>\"}}"),
        param: Some("input"),
    })?;
    let task = task_of(runner.environment().as_ref(), &request.input)?;
    let outcome = runner
        .run(&task, &RunContext { episode, version })
        .await
        .map_err(EndpointError::Gateway)?;
    let mut signals = Vec::new();
    if let Some((user, rng)) = &served.user {
        let reaction = match rng.lock() {
            Ok(mut rng) => user.react_to(&outcome.played.answer, outcome.played.score, &mut *rng),
            Err(poisoned) => user.react_to(
                &outcome.played.answer,
                outcome.played.score,
                &mut *poisoned.into_inner(),
            ),
        };
        for signal in reaction {
            runner
                .send_feedback(&signal.feedback(&outcome.episode))
                .await
                .map_err(EndpointError::Gateway)?;
            signals.push(signal.name().to_owned());
        }
    }
    Ok(Json(RunResponse {
        output: outcome.played.answer,
        score: outcome.played.score,
        calls: outcome.played.calls,
        signals,
    })
    .into_response())
}

/// The task whose text is `input`, or the error that names an example.
fn task_of(environment: &dyn crate::Environment, input: &str) -> Result<crate::Task, EndpointError> {
    environment.task_from_prompt(input).ok_or_else(|| {
        let example = environment.task(Split::Train, 0, Difficulty::Easy).prompt;
        EndpointError::UnknownTask(format!(
            "`input` is not a task of environment `{}`; send a task's text, such as `{example}`",
            environment.name()
        ))
    })
}

async fn step(State(served): State<Arc<EndpointState>>, body: Bytes) -> Result<Response, EndpointError> {
    let request: StepRequest = serde_json::from_slice(&body).map_err(|e| EndpointError::Invalid {
        code: "invalid_body",
        message: format!(
            "invalid body ({e}); send {{\"input\": \"<the task's text>\", \"turn\": \"<the assistant's turn>\", \"last\": false}}"
        ),
        param: Some("turn"),
    })?;
    let environment = served.runner.environment().as_ref();
    let task = task_of(environment, &request.input)?;
    let parsed = hone_types::tool_calls::parse(&request.turn);
    let reply = if parsed.tool_calls.is_empty() || request.last {
        StepResponse::Score(environment.score(&task, &parsed.content))
    } else {
        StepResponse::ToolResults(
            parsed
                .tool_calls
                .iter()
                .map(|call| crate::tool_result_text(environment.call_tool(&task, &call.name, &call.arguments)))
                .collect(),
        )
    };
    Ok(Json(reply).into_response())
}
