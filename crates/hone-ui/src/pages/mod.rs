//! One file per page. Each gathers its data through the store traits (off
//! the event loop) into plain serialisable rows and renders its template.

pub mod agent;
pub mod cycles;
pub mod datasets;
pub mod episode;
pub mod episodes;
pub mod evals;
pub mod overview;

use crate::{Ui, UiError, Viewer};
use axum::response::{Html, IntoResponse, Response};
use hone_config::AgentConfig;
use hone_types::VersionId;

/// The page, or its error page.
pub(crate) fn html(page: Result<String, UiError>) -> Response {
    match page {
        Ok(body) => Html(body).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The agent's config, if `viewer` may see it. An agent outside the
/// viewer's scope reads exactly as one that is not configured.
pub(crate) fn agent_config<'a>(ui: &'a Ui, viewer: &Viewer, name: &str) -> Result<&'a AgentConfig, UiError> {
    ui.config
        .agents
        .get(name)
        .filter(|_| viewer.sees(name))
        .ok_or_else(|| UiError::not_found(format!("agent `{name}` is not configured")))
}

/// What `viewer` may not see, told as if it did not exist.
pub(crate) fn hidden(viewer: &Viewer, agent: &str, what: String) -> Result<(), UiError> {
    if viewer.sees(agent) {
        Ok(())
    } else {
        Err(UiError::not_found(what))
    }
}

/// A version as people call it: its label from the config, else its id's start.
pub(crate) fn version_name(agent: &AgentConfig, id: &VersionId) -> String {
    agent
        .versions
        .values()
        .find(|v| &v.id == id)
        .map(|v| format!("{} ({})", v.label, short(id.as_str())))
        .unwrap_or_else(|| short(id.as_str()))
}

pub(crate) fn short(id: &str) -> String {
    id.chars().take(8).collect()
}
