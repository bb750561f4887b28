//! The call pipeline behind every door (`POST /v1/chat/completions`,
//! `/v1/responses`, `/v1/messages`): choose the version, call its
//! providers, record the call, and only then hand the answer to the client,
//! written by the door it came in by ([`crate::doors`]).
//!
//! A call goes through four parts: [`accept`] (everything that can refuse
//! it before an upstream is paid), [`recall`] (few-shot examples from
//! episodic memory), then [`complete`] or [`stream`]; both end in
//! [`finish_call`] (flags, cost, the durable record, timings).
//!
//! The upstream work runs in a tracked task, not in the handler, so a client
//! that goes away still gets its call recorded (as `client_disconnected`) and
//! shutdown waits for it. Streams end with `[DONE]` only once the call is
//! durable.

use super::{header_value, read_body, CALL_HEADER, EPISODE_HEADER, VERSION_HEADER};
use crate::dispatch::{self, Answered};
use crate::doors::{self, Door, Incoming};
use crate::error::{ApiError, ErrorKind};
use crate::providers::{ProviderError, StreamEvent, MAX_ANSWER_BYTES};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use hone_types::behaviour;
use hone_types::call::Door as DoorRecord;
use hone_types::openai::{ChatCompletionRequest, ChatCompletionResponse, Choice, Message};
use hone_types::stream::StreamAccumulator;
use hone_types::time::now_ms;
use hone_types::{Attempt, CallError, CallId, CallOutcome, CallRecord, EpisodeId, Route, VersionId, VersionSpec};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

/// Everything known about a call before the upstream answers.
struct CallContext {
    id: CallId,
    episode: EpisodeId,
    agent: String,
    version_id: VersionId,
    version: Arc<VersionSpec>,
    request: ChatCompletionRequest,
    door: DoorRecord,
    /// Few-shot examples from episodic memory (the version's `examples` policy).
    examples: Vec<Message>,
    started_at: i64,
    received: Instant,
    /// The call's span (exported over OTLP when configured).
    span: tracing::Span,
}

/// What the upstream part of a call produced.
struct Outcome {
    outcome: CallOutcome,
    response: Option<ChatCompletionResponse>,
    /// Shadow samples the client never saw.
    shadow: Vec<Choice>,
    error: Option<CallError>,
    route: Option<Route>,
    attempts: Vec<Attempt>,
    upstream_ms: f64,
    ttft_ms: Option<f64>,
}

impl CallContext {
    fn record(&self, state: &AppState, outcome: Outcome) -> CallRecord {
        // Tool calls are checked against the tools the model was offered:
        // the version's own when it owns its tool set.
        let offered = (!self.version.tools.is_empty()).then(|| ChatCompletionRequest {
            tools: Some(self.version.tools.clone()),
            ..self.request.clone()
        });
        let flags = outcome
            .response
            .as_ref()
            .map(|r| behaviour::flags(offered.as_ref().unwrap_or(&self.request), r))
            .unwrap_or_default();
        let usage = outcome.response.as_ref().and_then(|r| r.usage.clone());
        let cost_usd = outcome.route.as_ref().zip(usage.as_ref()).and_then(|(route, usage)| {
            let price = state.providers.get(&route.provider)?.config.price(&route.model)?;
            Some(price.cost_usd(usage))
        });
        CallRecord {
            id: self.id,
            episode_id: self.episode.clone(),
            agent: self.agent.clone(),
            version_id: self.version_id.clone(),
            started_at: self.started_at,
            outcome: outcome.outcome,
            stream: self.request.is_stream(),
            request: self.request.clone(),
            response: outcome.response,
            error: outcome.error,
            provider: outcome.route.as_ref().map(|r| r.provider.clone()),
            model: outcome.route.map(|r| r.model),
            attempts: outcome.attempts,
            usage,
            cost_usd,
            latency_ms: self.received.elapsed().as_secs_f64() * 1000.0,
            ttft_ms: outcome.ttft_ms,
            upstream_ms: outcome.upstream_ms,
            flags,
            shadow: outcome.shadow,
            door: self.door.clone(),
        }
    }

