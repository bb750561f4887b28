//! Watching a canary: score its new episodes, run the monitors against the
//! champion's episodes of the same period, and then alert (log, store,
//! webhook) and roll back, promote it, or wait — and, under the sequential
//! rule, give it the share of traffic its evidence allows. The promotion
//! rule itself is [`Online::of`]; what it reads, [`read`].

use super::Learner;
use crate::error::{LearnError, Result};
use crate::release::deploy::{self, Change};
use crate::release::monitor::check;
use crate::scoring::reward::reward_pending;
use crate::scoring::settled::counted;
use crate::stats::betting::{compare, merged, Comparison};
use crate::stats::online_fdr::e_lond_level;
use crate::stats::{mean, mean_greater_p};
use hone_config::{AgentConfig, DeploymentConfig, PromotionRule};
use hone_types::time::now_ms;
use hone_types::{Alert, AlertAction, Deployment, EpisodeDetail, Firing, HistoryEvent};
use serde_json::json;

/// What a look at the canary decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    NoCanary,
    /// Still collecting: canary episodes with rewards so far.
    Waiting(u64),
    Promoted(String),
    RolledBack(String),
    /// A monitor fired and the policy does not roll back.
    Alerted(String),
}

fn alert_of(d: &Deployment, firing: &Firing, action: AlertAction) -> Option<Alert> {
    Some(Alert {
        id: 0,
        agent: d.agent.clone(),
        version_id: d.canary.clone()?,
        champion_id: d.champion.clone(),
        firing: firing.clone(),
        action,
        at: now_ms(),
    })
}

