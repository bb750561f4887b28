//! Rewards: one scalar per episode (and per call where credit can be
//! assigned) from the agent's [`RewardSpec`]: weighted signals (defaults for
//! missing feedback), critics, a judge, and penalties that are never skipped.
//!
//! `value = Σ weight·value over signals, critics and the judge` (1 when the
//! spec weighs nothing, so a clean episode passes), `+ Σ penalties` for every
//! behaviour the episode showed. A critic or judge that could not score is
//! listed in `failures` and left out, never counted as a score.

use crate::episode::reference_from_signals;
use crate::error::LearnError;
use crate::scoring::critics::{self, Critic, CriticInput};
use crate::scoring::judge::{Judge, JudgeScore};
use hone_config::{Aggregate, JudgeMode, RewardSpec};
use hone_store::{LearnStore, StoreError};
use hone_types::openai::{task_of, Choice};
use hone_types::{
    CallCredit, CallId, CallOutcome, ComponentKind, EpisodeDetail, EpisodeId, EpisodeQuery, RewardComponent,
    RewardRecord, ShadowScores, SignalValue,
};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A reward spec made ready to score: critics built, judge attached, and
/// a reward model standing in for users where one is usable.
pub struct Rewarder {
    pub agent: String,
    pub spec: RewardSpec,
    pub spec_version: String,
    critics: Vec<(f64, Box<dyn Critic>)>,
    judge: Option<Judge>,
    /// Predicts the users' part of the reward for an answer no user saw
    /// (an evaluation run, a rollout, a shadow sample).
    pub stand_in: Option<Arc<crate::scoring::reward_model::StandIn>>,
}

/// What the judge said about one episode (computed before scoring, since it is async).
pub type JudgeVerdicts = HashMap<EpisodeId, Result<JudgeScore, String>>;

fn aggregate(how: Aggregate, values: &[f64]) -> Option<f64> {
    let (first, last) = (values.first()?, values.last()?);
    Some(match how {
        Aggregate::Mean => values.iter().sum::<f64>() / values.len() as f64,
        Aggregate::Min => values.iter().copied().fold(*first, f64::min),
        Aggregate::Max => values.iter().copied().fold(*first, f64::max),
        Aggregate::Sum => values.iter().sum(),
        Aggregate::Last => *last,
    })
}

fn numeric(value: &SignalValue) -> Option<f64> {
    match value {
        SignalValue::Boolean(b) => Some(if *b { 1.0 } else { 0.0 }),
        SignalValue::Float(f) => Some(*f),
        SignalValue::Text(_) | SignalValue::Demonstration(_) => None,
    }
}

impl Rewarder {
    /// `client` is needed only when the spec has a judge.
    pub fn new(
        agent: &str,
        spec: &RewardSpec,
        client: Option<Arc<dyn crate::client::ChatClient>>,
    ) -> Result<Self, LearnError> {
        let critics = spec
            .critics
            .iter()
            .map(|c| Ok((c.weight, critics::from_spec(c).map_err(LearnError::Config)?)))
            .collect::<Result<Vec<_>, LearnError>>()?;
        let judge = match (&spec.judge, client) {
            (None, _) => None,
            (Some(j), Some(client)) => Some(Judge {
                spec: j.clone(),
                agent: agent.to_owned(),
                client,
            }),
            (Some(_), None) => {
                return Err(LearnError::config(format!(
                    "agent `{agent}`'s reward has a judge and no gateway to call it through"
                )))
            }
        };
        Ok(Self {
            agent: agent.to_owned(),
            spec_version: spec.version(),
            spec: spec.clone(),
            critics,
            judge,
            stand_in: None,
        })
    }

    /// With `stand_in` predicting the users' signals for answers no user saw.
    pub fn with_stand_in(mut self, stand_in: Option<Arc<crate::scoring::reward_model::StandIn>>) -> Self {
        self.stand_in = stand_in;
        self
    }

    pub fn has_judge(&self) -> bool {
        self.judge.is_some()
    }