    fn headers(&self) -> [(axum::http::HeaderName, HeaderValue); 3] {
        [
            (EPISODE_HEADER, header_value(self.episode.as_str())),
            (CALL_HEADER, header_value(&self.id.to_string())),
            (VERSION_HEADER, header_value(self.version_id.as_str())),
        ]
    }
}

pub async fn chat_completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    serve(state, &headers, body, Arc::new(doors::ChatDoor)).await
}

pub async fn responses(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    serve(state, &headers, body, Arc::new(doors::ResponsesDoor)).await
}

pub async fn messages(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    serve(state, &headers, body, Arc::new(doors::MessagesDoor)).await
}

/// One call through `door`, from request to recorded answer.
async fn serve(state: Arc<AppState>, headers: &HeaderMap, body: Body, door: Arc<dyn Door>) -> Response {
    let received = Instant::now();
    let mut result = accept(&state, headers, body, door.as_ref(), received).await;
    if let Ok(context) = &mut result {
        let span = context.span.clone();
        context.examples = recall(&state, context).instrument(span).await;
    }
    match result {
        Ok(context) if context.request.is_stream() => stream(state, context, door).await,
        Ok(context) => complete(state, context, door).await,
        Err(error) => error.respond_with(door.error(error.clone())),
    }
}

/// Everything that can refuse a request before any upstream is called.
async fn accept(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    door: &dyn Door,
    received: Instant,
) -> Result<CallContext, ApiError> {
    let started_at = now_ms();
    let principal = state.auth.data_plane(headers)?;
    let bytes = read_body(body, headers, state.config.gateway.max_body_bytes).await?;
    let Incoming {
        request,
        episode: continued,
        door: door_record,
    } = door.parse(state, &bytes).await?;
    let agent = agent_for(state, &principal, &request.model)?;
    let span = call_span(door.name(), &agent.name);
    let episode = match headers.get(&EPISODE_HEADER) {
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| ApiError::invalid("invalid_episode_id", "X-Hone-Episode must be visible ASCII"))?;
            EpisodeId::parse(text)
                .map_err(|e| ApiError::invalid("invalid_episode_id", format!("X-Hone-Episode `{text}` {e}")))?
        }
        None => continued.unwrap_or_else(EpisodeId::new_v7),
    };
    let (version_id, version) = version_for(state, agent, headers, &episode)?;
    recordable(state)?;
    let id = CallId::new_v7();
    span.record("hone.episode_id", episode.as_str());
    span.record("hone.call_id", id.to_string());
    span.record("hone.version_id", version_id.as_str());
    Ok(CallContext {
        id,
        episode,
        agent: agent.name.clone(),
        version_id,
        version,
        request,
        door: door_record,
        examples: Vec::new(),
        started_at,
        received,
        span,
    })
}

/// The agent a request's `model` names. An agent outside the key's scope
/// reads exactly as one that is not configured, and the agents listed are
/// only those the key may use.
pub(crate) fn agent_for<'a>(
    state: &'a AppState,
    principal: &crate::auth::Principal,
    model: &str,
) -> Result<&'a crate::routing::AgentRoutes, ApiError> {
    state
        .agents
        .get(model)
        .filter(|a| principal.may_use_agent(&a.name))
        .ok_or_else(|| {
            let mut names: Vec<_> = state
                .agents
                .keys()
                .filter(|n| principal.may_use_agent(n))
                .map(|n| format!("`{n}`"))
                .collect();
            names.sort();
            ApiError::not_found(
                "model_not_found",
                format!(
                    "agent `{model}` is not configured for this key; `model` names an agent (yours: {})",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            )
            .with_param(Some("model".into()))
        })
}