/// Scores the canary's new episodes, runs the monitors, and alerts, rolls
/// back, promotes or waits.
pub async fn watch(learner: &Learner, agent: &AgentConfig) -> Result<Verdict> {
    let name = agent.name.as_str();
    let (deployment, _) = deploy::current(learner.store.as_ref(), agent)?;
    let (Some(canary), Some(since)) = (deployment.canary.clone(), deployment.canary_since) else {
        return Ok(Verdict::NoCanary);
    };
    learner.flush_recorder().await;
    let rewarder = learner.rewarder(agent)?;
    reward_pending(learner.store.as_ref(), &rewarder, Some(since), None, now_ms()).await?;
    let spec = &agent.learn.monitor;
    let Some(reading) = read(
        learner.store.as_ref(),
        agent,
        &deployment,
        &rewarder.spec_version,
        now_ms(),
    )?
    else {
        return Ok(Verdict::NoCanary);
    };
    let (c, h) = (
        Reading::newest(&reading.canary, spec.window),
        Reading::newest(&reading.champion, spec.window),
    );
    let predicted = crate::release::monitor::expected(learner.store.as_ref(), name, &canary)?;
    let mut firings = check(spec, &c, &h, predicted);
    // Where a reward model stands in for users offline, the canary is also
    // checked for having learned the model rather than the users.
    if let Some(stand_in) = learner.stand_in(agent) {
        let read = |w: &[hone_store::WindowEpisode]| -> Result<Vec<(EpisodeDetail, f64)>> {
            let mut out = Vec::new();
            for e in w {
                let (Some(episode), Some(reward)) = (
                    learner.store.episode(&e.id)?,
                    learner.store.reward(&e.id, &rewarder.spec_version)?,
                ) else {
                    continue;
                };
                if reward.signals_seen > 0 {
                    out.push((episode, crate::scoring::reward_model::users_part(&reward)));
                }
            }
            Ok(out)
        };
        let (c, h) = (read(&c)?, read(&h)?);
        let all: Vec<&EpisodeDetail> = c.iter().chain(&h).map(|(e, _)| e).collect();
        stand_in.prepare(&all, &|_| None).await;
        let predicted = |side: &[(EpisodeDetail, f64)]| -> Vec<(String, f64, f64)> {
            side.iter()
                .filter_map(|(e, users)| Some((e.summary.id.to_string(), stand_in.predict(e)?, *users)))
                .collect()
        };
        if let Some(reading) = crate::release::monitor::overoptimisation(spec, &predicted(&c), &predicted(&h)) {
            if reading.fires {
                firings.insert(0, reading.into());
            }
        }
    }
    if let Some(first) = firings.first() {
        let action = if spec.rollback {
            AlertAction::RolledBack
        } else {
            AlertAction::Alerted
        };
        let alert = alert_of(&deployment, first, action).ok_or_else(|| LearnError::state("no canary"))?;
        let line = format!(
            "ALERT {name}: {} of canary {canary} is {:.3} vs champion {} {:.3} over {} / {} episodes (p = {:.4}); episodes: {}",
            first.metric,
            first.canary_rate,
            deployment.champion,
            first.champion_rate,
            first.canary_episodes,
            first.champion_episodes,
            first.p_value,
            first.episodes.join(", ")
        );
        tracing::warn!(agent = name, version = %canary, metric = %first.metric, "{line}");
        learner.say(name, &line);
        if let Some(url) = &spec.webhook {
            notify(learner, url, &alert).await;
        }
        if spec.rollback {
            let why = match first.metric.as_str() {
                "overoptimisation" => format!(
                    "overoptimised (Goodhart): the reward model rates the canary above the champion, but its users' reward less the model's prediction is {:+.3} against {:+.3} for the champion's users (p = {:.4})",
                    first.canary_rate, first.champion_rate, first.p_value
                ),
                metric => format!("monitor `{metric}` fired"),
            };
            let change = deploy::rollback(learner.store.as_ref(), agent, &why, Some(&alert))?;
            return Ok(match change {
                Change::Applied(s) => Verdict::RolledBack(s),
                Change::AlreadyDone(s) | Change::Refused(s) => Verdict::Alerted(s),
            });
        }
        let seen = learner
            .store
            .alerts(Some(name), 100)?
            .iter()
            .any(|a| a.version_id == canary && a.firing.metric == first.metric && a.at >= since);
        if !seen {
            let (d, revision) = deploy::current(learner.store.as_ref(), agent)?;
            let event = HistoryEvent::new(name, alert.at, "alert", &line).version(&canary);
            learner
                .store
                .change_deployment(&d, revision, &[], &[event], Some(&alert), alert.at)?;
        }
        return Ok(Verdict::Alerted(line));
    }
    let online = Online::of_windows(
        &agent.deployment,
        spec.confidence,
        &reading.context,
        &reading.canary,
        &reading.champion,
    );
    let n = online.canary_episodes as u64;
    let change = match online.call {
        Call::Wait => {
            if let Some(look) = &online.sequential {
                if let Change::Applied(line) =
                    deploy::set_share(learner.store.as_ref(), agent, &canary, look.share, &online.summary())?
                {
                    learner.say(name, &line);
                }
            }
            return Ok(Verdict::Waiting(n));
        }
        Call::Promote => deploy::promote(learner.store.as_ref(), agent, online.evidence(), &online.summary())?,
        Call::RollBack => deploy::rollback_with(learner.store.as_ref(), agent, &online.why(), None, online.evidence())?,
    };
    learner.say(name, &change.to_string());
    Ok(match change {
        Change::Applied(s) if online.call == Call::Promote => Verdict::Promoted(s),
        Change::Applied(s) => Verdict::RolledBack(s),
        Change::AlreadyDone(s) | Change::Refused(s) => Verdict::Alerted(s),
    })
}

/// What the deployment's promotion rule makes of a canary's online rewards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// Too few rewarded episodes yet, or (with a margin) not yet shown
    /// within it and not yet at the cap.
    Wait,
    Promote,
    RollBack,
}

/// Where a canary stands in the agent's sequence of canaries, and what its
/// test needs to know of the reward: the inputs of the sequential rule
/// that are not episodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Context {
    /// The range every reward lies in (the reward spec's).
    pub range: (f64, f64),
    /// This canary's place among every canary the agent ran (from 1).
    pub canary_number: u64,
    /// Promotions before this canary started.
    pub promotions_before: u64,
    /// The share of new episodes the canary started on.
    pub start_share: f64,
}

impl Context {
    /// The first canary of an agent with rewards in [0, 1], started on 10%.
    pub fn first(range: (f64, f64)) -> Self {
        Self {
            range,
            canary_number: 1,
            promotions_before: 0,
            start_share: 0.1,
        }
    }
}

/// The sequential rule's look at a canary (`promotion = "sequential"`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SequentialLook {
    /// The bets on the canary's rewards against the champion's.
    pub comparison: Comparison,
    /// The level this canary is promoted at: e-LOND's αₜ for its place in
    /// the sequence ([`e_lond_level`]).
    pub level: f64,
    /// The level it is rolled back at (shown worse, or short of the least
    /// gain): 1 − the monitors' confidence.
    pub rollback_level: f64,
    pub canary_number: u64,
    pub promotions_before: u64,
    /// The share of new episodes the evidence allows it now.
    pub share: f64,
}

