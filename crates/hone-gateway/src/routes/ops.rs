//! `/health` and `/metrics` (Prometheus text format). Both are open: they
//! carry no episode data.

use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hone_store::JournalState;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How long the store may stay unwritable before `/health` says `degraded`.
pub const STORE_BEHIND_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// `ok` (200) while calls are recorded and reach the store. `degraded` with
/// its reasons otherwise: 503 while the journal cannot be written, when
/// every call is refused; 200 while calls still wait safely in the journal
/// but the store has taken none for longer than [`STORE_BEHIND_BOUND`]
/// (feedback and reads of new episodes wait meanwhile), or once the store
/// has refused a call (kept aside; see `hone_recorder_refused_calls_total`).
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.recorder.stats();
    let unavailable = stats.store_unavailable.load(Ordering::Relaxed) == 1;
    let now = state.recorder.journal_state();
    let writable = now.is_writable();
    let behind = state.recorder.store_behind_for();
    let refused = stats.rows_refused.load(Ordering::Relaxed);
    let mut reasons = Vec::new();
    if !writable {
        reasons.push(format!("calls are refused: {now}"));
    }
    if let Some(behind) = behind.filter(|b| *b >= STORE_BEHIND_BOUND) {
        reasons.push(format!(
            "the store has taken no call for {} s; calls wait in the journal",
            behind.as_secs()
        ));
    }
    if refused > 0 {
        reasons.push(format!(
            "the database refused {refused} call(s); they are kept under the journal's refused/ directory"
        ));
    }
    let journal = match now {
        JournalState::Writable => serde_json::json!({"state": "writable"}),
        JournalState::Failing { error } => serde_json::json!({"state": "failing", "error": error}),
        JournalState::Stalled { for_ms } => serde_json::json!({"state": "stalled", "append_ms": for_ms}),
    };
    let mut response = super::json_response(&serde_json::json!({
        "status": if reasons.is_empty() { "ok" } else { "degraded" },
        "reasons": reasons,
        "journal": journal,
        "recorder": {
            "mode": if unavailable { "spooling" } else { "store" },
            "caught_up": state.recorder.is_caught_up(),
            "queue_depth": stats.queue_depth(),
            "spool_bytes": stats.spool_bytes(),
            "store_behind_ms": behind.map(|b| b.as_millis() as u64),
            "refused_calls": refused,
        },
    }));
    if !writable {
        *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
    }
    response
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut text = state.metrics.render(state.recorder.stats());
    text.push_str(&engine_metrics(&state));
    let learn_state = state.clone();
    match tokio::task::spawn_blocking(move || learning_metrics(&learn_state)).await {
        Ok(Ok(more)) => text.push_str(&more),
        Ok(Err(e)) => tracing::warn!(error = %e, "learning metrics unavailable"),
        Err(e) => tracing::warn!(error = %e, "learning metrics task failed"),
    }
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// The embedded engines' prompt tokens, and how many of them the prefix
/// cache supplied, per local provider and checkpoint.
fn engine_metrics(state: &AppState) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "# HELP hone_engine_prompt_tokens_total Prompt tokens the embedded engine was asked to prefill.\n# TYPE hone_engine_prompt_tokens_total counter\n# HELP hone_engine_prefix_cache_tokens_total Prompt tokens whose keys and values the engine's prefix cache supplied.\n# TYPE hone_engine_prefix_cache_tokens_total counter\n",
    );
    for local in state.local_providers() {
        for (model, engine) in local.engines() {
            let stats = engine.prefix_stats();
            let labels = format!("provider=\"{}\",model=\"{}\"", label(local.name()), label(&model));
            let _ = writeln!(
                out,
                "hone_engine_prompt_tokens_total{{{labels}}} {}",
                stats.prompt_tokens
            );
            let _ = writeln!(
                out,
                "hone_engine_prefix_cache_tokens_total{{{labels}}} {}",
                stats.reused_tokens
            );
        }
    }
    out
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// What the learner stored, read at scrape time (the learner may be another
/// process): each agent's latest cycle step, and alerts per version and metric.
fn learning_metrics(state: &AppState) -> Result<String, hone_store::StoreError> {
    use std::fmt::Write;
    let mut out = String::from(
        "# HELP hone_learn_cycle_step The step of each agent's latest learning cycle (1 for the current step).\n# TYPE hone_learn_cycle_step gauge\n",
    );
    let mut agents: Vec<&String> = state.agents.keys().collect();
    agents.sort();
    for agent in &agents {
        if let Some(cycle) = state.cycles.cycles(Some(agent), 1)?.first() {
            let _ = writeln!(
                out,
                "hone_learn_cycle_step{{agent=\"{agent}\",cycle=\"{}\",step=\"{}\"}} 1",
                cycle.id,
                cycle.state.as_str()
            );
        }
    }
    out.push_str("# HELP hone_alerts_total Alerts raised by the online monitors.\n# TYPE hone_alerts_total counter\n");
    let mut counts: std::collections::BTreeMap<(String, String, String), u64> = Default::default();
    for alert in state.cycles.alerts(None, 10_000)? {
        *counts
            .entry((alert.agent, alert.version_id.to_string(), alert.firing.metric))
            .or_default() += 1;
    }
    for ((agent, version, metric), n) in counts {
        let _ = writeln!(
            out,
            "hone_alerts_total{{agent=\"{agent}\",version=\"{version}\",metric=\"{metric}\"}} {n}"
        );
    }
    Ok(out)
}