/// The version that serves a call of `agent` in `episode`: the one
/// `X-Hone-Version` pins (a label from the config, or the id of a version
/// created after start, such as a candidate under evaluation), else the one
/// the deployment's split gives the episode.
pub(crate) fn version_for(
    state: &AppState,
    agent: &crate::routing::AgentRoutes,
    headers: &HeaderMap,
    episode: &EpisodeId,
) -> Result<(VersionId, Arc<VersionSpec>), ApiError> {
    match headers.get(&VERSION_HEADER) {
        Some(value) => {
            let text = value.to_str().unwrap_or_default();
            let not_found = || {
                ApiError::not_found(
                    "version_not_found",
                    format!("X-Hone-Version `{text}` is not a servable version of agent `{}` (give a label from the config or a version id)", agent.name),
                )
            };
            match agent.resolve(text) {
                Some(found) => Ok(found),
                None => {
                    let id = VersionId::parse(text).ok_or_else(not_found)?;
                    let spec = lookup(state, agent, &id)?.ok_or_else(not_found)?;
                    Ok((id, spec))
                }
            }
        }
        None => {
            let id = agent.choose(episode);
            let spec = lookup(state, agent, &id)?.ok_or_else(|| {
                ApiError::new(
                    ErrorKind::Internal,
                    "version_missing",
                    format!("deployed version {id} has no spec"),
                )
            })?;
            Ok((id, spec))
        }
    }
}

/// Refuses a call the journal could not record now, before an upstream is
/// paid for an answer that would be withheld.
fn recordable(state: &AppState) -> Result<(), ApiError> {
    let journal = state.recorder.journal_state();
    if journal.is_writable() {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorKind::Unavailable,
        "recorder_unavailable",
        format!("calls cannot be recorded right now, so none is sent upstream: {journal}"),
    ))
}

/// The client-facing error for a failed upstream.
pub(crate) fn upstream_error(error: &ProviderError) -> ApiError {
    match error {
        ProviderError::Status {
            status: 429,
            message,
            retry_after,
        } => ApiError {
            // The upstream's own wait, or a second: SDKs back off by it.
            retry_after: Some(retry_after.unwrap_or(std::time::Duration::from_secs(1))),
            ..ApiError::new(
                ErrorKind::RateLimited,
                "upstream_rate_limited",
                format!("the upstream is rate limiting: {message}"),
            )
        },
        ProviderError::Status {
            status: status @ (400 | 413 | 422),
            message,
            ..
        } => {
            let mut e = ApiError::invalid(
                "upstream_rejected_request",
                format!("the upstream rejected the request: {message}"),
            );
            e.status = StatusCode::from_u16(*status).ok();
            e
        }
        ProviderError::Status { status, message, .. } => ApiError::new(
            ErrorKind::Upstream,
            "upstream_error",
            format!("every provider of the version failed; the last answered HTTP {status}: {message}"),
        ),
        ProviderError::Timeout(after) => ApiError::new(
            ErrorKind::UpstreamTimeout,
            "upstream_timeout",
            format!("the upstream did not answer within {:.1}s", after.as_secs_f64()),
        ),
        ProviderError::Connect(message) => ApiError::new(
            ErrorKind::Upstream,
            "upstream_unreachable",
            format!("cannot reach the upstream: {message}"),
        ),
        ProviderError::Protocol(message) => {
            ApiError::new(ErrorKind::Upstream, "upstream_protocol_error", message.clone())
        }
        ProviderError::TooLarge { .. } => {
            ApiError::new(ErrorKind::Upstream, "upstream_response_too_large", error.to_string())
        }
    }
}

fn failed(state: &AppState, error: &ProviderError, attempts: Vec<Attempt>, upstream_ms: f64) -> (Outcome, ApiError) {
    state
        .metrics
        .upstream_errors
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let api = upstream_error(error);
    let outcome = Outcome {
        outcome: CallOutcome::UpstreamError,
        response: None,
        shadow: Vec::new(),
        error: Some(CallError {
            status: api.status().as_u16(),
            message: error.to_string(),
        }),
        route: None,
        attempts,
        upstream_ms,
        ttft_ms: None,
    };
    (outcome, api)
}

fn recorder_error(e: hone_store::RecorderError) -> ApiError {
    if let hone_store::RecorderError::TooLarge { .. } = e {
        return ApiError::new(
            ErrorKind::PayloadTooLarge,
            "call_too_large_to_record",
            format!("the call could not be recorded, so its answer is withheld: {e}"),
        );
    }
    ApiError::new(
        ErrorKind::Unavailable,
        "recorder_unavailable",
        format!("the call could not be recorded, so its answer is withheld: {e}"),
    )
}