impl std::fmt::Display for SequentialLook {
    /// `33 pairs, difference +0.735, interval [+0.040, +1.240]; evidence it
    /// is better 52.2 (promoted at 41, canary 1 of the sequence), that it is
    /// worse 1.0 (rolled back at 20); share 30%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.comparison;
        write!(
            f,
            "{} pairs, difference {}, interval {}; evidence it is better {:.1} (promoted at {:.0}, canary {} of the sequence), that it is worse {:.1} (rolled back at {:.0}); share {:.0}%",
            c.pairs,
            c.difference.map_or("-".into(), |d| format!("{d:+.3}")),
            c.interval
                .map_or("-".into(), |(low, high)| format!("[{low:+.3}, {high:+.3}]")),
            c.peak_wealth,
            1.0 / self.level,
            self.canary_number,
            c.peak_wealth_worse.max(c.peak_wealth_short),
            1.0 / self.rollback_level,
            self.share * 100.0
        )
    }
}

/// The canary's and the champion's online rewards of one look, the tests
/// on them and the call the promotion rule makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Online {
    pub canary_mean: Option<f64>,
    pub champion_mean: Option<f64>,
    pub canary_episodes: usize,
    pub champion_episodes: usize,
    /// One-sided Welch: the p-value that the champion's mean is above the
    /// canary's by chance alone (small: the champion is better).
    pub p_champion_better: f64,
    /// With a promotion margin: the p-value that the canary's mean is above
    /// the champion's less the margin by chance alone (small: the canary
    /// is shown within the margin).
    pub p_within_margin: Option<f64>,
    pub margin: Option<f64>,
    /// The canary has the episodes a decision needs (under the sequential
    /// rule: one pair of runs to bet on).
    pub enough: bool,
    /// The champion is shown better (`p_champion_better` below 1 −
    /// confidence, or the sequential test's bet on it won).
    pub shown_worse: bool,
    /// Under `promotion = "sequential"`: the test so far.
    pub sequential: Option<SequentialLook>,
    pub call: Call,
}

/// The share a sequential canary may have given the wealth of the bet that
/// it is better: its starting share times that wealth, between the
/// starting share and `max_share`. While the canary is no better than its
/// champion, the chance that its share ever reaches k times its start is at
/// most 1/k (Ville's inequality on the same wealth).
pub fn share_for(start: f64, max_share: f64, wealth: f64) -> f64 {
    (start * wealth.max(1.0)).clamp(start, max_share.max(start))
}

