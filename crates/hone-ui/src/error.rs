//! A page that cannot be shown: a status and a sentence, rendered as an
//! HTML page in the dashboard's frame.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

#[derive(Debug)]
pub struct UiError {
    pub status: StatusCode,
    pub message: String,
}

impl UiError {
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }
}

impl From<hone_store::StoreError> for UiError {
    fn from(e: hone_store::StoreError) -> Self {
        match e {
            hone_store::StoreError::Unavailable(m) => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: format!("the database is unavailable: {m}"),
            },
            other => Self::internal(other.to_string()),
        }
    }
}

impl From<hone_learn::LearnError> for UiError {
    fn from(e: hone_learn::LearnError) -> Self {
        Self::internal(e.to_string())
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let body = crate::render::bare(
            "error.html",
            minijinja::context! { title => "Error", status => self.status.as_u16(), message => self.message.clone() },
        )
        .unwrap_or_else(|e| format!("<p>{}</p><p>{}</p>", self.message, e.message));
        (self.status, Html(body)).into_response()
    }
}
