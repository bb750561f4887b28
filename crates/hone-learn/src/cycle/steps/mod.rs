//! The steps of a cycle, one file each, and what several of them share.
//! A step gets the cycle as stored (its state and typed detail) and returns
//! [`Stepped`]: the state to move to, the detail it leaves for later steps,
//! and the history to record with the move. Steps may write candidates and
//! evaluation runs on the way; each does so idempotently, so a step that is
//! run again after a crash writes nothing twice.

mod collect;
mod datasets;
mod deploy;
mod evaluate;
mod front;
mod gate;
mod propose;
mod reward;

use super::Learner;
use crate::error::{LearnError, Result};
use crate::search::eval::{run_id, summarise, EvalOptions, EvalSummary, Evaluator, Target};
use hone_config::AgentConfig;
use hone_types::{
    CandidateScores, CycleDetail, CycleInfo, CycleState, DatasetInfo, HistoryEvent, InstanceResult, VersionId,
};

/// What a step decided: the next state, the new detail, what to record.
pub(super) struct Stepped {
    pub to: CycleState,
    pub detail: CycleDetail,
    pub events: Vec<HistoryEvent>,
}

impl Stepped {
    /// On to the step after `cycle`'s.
    fn next(cycle: &CycleInfo, detail: CycleDetail) -> Self {
        Self::to(cycle.state.next(), detail)
    }

    fn to(to: CycleState, detail: CycleDetail) -> Self {
        Self {
            to,
            detail,
            events: Vec::new(),
        }
    }

    fn with_events(mut self, events: Vec<HistoryEvent>) -> Self {
        self.events = events;
        self
    }
}

/// Runs the step `cycle` is in.
pub(super) async fn run(learner: &Learner, agent: &AgentConfig, cycle: &CycleInfo) -> Result<Stepped> {
    let detail = cycle.detail.clone();
    match cycle.state {
        CycleState::Collect => collect::run(learner, agent, cycle, detail).await,
        CycleState::Reward => reward::run(learner, agent, cycle, detail).await,
        CycleState::Datasets => datasets::run(learner, agent, cycle, detail).await,
        CycleState::Propose => propose::run(learner, agent, cycle, detail).await,
        CycleState::Evaluate => evaluate::run(learner, agent, cycle, detail).await,
        CycleState::Gate => gate::run(learner, agent, cycle, detail).await,
        CycleState::Front => front::run(learner, agent, cycle, detail),
        CycleState::Deploy => deploy::run(learner, agent, cycle, detail).await,
        CycleState::Done | CycleState::Failed => Err(LearnError::state("the cycle has finished")),
    }
}

/// A field an earlier step must have written.
fn written<'a, T>(field: &'a Option<T>, name: &str) -> Result<&'a T> {
    field
        .as_ref()
        .ok_or_else(|| LearnError::state(format!("cycle detail lacks `{name}` (written by an earlier step)")))
}

fn champion(detail: &CycleDetail) -> Result<&VersionId> {
    written(&detail.champion, "champion")
}

fn champion_scores(detail: &CycleDetail) -> Result<&CandidateScores> {
    written(&detail.champion_scores, "champion_scores")
}

fn dataset(learner: &Learner, id: &str) -> Result<DatasetInfo> {
    learner
        .store
        .dataset(id)?
        .ok_or_else(|| LearnError::state(format!("dataset {id} is gone")))
}

fn target(learner: &Learner, detail: &CycleDetail) -> Result<DatasetInfo> {
    dataset(learner, written(&detail.target, "target")?)
}

/// What optimisers learn from: the train half of the window's sample
/// (cycles stored before the split had only the target set).
fn train(learner: &Learner, detail: &CycleDetail) -> Result<DatasetInfo> {
    match &detail.train {
        Some(id) => dataset(learner, id),
        None => target(learner, detail),
    }
}

fn regression(learner: &Learner, detail: &CycleDetail) -> Result<Option<DatasetInfo>> {
    detail.regression.as_deref().map(|id| dataset(learner, id)).transpose()
}

/// What the evaluate and gate steps measure with: the evaluator, the
/// cycle's target and regression sets, and the champion.
struct Bench {
    evaluator: Evaluator,
    /// How instances run: the agent endpoint, or replay.
    via: Target,
    target: DatasetInfo,
    regression: Option<DatasetInfo>,
    champion: VersionId,
    /// How many episodes run at once (`[agents.NAME.learn] concurrency`).
    options: EvalOptions,
}

impl Bench {
    fn of(learner: &Learner, agent: &AgentConfig, detail: &CycleDetail) -> Result<Self> {
        Ok(Self {
            evaluator: learner.evaluator(agent)?,
            via: Target::of(agent),
            target: target(learner, detail)?,
            regression: regression(learner, detail)?,
            champion: champion(detail)?.clone(),
            options: EvalOptions {
                samples: agent.learn.gate.samples,
                ..EvalOptions::with_concurrency(agent.learn.concurrency)
            },
        })
    }
}

/// A version evaluated on a dataset by replay (resumed by run id), reported.
async fn evaluate_on(
    learner: &Learner,
    bench: &Bench,
    dataset: &DatasetInfo,
    version: &VersionId,
    label: &str,
) -> Result<(EvalSummary, Vec<InstanceResult>)> {
    let quiet = |_: crate::search::eval::Progress| {};
    let (run, results) = bench
        .evaluator
        .run(dataset, version, &bench.via, &bench.options, &quiet)
        .await?;
    let summary = summarise(&run.id, &results, bench.options.samples);
    learner.say(
        &dataset.agent,
        &format!(
            "evaluated {label} {version} on {}: mean {} pass {:.0}% cost ${:.6}",
            dataset.id,
            summary.mean_score.map_or("-".into(), |m| format!("{m:.3}")),
            summary.pass_rate * 100.0,
            summary.mean_cost_usd
        ),
    );
    Ok((summary, results))
}

/// The results the evaluate step stored for a version on a dataset.
fn stored_results(
    learner: &Learner,
    bench: &Bench,
    dataset: &DatasetInfo,
    version: &VersionId,
) -> Result<(EvalSummary, Vec<InstanceResult>)> {
    let run = run_id(&dataset.id, version, &bench.via);
    let results = learner.store.eval_results(&run)?;
    Ok((summarise(&run, &results, bench.options.samples), results))
}
