//! Providers: where answers come from. One file per implementation behind the
//! small [`Provider`] trait; [`AnyProvider`] is the closed set the config's
//! `type` chooses from. Retries and fallback live in [`crate::dispatch`], not here:
//! a provider makes exactly one attempt.

pub(crate) mod anthropic;
mod local;
mod openai;

pub use anthropic::AnthropicProvider;
pub use local::{text_choice, LocalProvider};
pub use openai::OpenAiProvider;

use bytes::Bytes;
use futures::Stream;
use hone_artefacts::Artefacts;
use hone_config::{ProviderConfig, ProviderKind};
use hone_types::openai::{ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse};
use hone_types::Route;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Why one attempt failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// The upstream answered with an error status.
    #[error("upstream returned HTTP {status}: {message}")]
    Status {
        status: u16,
        message: String,
        /// From a `Retry-After` header.
        retry_after: Option<Duration>,
    },
    #[error("cannot connect to the upstream: {0}")]
    Connect(String),
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    /// The upstream answered something that is not the expected wire format.
    #[error("the upstream's answer could not be read: {0}")]
    Protocol(String),
    /// The upstream's answer (or one stream event) is larger than hone takes.
    #[error("the upstream's {what} is larger than {limit} bytes")]
    TooLarge { what: &'static str, limit: usize },
}

/// The Messages API's `thinking` object (extended thinking), carried in a
/// chat request's extra fields from the Messages door to an Anthropic
/// upstream; OpenAI-compatible upstreams are not sent it.
pub(crate) const ANTHROPIC_THINKING: &str = "thinking";

/// Largest upstream answer read (a chat completion is far smaller; this only
/// stops a broken or hostile upstream from filling memory).
pub const MAX_ANSWER_BYTES: usize = 32 << 20;
/// How much of an upstream's error body is kept for its message.
const MAX_ERROR_BYTES: usize = 64 << 10;

impl ProviderError {
    /// Worth another try at the same provider: rate limits, server errors,
    /// connection failures, time-outs.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Status { status, .. } => *status == 429 || *status >= 500,
            ProviderError::Connect(_) | ProviderError::Timeout(_) => true,
            ProviderError::Protocol(_) | ProviderError::TooLarge { .. } => false,
        }
    }

    /// Worth trying the next provider: anything but a request the upstream
    /// rejected as malformed (which every provider would reject).
    pub fn allows_fallback(&self) -> bool {
        !matches!(
            self,
            ProviderError::Status {
                status: 400 | 413 | 422,
                ..
            }
        )
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// One streamed chunk; `raw` is the upstream's own JSON when it spoke the
/// OpenAI format, forwarded byte for byte.
#[derive(Debug, Clone)]
pub struct StreamEvent {
    pub chunk: ChatCompletionChunk,
    pub raw: Option<Bytes>,
}

pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ProviderError>> + Send>>;

/// One upstream. `request.model` is already the route's model name; the
/// route also names the adapter, for providers that serve adapters.
pub trait Provider: Send + Sync {
    fn complete(
        &self,
        request: &ChatCompletionRequest,
        route: &Route,
    ) -> impl Future<Output = Result<ChatCompletionResponse, ProviderError>> + Send;

    /// Starts a stream; returns once the upstream accepted the request.
    fn stream(
        &self,
        request: &ChatCompletionRequest,
        route: &Route,
    ) -> impl Future<Output = Result<ChunkStream, ProviderError>> + Send;
}

/// The providers a config can name.
pub enum AnyProvider {
    OpenAi(OpenAiProvider),
    Anthropic(AnthropicProvider),
    Local(LocalProvider),
}

impl AnyProvider {
    pub fn from_config(config: &ProviderConfig, artefacts: &Arc<Artefacts>) -> Result<Self, String> {
        let api_key = config.api_key_env.as_ref().and_then(|name| match std::env::var(name) {
            Ok(key) if !key.is_empty() => Some(key),
            _ => {
                tracing::warn!(provider = %config.name, variable = %name, "the API key variable is not set; calling the upstream without a key");
                None
            }
        });
        Ok(match config.kind {
            ProviderKind::OpenAi => AnyProvider::OpenAi(OpenAiProvider::new(config, api_key)?),
            ProviderKind::Anthropic => AnyProvider::Anthropic(AnthropicProvider::new(config, api_key)?),
            ProviderKind::Local => AnyProvider::Local(LocalProvider::new(config, artefacts.clone())?),
        })
    }

    pub async fn complete(
        &self,
        request: &ChatCompletionRequest,
        route: &Route,
    ) -> Result<ChatCompletionResponse, ProviderError> {
        match self {
            AnyProvider::OpenAi(p) => p.complete(request, route).await,
            AnyProvider::Anthropic(p) => p.complete(request, route).await,
            AnyProvider::Local(p) => p.complete(request, route).await,
        }
    }

    pub async fn stream(&self, request: &ChatCompletionRequest, route: &Route) -> Result<ChunkStream, ProviderError> {
        match self {
            AnyProvider::OpenAi(p) => p.stream(request, route).await,
            AnyProvider::Anthropic(p) => p.stream(request, route).await,
            AnyProvider::Local(p) => p.stream(request, route).await,
        }
    }
}

/// A reqwest client with the provider's connect time-out. The provider's
/// `timeout` bounds a whole answer, streamed or not (see [`sse_events`]).
pub(crate) fn http_client(config: &ProviderConfig) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| format!("provider `{}`: cannot build the HTTP client: {e}", config.name))
}

