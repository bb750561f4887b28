//! `POST /v1/traces`: an OTLP/HTTP trace receiver (protobuf or JSON). The
//! model-call spans of an agent already instrumented with OpenTelemetry
//! become calls of episodes (see [`crate::traces`]), recorded through the
//! same journal-first recorder as proxied calls before the export is
//! acknowledged. Other spans are accepted and ignored.
//!
//! The agent is the `X-Hone-Agent` header, else the span's or resource's
//! `hone.agent`, else the resource's `service.name`. Spans hone cannot take
//! (an unknown agent, one the key may not use, an episode of another agent,
//! a model call without messages) are refused as OTLP partial success,
//! each reason named; a payload that cannot be decoded is a 400 whose body
//! is a `google.rpc.Status` in the request's encoding.

use super::read_body;
use crate::error::{ApiError, ErrorKind};
use crate::state::AppState;
use crate::traces::{observe, ObservedCall};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hone_types::call::Door;
use hone_types::openai::ChatCompletionRequest;
use hone_types::{behaviour, CallError, CallOutcome, CallRecord, Route, VersionId, VersionRecord, VersionSpec};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    Protobuf,
    Json,
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// gRPC status codes used in OTLP error bodies.
const INVALID_ARGUMENT: i32 = 3;
const PERMISSION_DENIED: i32 = 7;
const UNAVAILABLE: i32 = 14;
const UNAUTHENTICATED: i32 = 16;