    /// Runs the judge over episodes: absolute mode one by one; relative mode
    /// over groups of episodes with the same task (a group of one has no
    /// one to be compared with and gets no judge score).
    ///
    /// Where a reward model read by the judge stands in for users, the
    /// episodes it will be asked about (no user saw them, none of the
    /// spec's signals came) are judged for it too.
    pub async fn judge(&self, episodes: &[EpisodeDetail]) -> JudgeVerdicts {
        let verdicts = self.spec_judge(episodes).await;
        if let Some(stand_in) = &self.stand_in {
            let unheard: Vec<&EpisodeDetail> = episodes
                .iter()
                .filter(|e| !self.heard(e) && (e.summary.id.is_evaluation() || is_shadow_variant(e)))
                .collect();
            // The spec's judge already asked the same question where it is
            // absolute and reads the same rubric.
            let same = self.judge.as_ref().is_some_and(|j| {
                j.spec.mode == JudgeMode::Absolute && stand_in.rubric() == Some(j.spec.rubric.as_str())
            });
            let known = |id: &EpisodeId| {
                same.then(|| verdicts.get(id).and_then(|v| v.as_ref().ok()).map(|v| v.score))
                    .flatten()
            };
            stand_in.prepare(&unheard, &known).await;
        }
        verdicts
    }

    /// The spec's LLM judge, when it has one.
    pub fn llm_judge(&self) -> Option<&Judge> {
        self.judge.as_ref()
    }

    /// Whether any signal the spec weighs came for `episode`.
    fn heard(&self, episode: &EpisodeDetail) -> bool {
        self.spec
            .signals
            .iter()
            .any(|s| episode.signals.iter().any(|x| x.name == s.name))
    }

    async fn spec_judge(&self, episodes: &[EpisodeDetail]) -> JudgeVerdicts {
        let mut verdicts = JudgeVerdicts::new();
        let Some(judge) = &self.judge else {
            return verdicts;
        };
        match judge.spec.mode {
            JudgeMode::Absolute => {
                for e in episodes {
                    let v = judge.absolute(e).await.map_err(|f| f.to_string());
                    verdicts.insert(e.summary.id.clone(), v);
                }
            }
            JudgeMode::Relative => {
                let mut groups: BTreeMap<String, Vec<&EpisodeDetail>> = BTreeMap::new();
                for e in episodes {
                    if let Some(c) = e.calls.first() {
                        groups.entry(task_of(&c.request.messages)).or_default().push(e);
                    }
                }
                for group in groups.values().filter(|g| g.len() > 1) {
                    match judge.relative(group).await {
                        Ok(scores) => {
                            for (e, s) in group.iter().zip(scores) {
                                verdicts.insert(e.summary.id.clone(), Ok(s));
                            }
                        }
                        Err(f) => {
                            for e in group {
                                verdicts.insert(e.summary.id.clone(), Err(f.to_string()));
                            }
                        }
                    }
                }
            }
        }
        verdicts
    }

    /// Scores one episode. `reference` overrides the spec's reference signal
    /// (a dataset label during evaluation). An evaluation episode (no user
    /// saw it) gets the reward model's prediction of the users' signals,
    /// when one stands in.
    pub fn score(
        &self,
        episode: &EpisodeDetail,
        reference: Option<&Value>,
        verdict: Option<&Result<JudgeScore, String>>,
        now: i64,
    ) -> RewardRecord {
        self.score_seen(episode, reference, verdict, now, !episode.summary.id.is_evaluation())
    }