/// The SSE events of a streamed upstream response, until `deadline` (the
/// whole answer's, counted from the request: keep-alive comments do not
/// extend it). A transport error, the deadline, an event larger than
/// [`crate::sse::MAX_EVENT_BYTES`], or the body ending (a complete stream is
/// ended by its consumer at its own end marker first) is yielded as an
/// error, after which the stream stops.
pub(crate) fn sse_events(
    response: reqwest::Response,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> impl futures::Stream<Item = Result<crate::sse::SseEvent, ProviderError>> + Send {
    use futures::StreamExt;
    let mut body = response.bytes_stream();
    async_stream::stream! {
        let mut parser = crate::sse::SseParser::default();
        loop {
            while let Some(event) = parser.next_event() {
                yield Ok(event);
            }
            if parser.overflowing() {
                yield Err(ProviderError::TooLarge { what: "stream event", limit: crate::sse::MAX_EVENT_BYTES });
                return;
            }
            match tokio::time::timeout_at(deadline, body.next()).await {
                Ok(Some(Ok(bytes))) => parser.push(&bytes),
                Ok(Some(Err(e))) => {
                    yield Err(transport_error(e, timeout));
                    return;
                }
                Ok(None) => {
                    yield Err(ProviderError::Protocol("the stream ended before its end marker".into()));
                    return;
                }
                Err(_) => {
                    yield Err(ProviderError::Timeout(timeout));
                    return;
                }
            }
        }
    }
}

/// Sends a streaming request, waiting for the response head until `deadline`.
pub(crate) async fn send_stream(
    request: reqwest::RequestBuilder,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> Result<reqwest::Response, ProviderError> {
    let response = tokio::time::timeout_at(deadline, request.send())
        .await
        .map_err(|_| ProviderError::Timeout(timeout))?
        .map_err(|e| transport_error(e, timeout))?;
    if !response.status().is_success() {
        return Err(status_error(response).await);
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if content_type.starts_with("application/json") {
        let message = error_message(response).await;
        return Err(ProviderError::Protocol(format!(
            "a stream was asked for but the upstream answered with one JSON document (does it support `stream: true`?): {message}"
        )));
    }
    Ok(response)
}

/// Reads a whole (non-streamed) answer, refusing one larger than
/// [`MAX_ANSWER_BYTES`] without buffering it.
pub(crate) async fn read_answer(mut response: reqwest::Response, timeout: Duration) -> Result<Bytes, ProviderError> {
    let too_large = ProviderError::TooLarge {
        what: "answer",
        limit: MAX_ANSWER_BYTES,
    };
    if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
        return Err(too_large);
    }
    // The chunks are kept as they came and joined once at the end: a growing
    // buffer would hold up to three times the cap while it reallocates.
    let mut chunks = Vec::new();
    let mut len = 0;
    while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(e, timeout))? {
        len += chunk.len();
        if len > MAX_ANSWER_BYTES {
            return Err(too_large);
        }
        chunks.push(chunk);
    }
    if chunks.len() == 1 {
        return Ok(chunks.remove(0));
    }
    let mut body = bytes::BytesMut::with_capacity(len);
    for chunk in chunks {
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Maps a reqwest failure to a provider error.
pub(crate) fn transport_error(e: reqwest::Error, timeout: Duration) -> ProviderError {
    if e.is_timeout() {
        ProviderError::Timeout(timeout)
    } else if is_garbled(&e) {
        // It answered, but not in HTTP: reachable, yet speaking nonsense.
        ProviderError::Protocol(error_chain(&e))
    } else if e.is_connect() || e.is_request() {
        ProviderError::Connect(error_chain(&e))
    } else {
        ProviderError::Protocol(error_chain(&e))
    }
}

/// Whether the upstream's reply could not be parsed as HTTP.
fn is_garbled(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(hyper) = s.downcast_ref::<hyper::Error>() {
            return hyper.is_parse() || hyper.is_parse_status() || hyper.is_parse_too_large();
        }
        source = s.source();
    }
    false
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Reads an error response into a [`ProviderError::Status`], keeping the
/// upstream's own message when it sent an `{"error":{"message":…}}` body.
pub(crate) async fn status_error(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    ProviderError::Status {
        status,
        message: error_message(response).await,
        retry_after,
    }
}

/// The message of an error body (its `error.message` when it has one),
/// reading at most `MAX_ERROR_BYTES` of it.
async fn error_message(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk[..chunk.len().min(MAX_ERROR_BYTES - body.len())]);
        if body.len() >= MAX_ERROR_BYTES {
            break;
        }
    }
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.pointer("/message"))
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned())
}