fn reply(encoding: Encoding, status: StatusCode, protobuf: Vec<u8>, json: Vec<u8>) -> Response {
    let (content_type, body) = match encoding {
        Encoding::Protobuf => ("application/x-protobuf", protobuf),
        Encoding::Json => ("application/json", json),
    };
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn failure(encoding: Encoding, error: &ApiError) -> Response {
    let code = match error.kind {
        ErrorKind::Unauthorized => UNAUTHENTICATED,
        ErrorKind::Forbidden => PERMISSION_DENIED,
        ErrorKind::Unavailable => UNAVAILABLE,
        _ => INVALID_ARGUMENT,
    };
    let status = Status {
        code,
        message: error.message.clone(),
    };
    reply(
        encoding,
        error.status(),
        status.encode_to_vec(),
        serde_json::to_vec(&status).unwrap_or_default(),
    )
}

fn encoding_of(headers: &HeaderMap) -> Result<Encoding, (Encoding, ApiError)> {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let encoding = if content_type.starts_with("application/x-protobuf") {
        Encoding::Protobuf
    } else if content_type.starts_with("application/json") {
        Encoding::Json
    } else {
        let mut e = ApiError::invalid(
            "unsupported_media_type",
            format!("OTLP/HTTP takes `application/x-protobuf` or `application/json`, not `{content_type}`"),
        );
        e.status = Some(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        return Err((Encoding::Json, e));
    };
    if let Some(coding) = headers
        .get(axum::http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .filter(|c| !c.eq_ignore_ascii_case("identity"))
    {
        let mut e = ApiError::invalid(
            "unsupported_encoding",
            format!(
                "hone takes uncompressed OTLP (`{coding}` is not supported: set OTEL_EXPORTER_OTLP_COMPRESSION=none)"
            ),
        );
        e.status = Some(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        return Err((encoding, e));
    }
    Ok(encoding)
}

fn decode(encoding: Encoding, bytes: &[u8]) -> Result<ExportTraceServiceRequest, ApiError> {
    match encoding {
        Encoding::Protobuf => ExportTraceServiceRequest::decode(bytes)
            .map_err(|e| ApiError::invalid("invalid_otlp", format!("not an OTLP protobuf trace export: {e}"))),
        Encoding::Json => serde_json::from_slice(bytes)
            .map_err(|e| ApiError::invalid("invalid_otlp", format!("not an OTLP JSON trace export: {e}"))),
    }
}

pub async fn ingest(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let encoding = match encoding_of(&headers) {
        Ok(encoding) => encoding,
        Err((encoding, error)) => return failure(encoding, &error),
    };
    match accept(&state, &headers, body, encoding).await {
        Ok(response) => response,
        Err(error) => failure(encoding, &error),
    }
}

async fn accept(state: &AppState, headers: &HeaderMap, body: Body, encoding: Encoding) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(headers)?;
    let bytes = read_body(body, headers, state.config.gateway.max_body_bytes).await?;
    let export = decode(encoding, &bytes)?;
    let (calls, unreadable) = observe(&export);
    let named = headers
        .get("x-hone-agent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut refused: Vec<String> = unreadable
        .into_iter()
        .map(|u| format!("span {}: {}", u.span_id, u.reason))
        .collect();
    for call in calls {
        let Some(agent) = named.clone().or_else(|| call.agent.clone()) else {
            refused.push(format!(
                "span {}: no agent (set X-Hone-Agent, hone.agent or service.name)",
                call.span_id
            ));
            continue;
        };
        // An agent outside the key's scope reads as one not configured.
        if !state.config.agents.contains_key(&agent) || !principal.may_use_agent(&agent) {
            refused.push(format!(
                "span {}: `{agent}` is not an agent of this gateway for this key (set X-Hone-Agent or the resource attribute hone.agent)",
                call.span_id
            ));
            continue;
        }
        let version = observed_version(state, &agent, &call).await;
        let record = record(state, agent, version, call);
        state.recorder.record(record).await.map_err(|e| {
            ApiError::new(
                ErrorKind::Unavailable,
                "recorder_unavailable",
                format!("the trace could not be recorded (send it again): {e}"),
            )
        })?;
    }
    let partial_success = (!refused.is_empty()).then(|| ExportTracePartialSuccess {
        rejected_spans: refused.len() as i64,
        error_message: refused.join("; "),
    });
    let response = ExportTraceServiceResponse { partial_success };
    Ok(reply(
        encoding,
        StatusCode::OK,
        response.encode_to_vec(),
        serde_json::to_vec(&response).unwrap_or_default(),
    ))
}

/// The version a traced call ran as: the agent's own harness calling the
/// span's provider and model, outside hone. Content-addressed like every
/// version, stored once (`created_by = "otel"`), never deployed.
async fn observed_version(state: &AppState, agent: &str, call: &ObservedCall) -> VersionId {
    let spec = VersionSpec {
        agent: agent.to_owned(),
        routes: vec![Route {
            provider: call.provider.clone().unwrap_or_else(|| "unknown".into()),
            model: call.model.clone().unwrap_or_else(|| "unknown".into()),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        }],
        ..Default::default()
    };
    let id = spec.id();
    let known = |state: &AppState| {
        state
            .observed_versions
            .lock()
            .map(|set| set.contains(&id))
            .unwrap_or(false)
    };
    if !known(state) {
        let record = VersionRecord {
            id: id.clone(),
            agent: agent.to_owned(),
            label: None,
            spec,
            parent: None,
            created_by: "otel".to_owned(),
            created_at: hone_types::time::now_ms(),
        };
        let store = state.store.clone();
        match tokio::task::spawn_blocking(move || store.upsert_versions(&[record])).await {
            Ok(Ok(())) => {
                if let Ok(mut set) = state.observed_versions.lock() {
                    set.insert(id.clone());
                }
            }
            // The call is recorded anyway; the version is stored with a later one.
            outcome => tracing::warn!(version = %id, ?outcome, "the traced call's version was not stored yet"),
        }
    }
    id
}

fn record(state: &AppState, agent: String, version: VersionId, call: ObservedCall) -> CallRecord {
    let mut request: ChatCompletionRequest = call.request;
    request.model.clone_from(&agent);
    let flags = call
        .response
        .as_ref()
        .map(|r| behaviour::flags(&request, r))
        .unwrap_or_default();
    let cost_usd = call
        .provider
        .as_ref()
        .zip(call.model.as_ref())
        .zip(call.usage.as_ref())
        .and_then(|((provider, model), usage)| {
            let price = state.providers.get(provider)?.config.price(model)?;
            Some(price.cost_usd(usage))
        });
    let outcome = match (&call.error, &call.response) {
        (Some(_), _) | (None, None) => CallOutcome::UpstreamError,
        (None, Some(_)) => CallOutcome::Ok,
    };
    CallRecord {
        id: call.id,
        episode_id: call.episode,
        agent,
        version_id: version,
        started_at: call.started_at,
        outcome,
        stream: false,
        request,
        response: call.response,
        error: match (&call.error, outcome) {
            (Some(message), _) => Some(CallError {
                status: 502,
                message: message.clone(),
            }),
            (None, CallOutcome::UpstreamError) => Some(CallError {
                status: 502,
                message: "the span recorded no answer".into(),
            }),
            _ => None,
        },
        provider: call.provider,
        model: call.model,
        attempts: Vec::new(),
        usage: call.usage,
        cost_usd,
        latency_ms: call.duration_ms,
        ttft_ms: None,
        upstream_ms: call.duration_ms,
        flags,
        shadow: Vec::new(),
        door: Door::Traces {
            trace_id: call.trace_id,
            span_id: call.span_id,
        },
    }
}
