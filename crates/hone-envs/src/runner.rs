//! The agent loop: one task, run against a gateway's OpenAI-compatible
//! `POST {base}/v1/chat/completions` (`model` = the agent's name), executing
//! the model's tool calls with the environment until it answers or runs out
//! of steps. Every call of a run carries the same `X-Hone-Episode` (and the
//! pinned `X-Hone-Version`, if any), so the gateway records one episode.
//!
//! Only the loop lives here; serving it over HTTP is [`crate::endpoint`].

use crate::episode::{play, Played};
use crate::{Environment, Task};
use hone_types::openai::{ChatCompletionRequest, ChatCompletionResponse, Extra, Message};
use hone_types::EpisodeId;
use hone_types::FeedbackRequest;
use std::sync::Arc;
use std::time::Duration;

/// Where and as whom the runner calls the model.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerConfig {
    /// The gateway's base URL, e.g. `http://127.0.0.1:7070` (no `/v1`).
    pub gateway: String,
    /// The agent's name, sent as `model`.
    pub agent: String,
    /// Sent as a bearer token, if set.
    pub api_key: Option<String>,
    /// Most model calls in one run (each answer or round of tool calls is one).
    pub max_steps: u32,
    /// Per HTTP request.
    pub timeout: Duration,
    /// Sampling temperature to ask for; `None` leaves it to the version.
    pub temperature: Option<f64>,
}

impl RunnerConfig {
    /// Four steps, a two-minute timeout per call, no key.
    pub fn new(gateway: impl Into<String>, agent: impl Into<String>) -> RunnerConfig {
        RunnerConfig {
            gateway: gateway.into(),
            agent: agent.into(),
            api_key: None,
            max_steps: 4,
            timeout: Duration::from_secs(120),
            temperature: None,
        }
    }
}

/// What one run is part of: the episode id to record it under (a fresh one
/// if `None`) and the version to pin (`X-Hone-Version`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunContext {
    pub episode: Option<EpisodeId>,
    pub version: Option<String>,
}

/// How a run went: its episode, and the episode as played.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub episode: EpisodeId,
    pub played: Played,
}

/// Why a run could not finish talking to the gateway. A bad tool call or a
/// wrong answer is not an error: it is part of the run, and scores low.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("could not build the HTTP client: {0}")]
    Client(String),
    #[error("gateway {url} unreachable: {message}")]
    Unreachable { url: String, message: String },
    #[error("gateway answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("gateway answered something that is not a chat completion: {0}")]
    BadResponse(String),
    #[error("gateway answered a chat completion with no choices")]
    NoChoices,
}

/// Runs an environment's tasks through a gateway.
#[derive(Clone)]
pub struct Runner {
    environment: Arc<dyn Environment>,
    config: RunnerConfig,
    http: reqwest::Client,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("environment", &self.environment.name())
            .field("gateway", &self.config.gateway)
            .field("agent", &self.config.agent)
            .finish_non_exhaustive()
    }
}

impl Runner {
    pub fn new(environment: Arc<dyn Environment>, config: RunnerConfig) -> Result<Runner, RunError> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| RunError::Client(e.to_string()))?;
        Ok(Runner {
            environment,
            config,
            http,
        })
    }

    pub fn environment(&self) -> &Arc<dyn Environment> {
        &self.environment
    }

    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.gateway.trim_end_matches('/'))
    }

    /// The request the runner sends for the conversation `messages`: the
    /// agent as `model`, the environment's tools, the configured temperature.
    pub fn request(&self, messages: &[Message]) -> ChatCompletionRequest {
        ChatCompletionRequest {
            model: self.config.agent.clone(),
            messages: messages.to_vec(),
            tools: Some(self.environment.tools()),
            tool_choice: None,
            response_format: None,
            temperature: self.config.temperature,
            top_p: None,
            max_tokens: None,
            max_completion_tokens: None,
            stop: None,
            seed: None,
            n: None,
            logprobs: None,
            top_logprobs: None,
            stream: None,
            stream_options: None,
            reasoning_effort: None,
            extra: Extra::new(),
        }
    }

    async fn post(
        &self,
        url: String,
        body: &impl serde::Serialize,
        context: &RunContext,
        episode: Option<&EpisodeId>,
    ) -> Result<bytes::Bytes, RunError> {
        let mut post = self.http.post(&url).json(body);
        if let Some(episode) = episode {
            post = post.header("x-hone-episode", episode.as_str());
        }
        if let Some(version) = &context.version {
            post = post.header("x-hone-version", version.as_str());
        }
        if let Some(key) = &self.config.api_key {
            post = post.bearer_auth(key);
        }
        let response = post.send().await.map_err(|e| RunError::Unreachable {
            url: url.clone(),
            message: e.to_string(),
        })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| RunError::Unreachable {
            url,
            message: e.to_string(),
        })?;
        if !status.is_success() {
            return Err(RunError::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        Ok(body)
    }

    /// Runs `task` to a final answer (or `max_steps` model calls) and scores it.
    pub async fn run(&self, task: &Task, context: &RunContext) -> Result<RunOutcome, RunError> {
        let episode = context.episode.clone().unwrap_or_else(EpisodeId::new_v7);
        let url = self.url("/v1/chat/completions");
        let played = play(
            self.environment.as_ref(),
            task,
            self.config.max_steps as usize,
            |messages| {
                let (url, episode) = (url.clone(), &episode);
                async move {
                    let body = self.post(url, &self.request(&messages), context, Some(episode)).await?;
                    let response: ChatCompletionResponse =
                        serde_json::from_slice(&body).map_err(|e| RunError::BadResponse(e.to_string()))?;
                    response
                        .choices
                        .into_iter()
                        .next()
                        .map(|choice| choice.message)
                        .ok_or(RunError::NoChoices)
                }
            },
        )
        .await?;
        let outcome = RunOutcome {
            episode: episode.clone(),
            played,
        };
        tracing::debug!(
            environment = self.environment.name(),
            task = %task.id,
            episode = %episode,
            calls = outcome.played.calls,
            score = outcome.played.score,
            "run finished"
        );
        Ok(outcome)
    }

    /// Sends one signal to the gateway's `POST /v1/feedback`.
    pub async fn send_feedback(&self, feedback: &FeedbackRequest) -> Result<(), RunError> {
        self.post(self.url("/v1/feedback"), feedback, &RunContext::default(), None)
            .await
            .map(|_| ())
    }
}
