//! `/ui/episodes/{id}`: an episode as a transcript — each call's messages,
//! tool calls and results, the answer, the version and provider that served
//! it, its flags, cost and (from the embedded engine) token logprobs; the
//! signals with source and time; and the reward broken into its parts.

use super::{agent_config, html, version_name};
use crate::render::page;
use crate::{blocking, Ui, UiError, Viewer};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use hone_types::openai::Message;
use hone_types::{CallRecord, EpisodeId};
use serde::Serialize;
use std::sync::Arc;

#[derive(Serialize)]
struct Turn {
    role: String,
    text: String,
    tool_calls: Vec<(String, String)>,
    tool_call_id: Option<String>,
}

#[derive(Serialize)]
struct Token {
    text: String,
    logprob: f64,
}

#[derive(Serialize)]
struct CallView {
    id: String,
    at: i64,
    version: String,
    door: String,
    provider: Option<String>,
    model: Option<String>,
    outcome: String,
    error: Option<String>,
    latency_ms: f64,
    cost_usd: Option<f64>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    flags: Vec<&'static str>,
    messages: Vec<Turn>,
    answer: Option<Turn>,
    tokens: Vec<Token>,
    shadows: usize,
}

fn turn(m: &Message) -> Turn {
    Turn {
        role: serde_json::to_value(m.role)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        text: m.text(),
        tool_calls: m
            .tool_calls()
            .iter()
            .map(|c| (c.function.name.clone(), c.function.arguments.clone()))
            .collect(),
        tool_call_id: m.tool_call_id.clone(),
    }
}

/// The answer's tokens with their logprobs, where the provider sent them
/// (`logprobs.content`, as the embedded engine and OpenAI do).
fn tokens(call: &CallRecord) -> Vec<Token> {
    let content = call
        .response
        .as_ref()
        .and_then(|r| r.choices.first())
        .and_then(|c| c.logprobs())
        .and_then(|l| l.get("content"))
        .and_then(|c| c.as_array());
    let shown: Vec<Token> = content
        .into_iter()
        .flatten()
        .map(|t| Token {
            text: t["token"].as_str().unwrap_or_default().to_owned(),
            logprob: t["logprob"].as_f64().unwrap_or(f64::NAN),
        })
        .collect();
    if !shown.is_empty() {
        return shown;
    }
    // The embedded engine records every answer's token ids and logprobs
    // (what training reads) whether or not the client asked for logprobs:
    // shown by id, the tokenizer being the model's.
    call.sampled_tokens()
        .map(|t| {
            t.completion
                .iter()
                .zip(&t.logprobs)
                .map(|(id, logprob)| Token {
                    text: format!("#{id}"),
                    logprob: f64::from(*logprob),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn render(ui: &Ui, viewer: &Viewer, id: &str) -> Result<String, UiError> {
    let episode_id = EpisodeId::parse_stored(id).map_err(|e| UiError::bad_request(format!("episode id {e}")))?;
    let episode = ui
        .store
        .episode(&episode_id)?
        .ok_or_else(|| UiError::not_found(format!("no episode `{id}`")))?;
    super::hidden(viewer, &episode.summary.agent, format!("no episode `{id}`"))?;
    let agent = agent_config(ui, viewer, &episode.summary.agent)?;
    let calls: Vec<CallView> = episode
        .calls
        .iter()
        .map(|c| CallView {
            id: c.id.to_string(),
            at: c.started_at,
            version: version_name(agent, &c.version_id),
            door: serde_json::to_value(&c.door)
                .ok()
                .and_then(|d| d["api"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "chat_completions".to_owned()),
            provider: c.provider.clone(),
            model: c.model.clone(),
            outcome: format!("{:?}", c.outcome),
            error: c.error.as_ref().map(|e| e.message.clone()),
            latency_ms: c.latency_ms,
            cost_usd: c.cost_usd,
            prompt_tokens: c.usage.as_ref().map(|u| u.prompt_tokens),
            completion_tokens: c.usage.as_ref().map(|u| u.completion_tokens),
            flags: hone_types::call::BehaviourFlags::NAMES
                .into_iter()
                .filter(|n| c.flags.named(n))
                .collect(),
            messages: c.request.messages.iter().map(turn).collect(),
            answer: c
                .response
                .as_ref()
                .and_then(|r| r.choices.first())
                .map(|choice| turn(&choice.message)),
            tokens: tokens(c),
            shadows: c.shadow.len(),
        })
        .collect();
    let reward = ui.store.reward(&episode_id, &agent.reward.version())?;
    page(
        viewer,
        "episode.html",
        minijinja::context! {
            title => format!("Episode {id}"),
            episode => minijinja::Value::from(minijinja::value::Serde(&episode.summary)),
            calls => minijinja::Value::from(minijinja::value::Serde(&calls)),
            signals => minijinja::Value::from(minijinja::value::Serde(&episode.signals)),
            reward => minijinja::Value::from(minijinja::value::Serde(&reward)),
            pass_threshold => agent.reward.pass_threshold,
        },
    )
}

pub async fn show(State(ui): State<Arc<Ui>>, Extension(viewer): Extension<Viewer>, Path(id): Path<String>) -> Response {
    html(blocking(&ui, viewer, move |ui, viewer| render(ui, viewer, &id)).await)
}
