//! `/ui/evals`, `/ui/evals/{id}` and `/ui/evals/compare?a=&b=`: evaluation
//! runs, one run's results per instance, and two runs of the same dataset
//! paired by instance (`hone_learn::search::compare::paired`, the pairing
//! `hone eval compare` uses): wins, losses, the mean difference, and the
//! instances A passed that B failed — candidate regressions, which
//! `hone eval compare` confirms by re-running them.

use super::{html, short};
use crate::render::page;
use crate::{blocking, Ui, UiError, Viewer};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::Extension;
use hone_types::learn::EvalRunInfo;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Runs listed.
const RUNS_SHOWN: usize = 200;

#[derive(Serialize)]
struct RunRow {
    id: String,
    agent: String,
    dataset: String,
    version: String,
    target: String,
    created_at: i64,
    finished_at: Option<i64>,
}

fn row(r: &EvalRunInfo) -> RunRow {
    RunRow {
        id: r.id.clone(),
        agent: r.agent.clone(),
        dataset: r.dataset_id.clone(),
        version: short(r.version_id.as_str()),
        target: r.target.clone(),
        created_at: r.created_at,
        finished_at: r.finished_at,
    }
}

fn run(ui: &Ui, viewer: &Viewer, id: &str) -> Result<EvalRunInfo, UiError> {
    let run = ui
        .store
        .eval_run(id)?
        .ok_or_else(|| UiError::not_found(format!("no evaluation run `{id}`")))?;
    super::hidden(viewer, &run.agent, format!("no evaluation run `{id}`"))?;
    Ok(run)
}

pub async fn list(State(ui): State<Arc<Ui>>, Extension(viewer): Extension<Viewer>) -> Response {
    html(
        blocking(&ui, viewer, |ui, viewer| {
            let runs: Vec<RunRow> = ui
                .store
                .eval_runs(None, RUNS_SHOWN)?
                .iter()
                .filter(|r| viewer.sees(&r.agent))
                .map(row)
                .collect();
            page(
                viewer,
                "evals.html",
                minijinja::context! { title => "Evaluations", runs => minijinja::Value::from(minijinja::value::Serde(&runs)) },
            )
        })
        .await,
    )
}

pub async fn show(State(ui): State<Arc<Ui>>, Extension(viewer): Extension<Viewer>, Path(id): Path<String>) -> Response {
    html(
        blocking(&ui, viewer, move |ui, viewer| {
            let info = run(ui, viewer, &id)?;
            let results = ui.store.eval_results(&id)?;
            let passed = results.iter().filter(|r| r.passed).count();
            page(
                viewer,
                "eval.html",
                minijinja::context! {
                    title => format!("Evaluation {id}"),
                    run => minijinja::Value::from(minijinja::value::Serde(&row(&info))),
                    passed,
                    total => results.len(),
                    results => minijinja::Value::from(minijinja::value::Serde(&results)),
                },
            )
        })
        .await,
    )
}

#[derive(Deserialize)]
pub struct Pick {
    a: String,
    b: String,
}

#[derive(Serialize)]
struct PairRow {
    instance: String,
    a: f64,
    b: f64,
    diff: f64,
    a_pass_rate: f64,
    b_pass_rate: f64,
    regression: bool,
}

pub async fn compare(
    State(ui): State<Arc<Ui>>,
    Extension(viewer): Extension<Viewer>,
    Query(pick): Query<Pick>,
) -> Response {
    html(
        blocking(&ui, viewer, move |ui, viewer| {
            let (a, b) = (run(ui, viewer, &pick.a)?, run(ui, viewer, &pick.b)?);
            if a.dataset_id != b.dataset_id {
                return Err(UiError::bad_request(format!(
                    "runs `{}` and `{}` evaluated different datasets; a paired comparison needs the same one",
                    a.id, b.id
                )));
            }
            let (ra, rb) = (ui.store.eval_results(&a.id)?, ui.store.eval_results(&b.id)?);
            let samples = ra.iter().chain(&rb).map(|r| r.attempt + 1).max().unwrap_or(1);
            let pairs: Vec<PairRow> = hone_learn::search::compare::paired(&ra, &rb, samples)
                .into_iter()
                .map(|p| PairRow {
                    regression: p.a_pass_rate > p.b_pass_rate,
                    diff: p.b - p.a,
                    instance: p.instance_id,
                    a: p.a,
                    b: p.b,
                    a_pass_rate: p.a_pass_rate,
                    b_pass_rate: p.b_pass_rate,
                })
                .collect();
            let n = pairs.len().max(1) as f64;
            let mean = |f: &dyn Fn(&PairRow) -> f64| pairs.iter().map(f).sum::<f64>() / n;
            let (wins, losses) = (
                pairs.iter().filter(|p| p.diff > 0.0).count(),
                pairs.iter().filter(|p| p.diff < 0.0).count(),
            );
            page(
                viewer,
                "compare.html",
                minijinja::context! {
                    title => "Paired comparison",
                    a => minijinja::Value::from(minijinja::value::Serde(&row(&a))),
                    b => minijinja::Value::from(minijinja::value::Serde(&row(&b))),
                    mean_a => mean(&|p| p.a),
                    mean_b => mean(&|p| p.b),
                    mean_diff => mean(&|p| p.diff),
                    wins,
                    losses,
                    ties => pairs.len() - wins - losses,
                    regressions => pairs.iter().filter(|p| p.regression).count(),
                    pairs => minijinja::Value::from(minijinja::value::Serde(&pairs)),
                },
            )
        })
        .await,
    )
}