    /// [`Rewarder::score`], saying whether a user saw the answer.
    fn score_seen(
        &self,
        episode: &EpisodeDetail,
        reference: Option<&Value>,
        verdict: Option<&Result<JudgeScore, String>>,
        now: i64,
        seen: bool,
    ) -> RewardRecord {
        let spec = &self.spec;
        let own_reference = reference_from_signals(episode, spec.reference_signal.as_deref());
        let reference = reference.or(own_reference.as_ref());
        let mut components = Vec::new();
        let mut failures = Vec::new();
        let mut per_call: HashMap<CallId, f64> = HashMap::new();

        for s in &spec.signals {
            let matching: Vec<_> = episode.signals.iter().filter(|x| x.name == s.name).collect();
            let call_level: Vec<(CallId, f64)> = matching
                .iter()
                .filter_map(|x| Some((x.call_id?, numeric(&x.value)?)))
                .collect();
            let episode_level = matching
                .iter()
                .rev()
                .find(|x| x.call_id.is_none())
                .and_then(|x| numeric(&x.value));
            let values: Vec<f64> = call_level.iter().map(|(_, v)| *v).collect();
            for (call, v) in &call_level {
                *per_call.entry(*call).or_default() += s.weight * v;
            }
            let (value, defaulted) = match episode_level.or_else(|| aggregate(spec.aggregate, &values)) {
                Some(v) => (v, false),
                None => (s.default, true),
            };
            components.push(RewardComponent {
                name: s.name.clone(),
                kind: ComponentKind::Signal,
                value,
                weight: s.weight,
                defaulted,
                reason: None,
            });
        }

        // No user saw this answer and none reacted: the reward model, where
        // one stands in, predicts what the users' signals would have made.
        let unheard = components.iter().all(|c| c.defaulted);
        if let (false, true, Some(stand_in)) = (seen, unheard && !components.is_empty(), &self.stand_in) {
            if let Some(predicted) = stand_in.predict(episode) {
                components.clear();
                components.push(RewardComponent {
                    name: "reward_model".to_owned(),
                    kind: ComponentKind::Model,
                    value: predicted,
                    weight: 1.0,
                    defaulted: false,
                    reason: Some(format!(
                        "the users' signals predicted by the reward model (held-out AUC {})",
                        stand_in.quality.auc.map_or("-".to_owned(), |a| format!("{a:.3}"))
                    )),
                });
            }
        }

        for (weight, critic) in &self.critics {
            match critic.score(CriticInput { episode, reference }) {
                Ok(score) => {
                    for (call, v) in &score.per_call {
                        *per_call.entry(*call).or_default() += weight * v;
                    }
                    let values: Vec<f64> = score.per_call.iter().map(|(_, v)| *v).collect();
                    let value = if values.is_empty() {
                        score.score
                    } else {
                        aggregate(spec.aggregate, &values).unwrap_or(score.score)
                    };
                    components.push(RewardComponent {
                        name: critic.name().to_owned(),
                        kind: ComponentKind::Critic,
                        value,
                        weight: *weight,
                        defaulted: false,
                        reason: score.reason,
                    });
                }
                Err(f) => failures.push(format!("critic {}: {f}", critic.name())),
            }
        }

        if let Some(judge) = &spec.judge {
            match verdict {
                Some(Ok(v)) => components.push(RewardComponent {
                    name: "judge".to_owned(),
                    kind: ComponentKind::Judge,
                    value: v.score,
                    weight: judge.weight,
                    defaulted: false,
                    reason: Some(v.explanation.clone()),
                }),
                Some(Err(e)) => failures.push(format!("judge: {e}")),
                None => {}
            }
        }

        let weighs_something = !spec.signals.is_empty() || !spec.critics.is_empty() || spec.judge.is_some();
        let mut value = if weighs_something {
            components.iter().map(|c| c.weight * c.value).sum()
        } else {
            1.0
        };

        // Penalties: every behaviour earns its penalty, on the episode and on the call that showed it.
        let p = &spec.penalties;
        let mut penalised: BTreeMap<&str, (f64, Vec<CallId>)> = BTreeMap::new();
        for call in &episode.calls {
            let f = call.flags;
            let offered_tools = call.request.tools.as_ref().is_some_and(|t| !t.is_empty());
            let kinds = [
                ("invalid_tool_call", f.invalid_tool_call, p.invalid_tool_call),
                ("empty", f.empty && call.outcome == CallOutcome::Ok, p.empty),
                ("refusal", f.refusal, p.refusal),
                (
                    "clarifying_question",
                    f.clarifying_question && (offered_tools || !p.clarifying_question_only_with_tools),
                    p.clarifying_question,
                ),
                ("truncated", f.truncated, p.truncated),
                ("error", call.outcome == CallOutcome::UpstreamError, p.error),
            ];
            for (name, shown, amount) in kinds {
                if shown && amount != 0.0 {
                    penalised.entry(name).or_insert((amount, Vec::new())).1.push(call.id);
                    *per_call.entry(call.id).or_default() += amount;
                }
            }
        }
        for (name, (amount, calls)) in penalised {
            value += amount;
            components.push(RewardComponent {
                name: name.to_owned(),
                kind: ComponentKind::Penalty,
                value: 1.0,
                weight: amount,
                defaulted: false,
                reason: Some(format!("{} of {} calls", calls.len(), episode.calls.len())),
            });
        }

        let calls = episode
            .calls
            .iter()
            .map(|c| match per_call.get(&c.id) {
                Some(v) => CallCredit {
                    call_id: c.id,
                    value: *v,
                    assigned: true,
                },
                None => CallCredit {
                    call_id: c.id,
                    value,
                    assigned: false,
                },
            })
            .collect();
        RewardRecord {
            episode_id: episode.summary.id.clone(),
            agent: self.agent.clone(),
            spec_version: self.spec_version.clone(),
            value,
            passed: value >= spec.pass_threshold,
            components,
            calls,
            failures,
            computed_at: now,
            signals_seen: u32::try_from(episode.signals.len()).unwrap_or(u32::MAX),
            shadows: Vec::new(),
        }
    }
}