impl Online {
    /// Every rule of promotion, in one place. Under the fixed-horizon rules
    /// nothing is decided before `canary_episodes` rewarded canary episodes;
    /// a canary the champion is shown to beat (at the monitors'
    /// `confidence`) is rolled back; otherwise, by default, it is promoted;
    /// with `promote_margin` it is promoted only once shown to be at most
    /// the margin below the champion, and rolled back if not shown so by
    /// `canary_max_episodes`.
    ///
    /// Under `promotion = "sequential"` users decide at any look, by
    /// betting ([`crate::stats::betting`]): promoted once the bet that it is
    /// better reaches `1/αₜ`, αₜ its level in the agent's sequence of
    /// canaries (e-LOND: the rate of promotions of canaries no better than
    /// their champion stays within α = 1 − `confidence`); rolled back once
    /// the bet that it is worse, or not better by `least_gain`, reaches
    /// `1/α`, or at `canary_max_episodes`. Rolling back needs no level of
    /// its own: it is the safe direction. Rewards are `(started_at,
    /// reward)`, as counted ([`crate::scoring::settled`]).
    pub fn of(
        deployment: &DeploymentConfig,
        confidence: f64,
        context: &Context,
        canary: &[(i64, f64)],
        champion: &[(i64, f64)],
    ) -> Self {
        let alpha = 1.0 - confidence;
        let values = |side: &[(i64, f64)]| side.iter().map(|(_, r)| *r).collect::<Vec<f64>>();
        let (canary_values, champion_values) = (values(canary), values(champion));
        let p_champion_better = mean_greater_p(&canary_values, &champion_values);
        let margin = match deployment.promotion {
            PromotionRule::WithinMargin { margin, max_episodes } => Some((margin, max_episodes)),
            PromotionRule::NotShownWorse | PromotionRule::Sequential { .. } => None,
        };
        let p_within_margin = margin.map(|(m, _)| {
            let lowered: Vec<f64> = champion_values.iter().map(|r| r - m).collect();
            mean_greater_p(&lowered, &canary_values)
        });
        let n = canary.len();
        let (enough, shown_worse, sequential, call) = match deployment.promotion {
            PromotionRule::Sequential {
                max_episodes,
                least_gain,
                max_share,
            } => {
                let comparison = compare(merged(champion, canary), context.range, least_gain, alpha);
                let level = e_lond_level(alpha, context.canary_number, context.promotions_before);
                let worse = comparison.shown_worse(alpha);
                let call = if worse || comparison.shown_short(alpha) {
                    Call::RollBack
                } else if comparison.shown_better(level) {
                    Call::Promote
                } else if n >= max_episodes {
                    Call::RollBack
                } else {
                    Call::Wait
                };
                let look = SequentialLook {
                    comparison,
                    level,
                    rollback_level: alpha,
                    canary_number: context.canary_number,
                    promotions_before: context.promotions_before,
                    share: share_for(context.start_share, max_share, comparison.wealth),
                };
                (comparison.pairs > 0, worse, Some(look), call)
            }
            _ => {
                let enough = n >= deployment.canary_episodes;
                let shown_worse = p_champion_better < alpha;
                let call = if !enough {
                    Call::Wait
                } else if shown_worse {
                    Call::RollBack
                } else {
                    match (margin, p_within_margin) {
                        (Some(_), Some(p)) if p < alpha => Call::Promote,
                        (Some((_, max_episodes)), _) if n < max_episodes => Call::Wait,
                        (Some(_), _) => Call::RollBack,
                        (None, _) => Call::Promote,
                    }
                };
                (enough, shown_worse, None, call)
            }
        };
        Self {
            canary_mean: mean(&canary_values),
            champion_mean: mean(&champion_values),
            canary_episodes: n,
            champion_episodes: champion.len(),
            p_champion_better,
            p_within_margin,
            margin: margin.map(|(m, _)| m),
            enough,
            shown_worse,
            sequential,
            call,
        }
    }

    /// [`Online::of`] on counted windows ([`crate::scoring::settled::counted`]).
    pub fn of_windows(
        deployment: &DeploymentConfig,
        confidence: f64,
        context: &Context,
        canary: &[hone_store::WindowEpisode],
        champion: &[hone_store::WindowEpisode],
    ) -> Self {
        let rewarded = |w: &[hone_store::WindowEpisode]| -> Vec<(i64, f64)> {
            w.iter().filter_map(|e| Some((e.started_at, e.reward?))).collect()
        };
        Self::of(deployment, confidence, context, &rewarded(canary), &rewarded(champion))
    }

    fn evidence(&self) -> serde_json::Value {
        json!({"canary_mean": self.canary_mean, "champion_mean": self.champion_mean,
            "canary_episodes": self.canary_episodes, "champion_episodes": self.champion_episodes,
            "p_champion_better": self.p_champion_better, "p_within_margin": self.p_within_margin,
            "promote_margin": self.margin, "sequential": self.sequential})
    }

    /// `online reward 0.412 over 50 episodes vs champion 0.398 over 117
    /// (p that the canary is worse = 0.412)`, with the margin's test when
    /// there is one, or the sequential test's evidence.
    pub fn summary(&self) -> String {
        let shown = |m: Option<f64>| m.map_or("-".into(), |m| format!("{m:.3}"));
        let head = format!(
            "online reward {} over {} episodes vs champion {} over {}",
            shown(self.canary_mean),
            self.canary_episodes,
            shown(self.champion_mean),
            self.champion_episodes,
        );
        if let Some(look) = &self.sequential {
            return format!("{head}; {look}");
        }
        let mut line = format!("{head} (p that the canary is worse = {:.3})", self.p_champion_better);
        if let (Some(margin), Some(p)) = (self.margin, self.p_within_margin) {
            line.push_str(&format!("; within {margin} of the champion: p = {p:.3}"));
        }
        line
    }

