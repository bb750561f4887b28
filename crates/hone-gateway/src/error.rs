//! The HTTP edge's error: every failure becomes a status and an OpenAI-style
//! body `{"error":{"message","type","code","param"}}`. Each variant maps
//! explicitly; there is no catch-all arm to hide a new one.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hone_types::openai::{ErrorBody, ErrorDetail};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request is malformed or breaks a rule.
    InvalidRequest,
    /// 401: no or wrong credentials.
    Unauthorized,
    /// 403: valid credentials, not allowed here.
    Forbidden,
    /// 404: unknown agent, episode, call, version or route.
    NotFound,
    /// 405
    MethodNotAllowed,
    /// 409: the request names something another agent owns.
    Conflict,
    /// 413
    PayloadTooLarge,
    /// 429, passed on from an upstream that kept rate limiting.
    RateLimited,
    /// 502: every provider of the version failed.
    Upstream,
    /// 504: the upstream timed out.
    UpstreamTimeout,
    /// 503: the store or recorder cannot take data right now.
    Unavailable,
    /// 500: a bug.
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
    /// Overrides the kind's status (an upstream 4xx passed through).
    pub status: Option<StatusCode>,
    /// When the client may try again (sent as `Retry-After`, in seconds).
    pub retry_after: Option<std::time::Duration>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            code,
            message: message.into(),
            param: None,
            status: None,
            retry_after: None,
        }
    }

    /// The error with its `Retry-After`, whatever door formats it.
    pub fn respond_with(&self, mut response: Response) -> Response {
        if let Some(after) = self.retry_after {
            let seconds = after.as_secs_f64().ceil().max(1.0) as u64;
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(axum::http::header::RETRY_AFTER, value);
            }
        }
        response
    }

    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, code, message)
    }

    pub fn with_param(mut self, param: Option<String>) -> Self {
        self.param = param;
        self
    }

    pub fn status(&self) -> StatusCode {
        if let Some(status) = self.status {
            return status;
        }
        match self.kind {
            ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
            ErrorKind::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn type_name(&self) -> &'static str {
        match self.kind {
            ErrorKind::InvalidRequest
            | ErrorKind::NotFound
            | ErrorKind::MethodNotAllowed
            | ErrorKind::Conflict
            | ErrorKind::PayloadTooLarge => "invalid_request_error",
            ErrorKind::Unauthorized => "authentication_error",
            ErrorKind::Forbidden => "permission_error",
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::Upstream | ErrorKind::UpstreamTimeout => "upstream_error",
            ErrorKind::Unavailable => "service_unavailable",
            ErrorKind::Internal => "server_error",
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.clone(),
                kind: self.type_name().to_owned(),
                code: Some(self.code.to_owned()),
                param: self.param.clone(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = (self.status(), body).into_response();
        response.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.kind == ErrorKind::Unauthorized {
            response
                .headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        self.respond_with(response)
    }
}

impl From<hone_store::StoreError> for ApiError {
    fn from(e: hone_store::StoreError) -> Self {
        match e {
            hone_store::StoreError::NotFound(message) => ApiError::not_found("not_found", message),
            hone_store::StoreError::Unavailable(message) => ApiError::new(
                ErrorKind::Unavailable,
                "store_unavailable",
                format!("the database is unavailable: {message}"),
            ),
            e @ (hone_store::StoreError::Corrupt(_)
            | hone_store::StoreError::Refused(_)
            | hone_store::StoreError::Open { .. }) => {
                tracing::error!(error = %e, "store error");
                ApiError::new(ErrorKind::Internal, "store_error", e.to_string())
            }
        }
    }
}
