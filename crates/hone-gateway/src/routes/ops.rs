//! `/health` and `/metrics` (Prometheus text format). Both are open: they
//! carry no episode data.

use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.recorder.stats();
    let unavailable = stats.store_unavailable.load(Ordering::Relaxed) == 1;
    super::json_response(&serde_json::json!({
        "status": "ok",
        "recorder": {
            "mode": if unavailable { "spooling" } else { "store" },
            "caught_up": state.recorder.is_caught_up(),
            "queue_depth": stats.queue_depth(),
            "spool_bytes": stats.spool_bytes(),
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
