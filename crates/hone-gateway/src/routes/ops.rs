//! `/health` and `/metrics` (Prometheus text format). Both are open: they
//! carry no episode data.

use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.recorder.stats();
    let spool_bytes = stats.spool_bytes.load(Ordering::Relaxed);
    super::json_response(&serde_json::json!({
        "status": "ok",
        "recorder": {
            "mode": if spool_bytes > 0 { "spooling" } else { "store" },
            "queue_depth": stats.queue_depth.load(Ordering::Relaxed),
            "spool_bytes": spool_bytes,
        },
    }))
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(state.recorder.stats()),
    )
        .into_response()
}