/// The tail of every call, streamed or not: a departed client counted, the
/// record built (behaviour flags, cost) and made durable, timings observed.
/// Only after this may the client see the end of its answer.
/// `answer` writes what the client gets from the finished record (its
/// door's format) before the record goes to the recorder.
async fn finish_call<T>(
    state: &AppState,
    context: &CallContext,
    outcome: Outcome,
    answer: impl FnOnce(&CallRecord) -> T,
) -> Result<T, ApiError> {
    if outcome.outcome == CallOutcome::ClientDisconnected {
        state
            .metrics
            .client_disconnects
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let (upstream_ms, retries) = (outcome.upstream_ms, outcome.attempts.len());
    let record = context.record(state, outcome);
    observe_in_span(state, &context.span, &record);
    let answer = answer(&record);
    let durable = state.recorder.record(record).await;
    observe(state, context, upstream_ms, retries);
    durable.map(|_| answer).map_err(recorder_error)
}

/// A call's span, named and described by the GenAI conventions
/// (`chat <agent>`); what is known later is recorded into it.
fn call_span(door: &'static str, agent: &str) -> tracing::Span {
    tracing::info_span!(
        "chat",
        "otel.name" = format!("chat {agent}"),
        "otel.kind" = "server",
        "gen_ai.operation.name" = "chat",
        "gen_ai.request.model" = agent,
        "gen_ai.provider.name" = tracing::field::Empty,
        "hone.provider" = tracing::field::Empty,
        "gen_ai.response.model" = tracing::field::Empty,
        "gen_ai.usage.input_tokens" = tracing::field::Empty,
        "gen_ai.usage.output_tokens" = tracing::field::Empty,
        "hone.door" = door,
        "hone.episode_id" = tracing::field::Empty,
        "hone.call_id" = tracing::field::Empty,
        "hone.version_id" = tracing::field::Empty,
        "hone.outcome" = tracing::field::Empty,
        "hone.cost_usd" = tracing::field::Empty,
    )
}

/// What the call's span reports once it is recorded.
fn observe_in_span(state: &AppState, span: &tracing::Span, record: &CallRecord) {
    if let Some(provider) = &record.provider {
        // The conventions' name of the kind of provider; hone's own name for
        // the configured one beside it.
        if let Some(config) = state.config.providers.get(provider) {
            span.record("gen_ai.provider.name", config.kind.semconv_name());
        }
        span.record("hone.provider", provider.as_str());
    }
    if let Some(model) = &record.model {
        span.record("gen_ai.response.model", model.as_str());
    }
    if let Some(usage) = &record.usage {
        // As signed integers: OTLP has no unsigned type (a u64 would go out as text).
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        span.record("gen_ai.usage.input_tokens", int(usage.prompt_tokens));
        span.record("gen_ai.usage.output_tokens", int(usage.completion_tokens));
    }
    if let Some(cost) = record.cost_usd {
        span.record("hone.cost_usd", cost);
    }
    span.record("hone.outcome", record.outcome.as_str());
}

fn observe(state: &AppState, context: &CallContext, upstream_ms: f64, retries: usize) {
    let total = context.received.elapsed().as_secs_f64();
    state.metrics.request_seconds.observe(total);
    state.metrics.upstream_seconds.observe(upstream_ms / 1000.0);
    state.metrics.overhead_seconds.observe(total - upstream_ms / 1000.0);
    state
        .metrics
        .upstream_retries
        .fetch_add(retries.saturating_sub(1) as u64, std::sync::atomic::Ordering::Relaxed);
}

async fn complete(state: Arc<AppState>, context: CallContext, door: Arc<dyn Door>) -> Response {
    let headers = context.headers();
    let (reply, answer) = oneshot::channel::<Result<Bytes, ApiError>>();
    let task_state = state.clone();
    let task_door = door.clone();
    let span = context.span.clone();
    state.tasks.spawn(
        async move {
            let (state, door) = (task_state, task_door);
            let mut attempts = Vec::new();
            let upstream_started = Instant::now();
            let shadow_n = shadow_samples(&state, &context);
            let upstream = with_shadow(&context.request, shadow_n);
            // Boxed: the upstream call's future is large, and inline it
            // made every spawn and poll of this task copy it.
            let result = Box::pin(dispatch::complete(
                &state.providers,
                &context.version,
                &upstream,
                &context.examples,
                &mut attempts,
            ))
            .await;
            let upstream_ms = upstream_started.elapsed().as_secs_f64() * 1000.0;
            let (mut outcome, client_reply) = match result {
                Ok(Answered { route, mut value }) => {
                    let shadow = if shadow_n.is_some() {
                        split_shadow(&mut value)
                    } else {
                        Vec::new()
                    };
                    let outcome = Outcome {
                        outcome: CallOutcome::Ok,
                        response: Some(value),
                        shadow,
                        error: None,
                        route: Some(route),
                        attempts,
                        upstream_ms,
                        ttft_ms: None,
                    };
                    (outcome, None)
                }
                Err(error) => {
                    let (outcome, api) = failed(&state, &error, attempts, upstream_ms);
                    (outcome, Some(api))
                }
            };
            if reply.is_closed() {
                outcome.outcome = CallOutcome::ClientDisconnected;
            }
            let durable = finish_call(&state, &context, outcome, |record| match client_reply {
                None => door.answer(record),
                Some(error) => Err(error),
            })
            .await;
            let _ = reply.send(durable.and_then(|body| body));
        }
        .instrument(span),
    );
    match answer.await {
        Ok(Ok(body)) => with_headers(
            ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response(),
            headers,
        ),
        Ok(Err(error)) => with_headers(error.respond_with(door.error(error.clone())), headers),
        Err(_) => door.error(task_ended_without_answer()),
    }
}

/// How many shadow samples to draw for this call, if any: the agent has
/// `[learn.shadow]`, the request (streamed or not) asks for one answer,
/// every route of the version runs on the embedded engine (a hosted
/// fallback must never be billed for answers nobody sees), and the call's
/// random draw falls within the share; never more than the engine's batch
/// holds beside the served answer.
fn shadow_samples(state: &AppState, context: &CallContext) -> Option<u32> {
    let spec = state.config.agents.get(&context.agent)?.learn.shadow.as_ref()?;
    if context.request.n.unwrap_or(1) != 1 {
        return None;
    }
    // The engine's largest batch, over every route (one request holds all
    // the answers); `None` when a route is not on the embedded engine.
    let batch = |r: &Route| {
        let p = state.providers.get(&r.provider)?;
        (p.config.kind == hone_config::ProviderKind::Local).then(|| p.config.local.as_ref().map_or(1, |l| l.max_batch))
    };
    let batch: Option<Vec<usize>> = context.version.routes.iter().map(batch).collect();
    let room = batch?.into_iter().min()?.saturating_sub(1);
    let n = spec.n.min(u32::try_from(room).unwrap_or(u32::MAX));
    if n == 0 {
        return None;
    }
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    context.id.hash(&mut hasher);
    let draw = hasher.finish() as f64 / u64::MAX as f64;
    (draw < spec.share).then_some(n)
}

/// The request sent upstream: the client's, asking for `1 + n` answers
/// when `n` shadow samples ride along.
fn with_shadow(request: &ChatCompletionRequest, shadow_n: Option<u32>) -> std::borrow::Cow<'_, ChatCompletionRequest> {
    match shadow_n {
        Some(n) => {
            let mut request = request.clone();
            request.n = Some(1 + n);
            std::borrow::Cow::Owned(request)
        }
        None => std::borrow::Cow::Borrowed(request),
    }
}