    /// Why a rolled-back canary was rolled back.
    fn why(&self) -> String {
        if let Some(look) = &self.sequential {
            let c = &look.comparison;
            let reason = if self.shown_worse {
                "shown worse by users"
            } else if c.shown_short(look.rollback_level) {
                "shown by users not to beat the champion by the least gain worth shipping"
            } else {
                "not shown better by users within its episodes"
            };
            return format!("{reason} after {} episodes: {}", self.canary_episodes, self.summary());
        }
        match self.margin {
            Some(margin) if !self.shown_worse => format!(
                "not shown within {margin} of the champion after {} episodes: {}",
                self.canary_episodes,
                self.summary()
            ),
            _ => format!("worse online: {}", self.summary()),
        }
    }
}

/// The canary's place in the agent's sequence of canaries, read from its
/// whole history (oldest first): canaries started so far (this one the
/// last), and promotions before this one started.
pub fn sequence_of(history: &[HistoryEvent]) -> (u64, u64) {
    let canaries = history.iter().filter(|e| e.kind == "canary").count() as u64;
    let started = history
        .iter()
        .rposition(|e| e.kind == "canary")
        .unwrap_or(history.len());
    let promotions = history[..started].iter().filter(|e| e.kind == "promote").count() as u64;
    (canaries.max(1), promotions)
}

/// Events read to place a canary in its sequence: every one an agent has.
const WHOLE_HISTORY: usize = 10_000_000;

/// The online stage's inputs for the agent's running canary, read from the
/// store: the counted episodes of the canary and of the champion since it
/// started, oldest first (the monitors read the newest of them), and its
/// [`Context`].
pub struct Reading {
    pub canary: Vec<hone_store::WindowEpisode>,
    pub champion: Vec<hone_store::WindowEpisode>,
    pub context: Context,
}

/// Reads [`Reading`] at `now`; `spec_version` names the rewards to read.
/// `None` without a canary.
pub fn read(
    store: &dyn hone_store::CycleStore,
    agent: &AgentConfig,
    deployment: &Deployment,
    spec_version: &str,
    now: i64,
) -> Result<Option<Reading>> {
    let (Some(canary), Some(since)) = (deployment.canary.as_ref(), deployment.canary_since) else {
        return Ok(None);
    };
    let window = agent.learn.monitor.window;
    // The sequential test reads every canary episode up to its cap and
    // every champion episode of the same period: at the canary's starting
    // share, 1 / share champion episodes for each of its own.
    let (canary_limit, champion_limit) = match agent.deployment.promotion {
        PromotionRule::Sequential { max_episodes, .. } => {
            let per = (1.0 / agent.deployment.canary_share).ceil() as usize;
            let limit = (2 * max_episodes).max(window);
            (limit, limit * per)
        }
        _ => (window, window),
    };
    let c = store.version_window(&agent.name, canary, since, spec_version, canary_limit)?;
    let h = store.version_window(&agent.name, &deployment.champion, since, spec_version, champion_limit)?;
    let in_order = matches!(agent.deployment.promotion, PromotionRule::Sequential { .. });
    let (canary_counted, champion_counted) = counted(&agent.reward, now, in_order, &c, &h);
    let (canary_number, promotions_before) = sequence_of(&store.history(&agent.name, WHOLE_HISTORY)?);
    let gate_gain_low = deploy::candidate_of(store, &agent.name, canary)?
        .and_then(|c| c.scores)
        .and_then(|s| s.gate_gain)
        .map(|g| g.low);
    Ok(Some(Reading {
        canary: canary_counted,
        champion: champion_counted,
        context: Context {
            range: agent.reward.range(),
            canary_number,
            promotions_before,
            start_share: agent.deployment.canary_share_for(gate_gain_low).share,
        },
    }))
}

impl Reading {
    /// The newest `window` counted episodes of a side, newest first, as
    /// the monitors read them.
    pub fn newest(side: &[hone_store::WindowEpisode], window: usize) -> Vec<hone_store::WindowEpisode> {
        side.iter().rev().take(window).cloned().collect()
    }
}

/// The canary's offline cost and latency relative to the champion's in
/// the cycle that proposed it.
pub(crate) async fn notify(learner: &Learner, url: &str, alert: &Alert) {
    let sent = learner
        .gateway
        .http()
        .post(url)
        .json(&json!({"type": "hone.alert", "alert": alert}))
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => tracing::warn!(url, status = %r.status(), "alert webhook refused the alert"),
        Err(e) => tracing::warn!(url, error = %e, "alert webhook unreachable"),
    }
}
