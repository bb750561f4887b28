//! The HTTP routes. Handlers stay thin: they authenticate, parse, call into
//! the services (dispatch, recorder, store) and map errors; one file per area.

mod adapters;
mod admin;
mod call;
mod count_tokens;
mod embeddings;
mod episodes;
mod feedback;
mod models;
mod ops;
mod responses;
mod traces;

use crate::error::{ApiError, ErrorKind};
use crate::metrics::RouteName;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use std::sync::Arc;

pub const EPISODE_HEADER: HeaderName = HeaderName::from_static("x-hone-episode");
pub const CALL_HEADER: HeaderName = HeaderName::from_static("x-hone-call");
pub const VERSION_HEADER: HeaderName = HeaderName::from_static("x-hone-version");

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(call::chat_completions))
        .route("/v1/responses", post(call::responses))
        .route("/v1/responses/{id}", get(responses::show))
        .route("/v1/messages", post(call::messages))
        .route("/v1/messages/count_tokens", post(count_tokens::count))
        .route("/v1/embeddings", post(embeddings::create))
        .route("/v1/traces", post(traces::ingest))
        .route("/v1/models", get(models::list))
        .route("/v1/feedback", post(feedback::post_feedback))
        .route("/v1/episodes", get(episodes::list))
        .route("/v1/episodes/{id}", get(episodes::show))
        .route("/admin/versions", get(admin::versions))
        .route("/admin/versions/{id}", get(admin::version))
        .route("/admin/deployments", get(admin::deployments))
        .route("/admin/adapters", get(adapters::list).post(adapters::load))
        .route("/admin/adapters/{name}", axum::routing::delete(adapters::unload))
        .route("/health", get(ops::health))
        .route("/metrics", get(ops::metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(
        "unknown_route",
        format!("no route for {} {}", request.method(), request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        ErrorKind::MethodNotAllowed,
        "method_not_allowed",
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}

async fn count_requests(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let route = if path == "/v1/chat/completions" {
        RouteName::Chat
    } else if path.starts_with("/v1/responses") {
        RouteName::Responses
    } else if path == "/v1/messages" {
        RouteName::Messages
    } else if path == "/v1/embeddings" {
        RouteName::Embeddings
    } else if path == "/v1/traces" {
        RouteName::Traces
    } else if path == "/v1/models" {
        RouteName::Models
    } else if path == "/v1/feedback" {
        RouteName::Feedback
    } else if path.starts_with("/v1/episodes") {
        RouteName::Episodes
    } else if path.starts_with("/admin/") {
        RouteName::Admin
    } else {
        RouteName::Other
    };
    let response = next.run(request).await;
    state.metrics.count(route, response.status().as_u16());
    response
}

/// How long a client may take to send a request body.
const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Reads a request body up to `limit` bytes; larger bodies are a 413 that
/// names the limit. A `Content-Length` over the limit is refused unread.
pub(crate) async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorKind::PayloadTooLarge,
            "body_too_large",
            format!("the request body is larger than the limit of {limit} bytes (gateway.max_body_bytes)"),
        )
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let read = tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| {
            let mut e = ApiError::invalid(
                "body_timeout",
                format!(
                    "the request body did not arrive within {} s",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            );
            e.status = Some(axum::http::StatusCode::REQUEST_TIMEOUT);
            e
        })?;
    read.map_err(|e| {
        let inner = e.into_inner();
        if inner.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
            too_large()
        } else {
            ApiError::invalid("body_unreadable", format!("cannot read the request body: {inner}"))
        }
    })
}

/// A path segment (`/v1/episodes/{id}`), refused in the API's own format
/// when it is not valid percent-encoded UTF-8.
pub(crate) fn path_param(
    param: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<String, ApiError> {
    param.map(|axum::extract::Path(value)| value).map_err(|e| {
        ApiError::invalid(
            "invalid_path",
            format!("the request path cannot be read: {}", e.body_text()),
        )
    })
}

/// A query string, refused in the API's own format when it does not parse.
pub(crate) fn query_params<T>(
    query: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    query
        .map(|axum::extract::Query(value)| value)
        .map_err(|e| ApiError::invalid("invalid_query", e.body_text()))
}

/// Parses a JSON body into `T`, naming the field at fault.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::invalid(
            "invalid_utf8",
            format!(
                "request body is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })?;
    let deserializer = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::invalid("invalid_json", format!("request body is not valid JSON: {inner}"))
        } else if path == "." {
            ApiError::invalid("invalid_request", format!("invalid request body: {inner}"))
        } else {
            ApiError::invalid("invalid_request", format!("invalid value for `{path}`: {inner}")).with_param(Some(path))
        }
    })
}

pub(crate) fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// A JSON response with status 200.
pub(crate) fn json_response<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => ApiError::new(
            ErrorKind::Internal,
            "encode_failed",
            format!("cannot encode the response: {e}"),
        )
        .into_response(),
    }
}