/// Takes every answer but the first out of `response` (the client's): the
/// shadow samples. The usage left is the served answer's own.
fn split_shadow(response: &mut ChatCompletionResponse) -> Vec<Choice> {
    let shadow: Vec<Choice> = response.choices.drain(1..).collect();
    if let (Some(usage), Some(tokens)) = (
        response.usage.as_mut(),
        response.choices.first().and_then(sampled_tokens),
    ) {
        usage.completion_tokens = tokens;
        usage.total_tokens = usage.prompt_tokens + tokens;
    }
    shadow
}

/// How many tokens the engine sampled for one answer (its recorded ids).
fn sampled_tokens(choice: &Choice) -> Option<u64> {
    let ids = choice.extra.get(hone_types::call::TOKEN_IDS)?.as_array()?;
    Some(ids.len() as u64)
}

/// Narrows a streamed chunk to the served answer (index 0) when shadow
/// samples ride along, with the usage of the served answer alone; `false`
/// when nothing is left for the client. `accumulator` holds every answer
/// streamed so far, this chunk included.
fn serve_first(event: &mut StreamEvent, accumulator: &StreamAccumulator) -> bool {
    let had_choices = !event.chunk.choices.is_empty();
    event.chunk.choices.retain(|c| c.index == 0);
    event.raw = None;
    if let Some(usage) = event.chunk.usage.as_mut() {
        if let Some(tokens) = accumulator.response().choices.first().and_then(sampled_tokens) {
            usage.completion_tokens = tokens;
            usage.total_tokens = usage.prompt_tokens + tokens;
        }
    }
    !(had_choices && event.chunk.choices.is_empty() && event.chunk.usage.is_none())
}