impl Rewarder {
    /// Every call's shadow group scored alike: the served answer and each
    /// shadow sample as the end of the episode so far (later calls cut,
    /// behaviour flags of that answer, no user signal: no user saw the
    /// samples), by the critics and penalties, and by the judge — in
    /// relative mode one RULER ranking over the whole group, served answer
    /// included. Empty when no call has shadow samples.
    pub async fn shadow_scores(
        &self,
        episode: &EpisodeDetail,
        reference: Option<&Value>,
        now: i64,
    ) -> Vec<ShadowScores> {
        let mut out = Vec::new();
        for (k, call) in episode.calls.iter().enumerate() {
            let Some(served) = call.response.as_ref().and_then(|r| r.choices.first()) else {
                continue;
            };
            if call.shadow.is_empty() {
                continue;
            }
            let variants: Vec<EpisodeDetail> = std::iter::once(served)
                .chain(&call.shadow)
                .enumerate()
                .filter_map(|(i, choice)| shadow_variant(episode, k, choice, i))
                .collect();
            let verdicts = self.judge(&variants).await;
            // No user saw a shadow sample (the served answer is scored
            // alike, so the group compares like with like).
            let values = variants
                .iter()
                .map(|v| {
                    self.score_seen(v, reference, verdicts.get(&v.summary.id), now, false)
                        .value
                })
                .collect();
            out.push(ShadowScores {
                call_id: call.id,
                values,
            });
        }
        out
    }
}

/// What a shadow variant's id carries after its episode's id.
const SHADOW_MARK: &str = ".shadow-";

/// Whether `episode` is a shadow variant (see [`shadow_variant`]).
fn is_shadow_variant(episode: &EpisodeDetail) -> bool {
    episode.summary.id.as_str().contains(SHADOW_MARK)
}

/// The episode as it would be had call `k` answered `choice` (alternative
/// `i`) and ended there, with no user signal.
fn shadow_variant(episode: &EpisodeDetail, k: usize, choice: &Choice, i: usize) -> Option<EpisodeDetail> {
    let mut v = episode.clone();
    v.calls.truncate(k + 1);
    v.signals.clear();
    v.summary.id = EpisodeId::parse_stored(&format!("{}{SHADOW_MARK}{k}-{i}", episode.summary.id)).ok()?;
    v.summary.call_count = v.calls.len() as u64;
    let call = v.calls.last_mut()?;
    call.shadow.clear();
    let response = call.response.as_mut()?;
    response.choices = vec![Choice {
        index: 0,
        ..choice.clone()
    }];
    call.flags = hone_types::behaviour::flags(&call.request, response);
    Some(v)
}

