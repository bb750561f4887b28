//! One learning cycle of one agent, as a persisted state machine
//! (DESIGN.md "The loop"): collect → reward → datasets → propose → evaluate
//! → gate → front → deploy → done.
//!
//! Each step reads what earlier steps stored (the cycle's `detail`, its
//! candidates, evaluation runs), does its work idempotently, and then moves
//! the cycle to the next step in one transaction. A process killed at any
//! point resumes at the step it was in: evaluation runs resume by run id,
//! candidates are content-addressed and stored with `INSERT OR IGNORE`,
//! trained adapters are renamed into place only when complete, and
//! deployment changes are compare-and-swap, so nothing is deployed twice
//! and nothing is lost.

use crate::compare::{compare, Comparison};
use crate::dataset::{self, BuildOptions, Builder};
use crate::deploy::{self, Change};
use crate::eval::{summarise, EvalOptions, EvalSummary, Evaluator, Target};
use crate::front::{dominated_by, Point};
use crate::gate::{self, GateInput};
use crate::optimiser::{self, ProposeContext};
use crate::reward::{reward_pending, Rewarder};
use hone_config::{AgentConfig, Config, DeploymentPolicy};
use hone_gateway::state::now_ms;
use hone_store::{CandidateUpdate, CycleStore, EpisodeFilter, Recorder, Step};
use hone_types::{
    Candidate, CandidateScores, CandidateStatus, CycleInfo, CycleState, DatasetInfo, HistoryEvent, VersionId,
    VersionRecord,
};
use serde_json::{json, Value};
use std::sync::Arc;

/// Reports progress: (agent, message).
pub type Progress = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// Runs cycles and watches canaries for every agent of a config.
pub struct Learner {
    pub config: Arc<Config>,
    pub store: Arc<dyn CycleStore>,
    pub gateway: crate::client::GatewayClient,
    /// The recorder of an in-process gateway (flushed before reading back).
    pub recorder: Option<Arc<Recorder>>,
    pub progress: Progress,
    /// Fault injection for crash tests (`HONE_LEARN_PAUSE_AT`): on entering
    /// this step (after it is persisted) the cycle waits for an hour.
    pub pause_at: Option<CycleState>,
}

/// What a step decided: the next state, the new detail, what to record.
struct Stepped {
    to: CycleState,
    detail: Value,
    events: Vec<HistoryEvent>,
}

fn get_str<'a>(detail: &'a Value, key: &str) -> Result<&'a str, String> {
    detail[key]
        .as_str()
        .ok_or_else(|| format!("cycle detail lacks `{key}` (written by an earlier step)"))
}

fn scores_of(s: &EvalSummary, regression: Option<&EvalSummary>) -> CandidateScores {
    CandidateScores {
        target_mean: s.mean_score,
        target_pass_rate: s.pass_rate,
        regression_pass_rate: regression.map_or(1.0, |r| r.pass_rate),
        mean_cost_usd: s.mean_cost_usd,
        mean_latency_ms: s.mean_latency_ms,
        errors: s.errors,
        rates: gate::rates(s),
    }
}

