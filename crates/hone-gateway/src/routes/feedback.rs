//! `POST /v1/feedback`: a signal about a call or an episode. The target must
//! exist and the value must fit the metric's declared type and level, or the
//! request is refused and nothing is written.

use super::{json_response, parse_json, read_body};
use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use hone_types::time::now_ms;
use hone_types::{CallId, EpisodeId, FeedbackRequest, MetricLevel, Signal, SignalValue};
use std::sync::Arc;

/// Longest free-text comment kept with a signal.
const MAX_COMMENT: usize = 16 * 1024;
/// Largest `value` (as JSON) kept with a signal.
const MAX_VALUE: usize = 256 * 1024;

pub async fn post_feedback(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(&headers)?;
    let bytes = read_body(body, &headers, state.config.gateway.max_body_bytes).await?;
    let request: FeedbackRequest = parse_json(&bytes)?;

    let name = request.name.trim().to_owned();
    if name.is_empty() || name.len() > 128 {
        return Err(
            ApiError::invalid("invalid_name", "`name` must be 1 to 128 characters").with_param(Some("name".into()))
        );
    }
    if request.comment.as_ref().is_some_and(|c| c.len() > MAX_COMMENT) {
        return Err(ApiError::invalid(
            "comment_too_long",
            format!("`comment` is longer than {MAX_COMMENT} bytes"),
        )
        .with_param(Some("comment".into())));
    }
    if serde_json::to_vec(&request.value).map_or(true, |v| v.len() > MAX_VALUE) {
        return Err(ApiError::invalid(
            "value_too_large",
            format!("`value` is larger than {MAX_VALUE} bytes; keep large artefacts elsewhere and send a reference"),
        )
        .with_param(Some("value".into())));
    }
    let metric = state.config.metrics.get(&name);
    let value = SignalValue::from_json(&request.value, metric.map(|m| m.kind)).map_err(|m| {
        ApiError::invalid("invalid_value", format!("metric `{name}`: {m}")).with_param(Some("value".into()))
    })?;

    let call_id = request
        .call_id
        .as_deref()
        .map(|raw| {
            CallId::parse(raw).ok_or_else(|| {
                ApiError::invalid(
                    "invalid_call_id",
                    format!("`call_id` `{raw}` is not a call id (a UUID)"),
                )
                .with_param(Some("call_id".into()))
            })
        })
        .transpose()?;
    let episode_id = request
        .episode_id
        .as_deref()
        .map(super::episodes::parse_episode_id)
        .transpose()?;
    let agents = super::episodes::agents_in_scope(&state, &principal, request.agent.as_deref());
    if let Some(metric) = metric {
        match metric.level {
            MetricLevel::Call if call_id.is_none() => {
                return Err(ApiError::invalid(
                    "call_id_required",
                    format!("metric `{name}` is about calls: give `call_id`"),
                )
                .with_param(Some("call_id".into())))
            }
            MetricLevel::Episode if call_id.is_some() => {
                return Err(ApiError::invalid(
                    "episode_id_required",
                    format!("metric `{name}` is about episodes: give `episode_id`, not `call_id`"),
                )
                .with_param(Some("call_id".into())))
            }
            _ => {}
        }
    }

    state.caught_up(true).await?;
    let target = Target {
        call_id,
        episode_id,
        agents,
        name,
        value,
        source: request.source.unwrap_or_default(),
        comment: request.comment,
    };
    // On a store other replicas write too, the call may have been served by
    // one whose recorder commits a moment later: look again for a while
    // before saying it does not exist.
    let patience = if state.config.store.shared() {
        REPLICA_LAG
    } else {
        std::time::Duration::ZERO
    };
    let started = std::time::Instant::now();
    let signal = loop {
        let (store, target, principal) = (state.store.clone(), target.clone(), principal.clone());
        let attempt = tokio::task::spawn_blocking(move || store_signal(store.as_ref(), &principal, target))
            .await
            .map_err(|e| ApiError::new(crate::error::ErrorKind::Internal, "feedback_task_failed", e.to_string()))?;
        match attempt {
            Err(e) if e.kind == crate::error::ErrorKind::NotFound && started.elapsed() < patience => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => break other?,
        }
    };
    Ok(json_response(&serde_json::json!({
        "id": signal.id,
        "episode_id": signal.episode_id,
        "call_id": signal.call_id,
    })))
}

/// How long feedback waits for a call another replica served to reach a
/// shared store.
const REPLICA_LAG: std::time::Duration = std::time::Duration::from_secs(3);

/// What a feedback request is about, validated.
#[derive(Clone)]
struct Target {
    call_id: Option<CallId>,
    episode_id: Option<EpisodeId>,
    /// The agents whose episodes `episode_id` may name.
    agents: Vec<String>,
    name: String,
    value: SignalValue,
    source: hone_types::SignalSource,
    comment: Option<String>,
}

/// Resolves the target (a call names its episode; an episode must exist and
/// be the principal's) and stores the signal.
fn store_signal(
    store: &dyn hone_store::Store,
    principal: &crate::auth::Principal,
    target: Target,
) -> Result<Signal, ApiError> {
    let Target {
        call_id,
        episode_id,
        agents,
        name,
        value,
        source,
        comment,
    } = target;
    // Resolve the target: a call names its episode; an episode must exist.
    let episode_id = match (call_id, episode_id) {
        (Some(call_id), claimed) => {
            // Another agent's call answers exactly like one that does not exist.
            let call = store
                .call(call_id)?
                .filter(|call| principal.may_use_agent(&call.agent))
                .ok_or_else(|| ApiError::not_found("call_not_found", format!("no call with id `{call_id}`")))?;
            // The client may name the episode as it chose it (`id`) or as
            // stored (`id@agent`).
            if claimed
                .as_ref()
                .is_some_and(|e| *e != call.episode_id && e.as_str() != call.episode_id.client_part())
            {
                return Err(ApiError::invalid(
                    "episode_mismatch",
                    format!("call `{call_id}` belongs to episode `{}`", call.episode_id),
                ));
            }
            call.episode_id
        }
        (None, Some(episode_id)) => super::episodes::resolve(store, &agents, &episode_id)?,
        (None, None) => return Err(ApiError::invalid("target_required", "give `episode_id` or `call_id`")),
    };
    let signal = Signal {
        id: uuid::Uuid::now_v7(),
        episode_id,
        call_id,
        name,
        value,
        source,
        comment,
        created_at: now_ms(),
    };
    store.insert_signal(&signal)?;
    Ok(signal)
}
