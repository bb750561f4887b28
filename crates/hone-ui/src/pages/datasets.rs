//! `/ui/datasets` and `/ui/datasets/{id}`: the immutable dataset snapshots
//! (built by cycles and `hone dataset build`) and their instances.

use super::html;
use crate::render::page;
use crate::{blocking, Ui, UiError, Viewer};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use serde::Serialize;
use std::sync::Arc;

/// Instances shown on a dataset's page.
const INSTANCES_SHOWN: usize = 200;

#[derive(Serialize)]
struct InstanceRow {
    id: String,
    episode: Option<String>,
    input: String,
}

pub async fn list(State(ui): State<Arc<Ui>>, Extension(viewer): Extension<Viewer>) -> Response {
    html(
        blocking(&ui, viewer, |ui, viewer| {
            let mut datasets = ui.store.datasets()?;
            datasets.retain(|d| viewer.sees(&d.agent));
            datasets.sort_by_key(|d| std::cmp::Reverse(d.created_at));
            page(
                viewer,
                "datasets.html",
                minijinja::context! { title => "Datasets", datasets => minijinja::Value::from(minijinja::value::Serde(&datasets)) },
            )
        })
        .await,
    )
}

fn render(ui: &Ui, viewer: &Viewer, id: &str) -> Result<String, UiError> {
    let dataset = ui
        .store
        .dataset(id)?
        .ok_or_else(|| UiError::not_found(format!("no dataset `{id}`")))?;
    super::hidden(viewer, &dataset.agent, format!("no dataset `{id}`"))?;
    let items = ui.store.dataset_items(&dataset.id)?;
    let instances: Vec<InstanceRow> = items
        .iter()
        .take(INSTANCES_SHOWN)
        .map(|i| InstanceRow {
            id: i.id.clone(),
            episode: i.episode_id.as_ref().map(ToString::to_string),
            input: serde_json::to_string_pretty(&i.input).unwrap_or_default(),
        })
        .collect();
    let params = serde_json::to_string_pretty(&dataset.params).unwrap_or_default();
    page(
        viewer,
        "dataset.html",
        minijinja::context! {
            title => format!("Dataset {}", dataset.name),
            dataset => minijinja::Value::from(minijinja::value::Serde(&dataset)),
            params,
            shown => instances.len(),
            instances => minijinja::Value::from(minijinja::value::Serde(&instances)),
        },
    )
}

pub async fn show(State(ui): State<Arc<Ui>>, Extension(viewer): Extension<Viewer>, Path(id): Path<String>) -> Response {
    html(blocking(&ui, viewer, move |ui, viewer| render(ui, viewer, &id)).await)
}