impl Learner {
    pub fn agent(&self, name: &str) -> Result<&AgentConfig, String> {
        self.config.agents.get(name).ok_or_else(|| {
            format!(
                "no agent `{name}` in the config (agents: {})",
                self.config.agents.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }

    pub fn rewarder(&self, agent: &AgentConfig) -> Result<Arc<Rewarder>, String> {
        let client: Arc<dyn crate::client::ChatClient> = Arc::new(self.gateway.clone());
        Ok(Arc::new(Rewarder::new(&agent.name, &agent.reward, Some(client))?))
    }

    pub fn evaluator(&self, agent: &AgentConfig) -> Result<Evaluator, String> {
        Ok(Evaluator {
            store: self.store.clone(),
            gateway: self.gateway.clone(),
            rewarder: self.rewarder(agent)?,
            recorder: self.recorder.clone(),
        })
    }

    pub(crate) fn say(&self, agent: &str, message: &str) {
        // The progress callback shows it; the log keeps it at debug level.
        tracing::debug!(agent, "{message}");
        (self.progress)(agent, message);
    }

    /// Runs the agent's unfinished cycle to its end, or a new one.
    pub async fn run_cycle(&self, agent: &str, trigger: &str) -> Result<CycleInfo, String> {
        let agent_config = self.agent(agent)?;
        let resuming = self.store.open_cycle(agent).map_err(|e| e.to_string())?.is_some();
        let mut cycle = self
            .store
            .start_cycle(agent, trigger, now_ms())
            .map_err(|e| e.to_string())?;
        if resuming {
            self.say(
                agent,
                &format!("resuming cycle {} at {}", cycle.id, cycle.state.as_str()),
            );
        } else {
            self.say(agent, &format!("cycle {} started ({trigger})", cycle.id));
        }
        while !cycle.state.is_finished() {
            if self.pause_at == Some(cycle.state) {
                self.say(
                    agent,
                    &format!("paused at {} (HONE_LEARN_PAUSE_AT)", cycle.state.as_str()),
                );
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
            let from = cycle.state;
            self.say(agent, &format!("[{}] {}", cycle.id, from.as_str()));
            let result = self.step(agent_config, &cycle).await;
            let now = now_ms();
            let advanced = match result {
                Ok(s) => {
                    let mut events = s.events;
                    if s.to == CycleState::Done {
                        events.push(
                            HistoryEvent::new(agent, now, "cycle", format!("cycle {} done", cycle.id))
                                .cycle(&cycle.id)
                                .evidence(s.detail.clone()),
                        );
                    }
                    let step = Step {
                        from,
                        to: s.to,
                        detail: &s.detail,
                        error: None,
                    };
                    self.store.advance_cycle(&cycle.id, &step, &events, now)
                }
                Err(error) => {
                    self.say(
                        agent,
                        &format!("cycle {} failed at {}: {error}", cycle.id, from.as_str()),
                    );
                    let event = HistoryEvent::new(
                        agent,
                        now,
                        "cycle",
                        format!("cycle {} failed at {}: {error}", cycle.id, from.as_str()),
                    )
                    .cycle(&cycle.id);
                    let step = Step {
                        from,
                        to: CycleState::Failed,
                        detail: &cycle.detail,
                        error: Some(&error),
                    };
                    self.store.advance_cycle(&cycle.id, &step, &[event], now)
                }
            }
            .map_err(|e| e.to_string())?;
            if !advanced {
                self.say(agent, &format!("cycle {} was moved on by another learner", cycle.id));
            }
            cycle = self
                .store
                .cycle(&cycle.id)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("cycle {} vanished", cycle.id))?;
        }
        self.say(agent, &format!("cycle {} {}", cycle.id, cycle.state.as_str()));
        Ok(cycle)
    }

    async fn step(&self, agent: &AgentConfig, cycle: &CycleInfo) -> Result<Stepped, String> {
        let mut detail = cycle.detail.clone();
        let name = agent.name.as_str();
        let now = now_ms();
        let next = |detail: Value, events: Vec<HistoryEvent>| Stepped {
            to: cycle.state.next(),
            detail,
            events,
        };
        match cycle.state {
            CycleState::Collect => {
                let since = self
                    .store
                    .cycles(Some(name), 50)
                    .map_err(|e| e.to_string())?
                    .iter()
                    .filter(|c| c.state == CycleState::Done && c.id != cycle.id)
                    .find_map(|c| c.detail["until"].as_i64())
                    .unwrap_or(0);
                if let Some(recorder) = &self.recorder {
                    let _ = recorder.flush(std::time::Duration::from_secs(5)).await;
                }
                let (deployment, _) = deploy::current(self.store.as_ref(), agent)?;
                let new_episodes = self.store.episodes_since(name, since).map_err(|e| e.to_string())?;
                self.say(
                    name,
                    &format!("{new_episodes} new episodes; champion {}", deployment.champion),
                );
                detail = json!({"since": since, "until": now, "champion": deployment.champion, "new_episodes": new_episodes});
                Ok(next(detail, Vec::new()))
            }
            CycleState::Reward => {
                let until = detail["until"].as_i64();
                let rewarder = self.rewarder(agent)?;
                let scored = reward_pending(self.store.as_ref(), &rewarder, None, until, now)
                    .await
                    .map_err(|e| e.to_string())?;
                let (count, mean) = self
                    .store
                    .reward_summary(name, &rewarder.spec_version)
                    .map_err(|e| e.to_string())?;
                self.say(
                    name,
                    &format!(
                        "scored {scored} episodes; {count} rewarded, mean {}",
                        mean.map_or("-".into(), |m| format!("{m:.3}"))
                    ),
                );
                detail["rewarded"] = json!(scored);
                Ok(next(detail, Vec::new()))
            }
            CycleState::Datasets => {
                let champion = VersionId::parse(get_str(&detail, "champion")?).ok_or("bad champion id")?;
                let seed = cycle.id.rsplit('-').next().and_then(|s| s.parse().ok()).unwrap_or(0);
                let options = |builder: Builder| BuildOptions {
                    builder,
                    name: format!("{name}.{}", builder.name()),
                    filter: EpisodeFilter {
                        agent: name.to_owned(),
                        until: detail["until"].as_i64(),
                        spec_version: Some(agent.reward.version()),
                        ..EpisodeFilter::default()
                    },
                    size: agent.learn.dataset_size,
                    seed,
                    dedup: true,
                    champion: Some(champion.clone()),
                    reference_signal: agent.reward.reference_signal.clone(),
                };
                let store = self.store.clone();
                let (traffic, previously_passing) = (options(Builder::Traffic), options(Builder::Regression));
                let (target, regression) = tokio::task::spawn_blocking(move || {
                    let target = dataset::build(store.as_ref(), &traffic, now, &mut |_| {})?;
                    let regression = dataset::build(store.as_ref(), &previously_passing, now, &mut |_| {})?;
                    Ok::<_, hone_store::StoreError>((target.0, regression.0))
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                self.say(
                    name,
                    &format!(
                        "datasets: target {} ({} instances), regression {} ({} instances)",
                        target.id, target.item_count, regression.id, regression.item_count
                    ),
                );
                detail["target"] = json!(target.id);
                detail["regression"] = json!((regression.item_count > 0).then_some(regression.id));
                if target.item_count < 2 {
                    detail["note"] = json!(format!("not enough traffic: {} instances", target.item_count));
                    return Ok(Stepped {
                        to: CycleState::Done,
                        detail,
                        events: Vec::new(),
                    });
                }
                Ok(next(detail, Vec::new()))
            }
            CycleState::Propose => self.propose(agent, cycle, detail).await,
            CycleState::Evaluate => self.evaluate(agent, cycle, detail).await,
            CycleState::Gate => self.gate(agent, cycle, detail).await,
            CycleState::Front => self.front(agent, cycle, detail),
            CycleState::Deploy => self.deploy(agent, cycle, detail).await,
            CycleState::Done | CycleState::Failed => Err("the cycle has finished".into()),
        }
    }

    fn dataset(&self, id: &str) -> Result<DatasetInfo, String> {
        self.store
            .dataset(id)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("dataset {id} is gone"))
    }

    fn regression(&self, detail: &Value) -> Result<Option<DatasetInfo>, String> {
        detail["regression"].as_str().map(|id| self.dataset(id)).transpose()
    }

    async fn propose(&self, agent: &AgentConfig, cycle: &CycleInfo, mut detail: Value) -> Result<Stepped, String> {
        let name = agent.name.as_str();
        let champion_id = VersionId::parse(get_str(&detail, "champion")?).ok_or("bad champion id")?;
        let champion = self
            .store
            .version(&champion_id)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("champion {champion_id} is not stored"))?;
        let target = self.dataset(get_str(&detail, "target")?)?;
        let evaluator = self.evaluator(agent)?;
        let progress = |m: &str| self.say(name, m);
        let adapters_dir = champion
            .spec
            .routes
            .first()
            .map(|r| deploy::adapters_dir(&self.config, &r.provider))
            .unwrap_or_else(|| self.config.gateway.data_dir.join("adapters"));
        let ctx = ProposeContext {
            config: &self.config,
            agent,
            cycle_id: &cycle.id,
            champion_id: &champion_id,
            champion: &champion.spec,
            target: &target,
            store: self.store.clone(),
            evaluator: &evaluator,
            adapters_dir,
            progress: &progress,
        };
        let now = now_ms();
        let (mut versions, mut candidates, mut events) = (Vec::new(), Vec::new(), Vec::new());
        for spec in &agent.learn.optimisers {
            let optimiser = optimiser::from_spec(spec);
            let proposals = match optimiser.propose(&ctx).await {
                Ok(p) => p,
                Err(e) => {
                    self.say(name, &format!("optimiser {} failed: {e}", optimiser.name()));
                    events.push(
                        HistoryEvent::new(name, now, "optimiser", format!("{} failed: {e}", optimiser.name()))
                            .cycle(&cycle.id),
                    );
                    continue;
                }
            };
            for p in proposals {
                let id = p.spec.id();
                if id == champion_id || candidates.iter().any(|c: &Candidate| c.version_id == id) {
                    continue;
                }
                self.say(name, &format!("{} proposes {id}: {}", optimiser.name(), p.diff));
                versions.push(VersionRecord {
                    id: id.clone(),
                    agent: name.to_owned(),
                    label: None,
                    spec: p.spec,
                    parent: Some(champion_id.clone()),
                    created_by: optimiser.name().to_owned(),
                    created_at: now,
                });
                events.push(
                    HistoryEvent::new(
                        name,
                        now,
                        "candidate",
                        format!("{} proposed {id}: {}", optimiser.name(), p.diff),
                    )
                    .version(&id)
                    .cycle(&cycle.id),
                );
                candidates.push(Candidate {
                    cycle_id: cycle.id.clone(),
                    agent: name.to_owned(),
                    version_id: id,
                    parent: champion_id.clone(),
                    optimiser: optimiser.name().to_owned(),
                    diff: p.diff,
                    status: CandidateStatus::Proposed,
                    reason: None,
                    scores: None,
                    created_at: now,
                    updated_at: now,
                });
            }
        }
        // Stored before the cycle moves on; a resumed propose stores the
        // same ids again, which keeps what exists.
        self.store
            .add_candidates(&versions, &candidates, &events)
            .map_err(|e| e.to_string())?;
        let stored = self
            .store
            .candidates(name, Some(&cycle.id))
            .map_err(|e| e.to_string())?;
        detail["candidates"] = json!(stored.len());
        if stored.is_empty() {
            detail["note"] = json!("no optimiser proposed a candidate");
            return Ok(Stepped {
                to: CycleState::Done,
                detail,
                events: Vec::new(),
            });
        }
        Ok(Stepped {
            to: CycleState::Evaluate,
            detail,
            events: Vec::new(),
        })
    }

    async fn run_eval(
        &self,
        evaluator: &Evaluator,
        dataset: &DatasetInfo,
        version: &VersionId,
        label: &str,
        agent: &str,
    ) -> Result<(EvalSummary, Vec<hone_types::InstanceResult>), String> {
        let quiet = |_: crate::eval::Progress| {};
        let (run, results) = evaluator
            .run(dataset, version, &Target::Replay, &EvalOptions::default(), &quiet)
            .await
            .map_err(|e| e.to_string())?;
        let summary = summarise(&run.id, &results);
        self.say(
            agent,
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
    fn stored(
        &self,
        dataset: &DatasetInfo,
        version: &VersionId,
    ) -> Result<(EvalSummary, Vec<hone_types::InstanceResult>), String> {
        let run = crate::eval::run_id(&dataset.id, version, &Target::Replay);
        let results = self.store.eval_results(&run).map_err(|e| e.to_string())?;
        Ok((summarise(&run, &results), results))
    }

    async fn evaluate(&self, agent: &AgentConfig, cycle: &CycleInfo, mut detail: Value) -> Result<Stepped, String> {
        let name = agent.name.as_str();
        let evaluator = self.evaluator(agent)?;
        let target = self.dataset(get_str(&detail, "target")?)?;
        let regression = self.regression(&detail)?;
        let champion = VersionId::parse(get_str(&detail, "champion")?).ok_or("bad champion id")?;
        let (champ_target, _) = self.run_eval(&evaluator, &target, &champion, "champion", name).await?;
        let champ_regression = match &regression {
            Some(r) => Some(self.run_eval(&evaluator, r, &champion, "champion", name).await?.0),
            None => None,
        };
        detail["champion_scores"] = json!(scores_of(&champ_target, champ_regression.as_ref()));
        let now = now_ms();
        for c in self
            .store
            .candidates(name, Some(&cycle.id))
            .map_err(|e| e.to_string())?
        {
            if c.status != CandidateStatus::Proposed {
                continue;
            }
            let (t, _) = self
                .run_eval(&evaluator, &target, &c.version_id, "candidate", name)
                .await?;
            let r = match &regression {
                Some(r) => Some(self.run_eval(&evaluator, r, &c.version_id, "candidate", name).await?.0),
                None => None,
            };
            let scores = scores_of(&t, r.as_ref());
            let event = HistoryEvent::new(
                name,
                now,
                "evaluation",
                format!(
                    "{} on {}: mean {} pass {:.0}%, regression pass {:.0}%, cost ${:.6}",
                    c.version_id,
                    target.id,
                    t.mean_score.map_or("-".into(), |m| format!("{m:.3}")),
                    t.pass_rate * 100.0,
                    scores.regression_pass_rate * 100.0,
                    t.mean_cost_usd
                ),
            )
            .version(&c.version_id)
            .cycle(&cycle.id)
            .evidence(json!({"target": t, "regression": r}));
            self.store
                .update_candidates(
                    &[CandidateUpdate {
                        cycle_id: cycle.id.clone(),
                        version_id: c.version_id.clone(),
                        status: CandidateStatus::Evaluated,
                        reason: None,
                        scores: Some(scores),
                    }],
                    &[event],
                    now,
                )
                .map_err(|e| e.to_string())?;
        }
        Ok(Stepped {
            to: CycleState::Gate,
            detail,
            events: Vec::new(),
        })
    }

    async fn gate(&self, agent: &AgentConfig, cycle: &CycleInfo, detail: Value) -> Result<Stepped, String> {
        let name = agent.name.as_str();
        let evaluator = self.evaluator(agent)?;
        let target = self.dataset(get_str(&detail, "target")?)?;
        let regression = self.regression(&detail)?;
        let champion = VersionId::parse(get_str(&detail, "champion")?).ok_or("bad champion id")?;
        let spec = &agent.learn.gate;
        let (champ_summary, champ_results) = self.run_eval(&evaluator, &target, &champion, "champion", name).await?;
        for c in self
            .store
            .candidates(name, Some(&cycle.id))
            .map_err(|e| e.to_string())?
        {
            if c.status != CandidateStatus::Evaluated {
                continue;
            }
            let noop = |_: &str, _| {};
            let options = EvalOptions::default();
            let pair = (&champion, &c.version_id);
            let on_target = compare(&evaluator, &target, pair, &Target::Replay, &options, spec.reruns, &noop)
                .await
                .map_err(|e| e.to_string())?;
            let mut comparisons: Vec<Comparison> = vec![on_target];
            if let Some(r) = &regression {
                comparisons.push(
                    compare(&evaluator, r, pair, &Target::Replay, &options, spec.reruns, &noop)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            let (cand_summary, cand_results) = self.stored(&target, &c.version_id)?;
            let diffs = gate::paired_diffs(&champ_results, &cand_results);
            let refs: Vec<&Comparison> = comparisons.iter().collect();
            let decision = gate::decide(&GateInput {
                spec,
                objective: &agent.learn.objective,
                champion: &champ_summary,
                candidate: &cand_summary,
                diffs: &diffs,
                comparisons: &refs,
            });
            let (status, reason) = if decision.passed {
                (
                    CandidateStatus::Gated,
                    format!("passed the gate: {}", decision.evidence),
                )
            } else {
                (
                    CandidateStatus::Pruned,
                    format!("pruned by the gate: {}", decision.reasons.join("; ")),
                )
            };
            self.say(name, &format!("{}: {reason}", c.version_id));
            let now = now_ms();
            let event = HistoryEvent::new(name, now, "gate", format!("{}: {reason}", c.version_id))
                .version(&c.version_id)
                .cycle(&cycle.id)
                .evidence(json!({
                    "evidence": decision.evidence,
                    "reasons": decision.reasons,
                    "verdicts": comparisons.iter().map(|c| json!({"dataset": c.dataset, "verdict": c.verdict,
                        "regressions": c.regressions.iter().filter(|f| f.confirmed).map(|f| &f.instance_id).collect::<Vec<_>>()})).collect::<Vec<_>>(),
                }));
            self.store
                .update_candidates(
                    &[CandidateUpdate {
                        cycle_id: cycle.id.clone(),
                        version_id: c.version_id.clone(),
                        status,
                        reason: Some(reason),
                        scores: None,
                    }],
                    &[event],
                    now,
                )
                .map_err(|e| e.to_string())?;
        }
        Ok(Stepped {
            to: CycleState::Front,
            detail,
            events: Vec::new(),
        })
    }

    fn front(&self, agent: &AgentConfig, cycle: &CycleInfo, detail: Value) -> Result<Stepped, String> {
        let name = agent.name.as_str();
        let champion: CandidateScores =
            serde_json::from_value(detail["champion_scores"].clone()).map_err(|e| format!("champion scores: {e}"))?;
        let champion_id = get_str(&detail, "champion")?.to_owned();
        let gated: Vec<Candidate> = self
            .store
            .candidates(name, Some(&cycle.id))
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|c| c.status == CandidateStatus::Gated)
            .collect();
        let point = |s: &CandidateScores| Point {
            reward: s.target_mean.unwrap_or(f64::MIN),
            cost: s.mean_cost_usd,
            latency: s.mean_latency_ms,
        };
        let mut points = vec![point(&champion)];
        let mut labels = vec![format!("champion {champion_id}")];
        for c in &gated {
            points.push(point(&c.scores.clone().unwrap_or_default()));
            labels.push(c.version_id.to_string());
        }
        let dominated = dominated_by(&agent.learn.objective, &points);
        let now = now_ms();
        let (mut updates, mut events) = (Vec::new(), Vec::new());
        for (i, c) in gated.iter().enumerate() {
            let (status, reason) = match dominated[i + 1] {
                Some(j) => (
                    CandidateStatus::Pruned,
                    format!(
                        "dominated by {} (reward {:.3} vs {:.3}, cost ${:.6} vs ${:.6})",
                        labels[j],
                        points[j].reward,
                        points[i + 1].reward,
                        points[j].cost,
                        points[i + 1].cost
                    ),
                ),
                None => (CandidateStatus::OnFront, "on the Pareto front".to_owned()),
            };
            self.say(name, &format!("{}: {reason}", c.version_id));
            events.push(
                HistoryEvent::new(name, now, "front", format!("{}: {reason}", c.version_id))
                    .version(&c.version_id)
                    .cycle(&cycle.id),
            );
            updates.push(CandidateUpdate {
                cycle_id: cycle.id.clone(),
                version_id: c.version_id.clone(),
                status,
                reason: Some(reason),
                scores: None,
            });
        }
        self.store
            .update_candidates(&updates, &events, now)
            .map_err(|e| e.to_string())?;
        Ok(Stepped {
            to: CycleState::Deploy,
            detail,
            events: Vec::new(),
        })
    }

    async fn deploy(&self, agent: &AgentConfig, cycle: &CycleInfo, mut detail: Value) -> Result<Stepped, String> {
        let name = agent.name.as_str();
        let champion: CandidateScores =
            serde_json::from_value(detail["champion_scores"].clone()).map_err(|e| format!("champion scores: {e}"))?;
        let front: Vec<Candidate> = self
            .store
            .candidates(name, Some(&cycle.id))
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|c| c.status == CandidateStatus::OnFront)
            .collect();
        let now = now_ms();
        let mut events = Vec::new();
        match &agent.deployment.policy {
            DeploymentPolicy::Manual => {
                for c in &front {
                    let line = format!("{} awaits approval: hone approve {}", c.version_id, c.version_id);
                    self.say(name, &line);
                    events.push(
                        HistoryEvent::new(name, now, "deploy", line)
                            .version(&c.version_id)
                            .cycle(&cycle.id),
                    );
                }
                detail["decision"] = json!(format!("manual: {} candidate(s) await approval", front.len()));
            }
            DeploymentPolicy::Auto {
                min_gain,
                max_cost_ratio,
            } => {
                let base_reward = champion.target_mean.unwrap_or(0.0);
                let mut eligible: Vec<(&Candidate, f64, f64)> = Vec::new();
                for c in &front {
                    let s = c.scores.clone().unwrap_or_default();
                    let gain = s.target_mean.unwrap_or(f64::MIN) - base_reward;
                    let ratio = if champion.mean_cost_usd > 0.0 {
                        s.mean_cost_usd / champion.mean_cost_usd
                    } else if s.mean_cost_usd > 0.0 {
                        f64::INFINITY
                    } else {
                        1.0
                    };
                    if gain + 1e-12 >= *min_gain && ratio <= *max_cost_ratio {
                        eligible.push((c, gain, ratio));
                    } else {
                        let line = format!(
                            "{} not auto-deployed: gain {gain:+.3} (min {min_gain}), cost ratio {ratio:.2} (max {max_cost_ratio})",
                            c.version_id
                        );
                        self.say(name, &line);
                        events.push(
                            HistoryEvent::new(name, now, "deploy", line)
                                .version(&c.version_id)
                                .cycle(&cycle.id),
                        );
                    }
                }
                eligible.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.total_cmp(&b.2)));
                match eligible.first() {
                    Some((c, gain, ratio)) => {
                        let rule = format!(
                            "auto rule (gain {gain:+.3} ≥ {min_gain}, cost ratio {ratio:.2} ≤ {max_cost_ratio})"
                        );
                        let change = deploy::start_canary(&self.config, self.store.as_ref(), agent, c, &rule).await?;
                        let line = match &change {
                            Change::Applied(s) | Change::AlreadyDone(s) | Change::Refused(s) => s.clone(),
                        };
                        self.say(name, &line);
                        detail["decision"] = json!(line);
                    }
                    None => detail["decision"] = json!("auto: no candidate met the rule"),
                }
            }
        }
        Ok(Stepped {
            to: CycleState::Done,
            detail,
            events,
        })
    }
}