fn task_ended_without_answer() -> ApiError {
    ApiError::new(
        ErrorKind::Internal,
        "call_task_failed",
        "the call's task ended without an answer",
    )
}

fn with_headers(mut response: Response, headers: [(axum::http::HeaderName, HeaderValue); 3]) -> Response {
    response.headers_mut().extend(headers);
    response
}

async fn stream(state: Arc<AppState>, context: CallContext, door: Arc<dyn Door>) -> Response {
    let headers = context.headers();
    let (started, start) = oneshot::channel::<Result<(), ApiError>>();
    let (frames, body) = mpsc::channel::<Bytes>(64);
    let task_state = state.clone();
    let task_door = door.clone();
    let span = context.span.clone();
    state.tasks.spawn(
        async move {
            let (state, door) = (task_state, task_door);
            let mut attempts = Vec::new();
            let upstream_started = Instant::now();
            let shadow_n = shadow_samples(&state, &context);
            let result = Box::pin(dispatch::stream(
                &state.providers,
                &context.version,
                &with_shadow(&context.request, shadow_n),
                &context.examples,
                &mut attempts,
            ))
            .await;
            let Answered {
                route,
                value: mut upstream,
            } = match result {
                Ok(answered) => answered,
                Err(error) => {
                    let upstream_ms = upstream_started.elapsed().as_secs_f64() * 1000.0;
                    let (outcome, api) = failed(&state, &error, attempts, upstream_ms);
                    let durable = finish_call(&state, &context, outcome, |_| ()).await;
                    let _ = started.send(Err(durable.err().unwrap_or(api)));
                    return;
                }
            };
            if started.send(Ok(())).is_err() {
                // The client left while we connected; the stream still gets recorded below.
            }
            let mut encoder = door.encoder(context.id, &context.request, &context.door);
            let mut accumulator = StreamAccumulator::new();
            let mut ttft_ms = None;
            let mut outcome = CallOutcome::Ok;
            let mut error = None;
            loop {
                let item = tokio::select! {
                    item = upstream.next() => item,
                    () = frames.closed() => {
                        outcome = CallOutcome::ClientDisconnected;
                        break;
                    }
                };
                match item {
                    None => break,
                    Some(Ok(mut event)) => {
                        accumulator.push(&event.chunk);
                        if accumulator.bytes() > MAX_ANSWER_BYTES {
                            // Past the answer limit the stream is cut, so
                            // memory stays bounded by the limit and the
                            // record is whole: an error, without the part.
                            let e = ProviderError::TooLarge {
                                what: "streamed answer",
                                limit: MAX_ANSWER_BYTES,
                            };
                            let api = upstream_error(&e);
                            error = Some(CallError {
                                status: api.status().as_u16(),
                                message: e.to_string(),
                            });
                            outcome = CallOutcome::UpstreamError;
                            accumulator = StreamAccumulator::new();
                            let _ = frames.send(encoder.error(&api)).await;
                            break;
                        }
                        if shadow_n.is_some() && !serve_first(&mut event, &accumulator) {
                            continue;
                        }
                        let out = encoder.event(&event);
                        if out.is_empty() {
                            continue;
                        }
                        if ttft_ms.is_none() && event.chunk.choices.iter().any(|c| c.delta.says_something()) {
                            ttft_ms = Some(context.received.elapsed().as_secs_f64() * 1000.0);
                        }
                        if send_all(&frames, out).await.is_err() {
                            outcome = CallOutcome::ClientDisconnected;
                            break;
                        }
                    }
                    Some(Err(e)) => {
                        let api = upstream_error(&e);
                        error = Some(CallError {
                            status: api.status().as_u16(),
                            message: e.to_string(),
                        });
                        outcome = CallOutcome::UpstreamError;
                        let _ = frames.send(encoder.error(&api)).await;
                        break;
                    }
                }
            }
            drop(upstream);
            let upstream_ms = upstream_started.elapsed().as_secs_f64() * 1000.0;
            let mut response = (accumulator.chunks() > 0).then(|| accumulator.response());
            // Shadow samples of a stream cut short are incomplete: not kept.
            let shadow = match (response.as_mut(), shadow_n) {
                (Some(response), Some(_)) => split_shadow(response),
                _ => Vec::new(),
            };
            let shadow = if outcome == CallOutcome::Ok { shadow } else { Vec::new() };
            let finished = Outcome {
                outcome,
                response,
                shadow,
                error,
                route: Some(route),
                attempts,
                upstream_ms,
                ttft_ms,
            };
            let durable = finish_call(&state, &context, finished, |record| {
                (outcome == CallOutcome::Ok).then(|| encoder.done(record))
            })
            .await;
            match durable {
                Ok(Some(last)) => {
                    let _ = send_all(&frames, last).await;
                }
                Ok(None) => {}
                Err(e) if outcome == CallOutcome::Ok => {
                    let _ = frames.send(encoder.error(&e)).await;
                }
                Err(_) => {}
            }
        }
        .instrument(span),
    );
    match start.await {
        Ok(Ok(())) => {
            let stream = futures::stream::unfold(body, |mut body| async move {
                body.recv()
                    .await
                    .map(|frame| (Ok::<_, std::convert::Infallible>(frame), body))
            });
            let mut response = Response::new(Body::from_stream(stream));
            let h = response.headers_mut();
            h.insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(axum::http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            h.extend(headers);
            response
        }
        Ok(Err(error)) => with_headers(error.respond_with(door.error(error.clone())), headers),
        Err(_) => door.error(task_ended_without_answer()),
    }
}

async fn send_all(frames: &mpsc::Sender<Bytes>, out: Vec<Bytes>) -> Result<(), mpsc::error::SendError<Bytes>> {
    for frame in out {
        frames.send(frame).await?;
    }
    Ok(())
}

/// A version's spec, from memory or (once, on first use of a version created
/// after start) from the store: one primary-key read.
fn lookup(
    state: &AppState,
    agent: &crate::routing::AgentRoutes,
    id: &VersionId,
) -> Result<Option<Arc<VersionSpec>>, ApiError> {
    state.servable(agent, id).map_err(ApiError::from)
}

/// The version's few-shot examples; a failed retrieval is logged and the
/// call goes on without them (retrieval must never fail a user's call).
async fn recall(state: &AppState, context: &CallContext) -> Vec<Message> {
    let Some(policy) = &context.version.examples else {
        return Vec::new();
    };
    let query = hone_types::openai::task_of(&context.request.messages);
    if query.is_empty() {
        return Vec::new();
    }
    match state
        .examples
        .examples(
            &state.cycles,
            &state.providers,
            &state.tasks,
            &context.agent,
            policy,
            &query,
        )
        .await
    {
        Ok(examples) => examples,
        Err(e) => {
            tracing::warn!(agent = %context.agent, version = %context.version_id, error = %e, "no examples retrieved");
            Vec::new()
        }
    }
}