/// Production episodes' rewards: the judge over the batch (a relative
/// judge groups within it), then each episode, its shadow groups included.
async fn score_all(rewarder: &Rewarder, episodes: &[EpisodeDetail], now: i64) -> Vec<RewardRecord> {
    let verdicts = rewarder.judge(episodes).await;
    let mut rewards = Vec::with_capacity(episodes.len());
    for e in episodes {
        let mut record = rewarder.score(e, None, verdicts.get(&e.summary.id), now);
        record.shadows = rewarder.shadow_scores(e, None, now).await;
        rewards.push(record);
    }
    rewards
}

/// What `hone rewards recompute` did.
#[derive(Debug, Clone, PartialEq)]
pub struct RecomputeReport {
    pub spec_version: String,
    pub episodes: u64,
    pub passed: u64,
    pub mean: Option<f64>,
    pub failures: u64,
}

/// Recomputes the reward of every recorded episode of the agent (evaluation
/// episodes excluded) under the current spec, page by page.
pub async fn recompute(
    store: &dyn LearnStore,
    rewarder: &Rewarder,
    now: i64,
    progress: &mut dyn FnMut(u64),
) -> Result<RecomputeReport, StoreError> {
    let mut report = RecomputeReport {
        spec_version: rewarder.spec_version.clone(),
        episodes: 0,
        passed: 0,
        mean: None,
        failures: 0,
    };
    let mut sum = 0.0;
    let mut cursor = None;
    loop {
        let page = store.episodes(&EpisodeQuery {
            agents: Some(vec![rewarder.agent.clone()]),
            limit: 500,
            cursor,
            ..EpisodeQuery::default()
        })?;
        let episodes: Vec<EpisodeDetail> = page
            .episodes
            .into_iter()
            .filter(|e| !e.summary.id.is_evaluation())
            .collect();
        let rewards = score_all(rewarder, &episodes, now).await;
        store.put_rewards(&rewards)?;
        for r in &rewards {
            report.episodes += 1;
            report.passed += u64::from(r.passed);
            report.failures += u64::from(!r.failures.is_empty());
            sum += r.value;
        }
        progress(report.episodes);
        match page.next_cursor.and_then(|c| c.parse().ok()) {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    report.mean = (report.episodes > 0).then(|| sum / report.episodes as f64);
    Ok(report)
}

/// Scores the agent's episodes started in `[since, until)` that have no
/// reward under the current spec yet, or a stale one (a signal arrived after
/// it: late feedback), evaluation episodes excluded, in
/// batches of 200 (a relative judge groups within a batch). Returns how many
/// were scored.
pub async fn reward_pending(
    store: &dyn LearnStore,
    rewarder: &Rewarder,
    since: Option<i64>,
    until: Option<i64>,
    now: i64,
) -> Result<u64, StoreError> {
    let mut pending = Vec::new();
    store.scan_episodes(
        &hone_store::EpisodeFilter {
            agent: rewarder.agent.clone(),
            since,
            until,
            spec_version: Some(rewarder.spec_version.clone()),
            ..hone_store::EpisodeFilter::default()
        },
        &mut |facts| {
            if facts.reward.is_none() || facts.reward_stale {
                pending.push(facts.id);
            }
            Ok(())
        },
    )?;
    let mut scored = 0;
    for batch in pending.chunks(200) {
        let mut episodes = Vec::with_capacity(batch.len());
        for id in batch {
            if let Some(e) = store.episode(id)? {
                episodes.push(e);
            }
        }
        let rewards = score_all(rewarder, &episodes, now).await;
        store.put_rewards(&rewards)?;
        scored += rewards.len() as u64;
    }
    Ok(scored)
}
