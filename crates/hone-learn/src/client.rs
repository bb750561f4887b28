//! How learning talks to models: through the gateway's OpenAI-compatible
//! API, so that every call it makes (judges, evaluation replays) is recorded
//! like any other, pinned to a version with `X-Hone-Version` — and through
//! its admin API for what only the serving side can do (loading an adapter
//! into an upstream model server).

use crate::error::{LearnError, Result};
use futures::future::BoxFuture;
use hone_types::openai::{ChatCompletionResponse, ErrorBody};
use serde_json::Value;
use std::time::Duration;

/// Sends one chat completion for `request["model"]` (the agent) as part of
/// `episode`, pinned to `version` when given.
pub trait ChatClient: Send + Sync {
    fn chat<'a>(
        &'a self,
        request: &'a Value,
        episode: &'a str,
        version: Option<&'a str>,
    ) -> BoxFuture<'a, Result<ChatCompletionResponse>>;
}

/// A gateway reached over HTTP (`http://127.0.0.1:7070`).
#[derive(Debug, Clone)]
pub struct GatewayClient {
    pub base_url: String,
    pub api_key: Option<String>,
    /// The gateway's admin token, for `/admin/*` (none on an open laptop gateway).
    pub admin_token: Option<String>,
    http: reqwest::Client,
}

impl GatewayClient {
    pub fn new(base_url: impl Into<String>, api_key: Option<String>, timeout: Duration) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| LearnError::gateway(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key,
            admin_token: None,
            http,
        })
    }

    /// The same client, sending `token` to the admin API.
    pub fn with_admin_token(mut self, token: Option<String>) -> Self {
        self.admin_token = token;
        self
    }

    /// Asks the gateway to load adapter `name` from `path` into `provider`
    /// (`POST /admin/adapters`); the gateway's error message when it cannot.
    pub async fn load_adapter(&self, provider: &str, name: &str, path: &str) -> Result<()> {
        let post = self
            .http
            .post(format!("{}/admin/adapters", self.base_url))
            .json(&serde_json::json!({"name": name, "path": path, "provider": provider}));
        let response = send(post, self.admin_token.as_deref()).await?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let message = match response.json::<ErrorBody>().await {
            Ok(body) => body.error.message,
            Err(_) => format!("the gateway answered {status}"),
        };
        Err(LearnError::gateway(message))
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

/// Sends `post` with `token` as its bearer, if any; an unreachable gateway
/// is a gateway error.
async fn send(mut post: reqwest::RequestBuilder, token: Option<&str>) -> Result<reqwest::Response> {
    if let Some(token) = token {
        post = post.bearer_auth(token);
    }
    post.send()
        .await
        .map_err(|e| LearnError::gateway(format!("gateway unreachable: {e}")))
}

impl ChatClient for GatewayClient {
    fn chat<'a>(
        &'a self,
        request: &'a Value,
        episode: &'a str,
        version: Option<&'a str>,
    ) -> BoxFuture<'a, Result<ChatCompletionResponse>> {
        Box::pin(async move {
            let mut post = self
                .http
                .post(format!("{}/v1/chat/completions", self.base_url))
                .header("x-hone-episode", episode)
                .json(request);
            if let Some(v) = version {
                post = post.header("x-hone-version", v);
            }
            let response = send(post, self.api_key.as_deref()).await?;
            let status = response.status();
            let body = response
                .bytes()
                .await
                .map_err(|e| LearnError::gateway(format!("gateway: {e}")))?;
            if !status.is_success() {
                return Err(LearnError::gateway(format!(
                    "gateway answered {status}: {}",
                    String::from_utf8_lossy(&body)
                )));
            }
            serde_json::from_slice(&body).map_err(|e| {
                LearnError::gateway(format!("gateway answered something that is not a chat completion: {e}"))
            })
        })
    }
}
