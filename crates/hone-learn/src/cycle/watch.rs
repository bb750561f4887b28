//! Watching a canary: score its new episodes, run the monitors against the
//! champion's episodes of the same period, and then alert (log, store,
//! webhook) and roll back, promote it after enough quiet episodes, or wait.
//! The promotion rule itself is [`Online::of`].

use super::Learner;
use crate::error::{LearnError, Result};
use crate::release::deploy::{self, Change};
use crate::release::monitor::check;
use crate::scoring::reward::reward_pending;
use crate::stats::{mean, mean_greater_p, mixture_sprt, AlwaysValid};
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
    let window = |v| {
        learner
            .store
            .version_window(name, v, since, &rewarder.spec_version, spec.window)
    };
    let (c, h) = (window(&canary)?, window(&deployment.champion)?);
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
    let number = canary_number(&learner.store.history(name, 5_000)?);
    let online = Online::of_windows(&agent.deployment, spec.confidence, number, &c, &h);
    let n = online.canary_episodes as u64;
    let change = match online.call {
        Call::Wait => return Ok(Verdict::Waiting(n)),
        Call::Promote => deploy::promote(learner.store.as_ref(), agent, online.evidence(), &online.summary())?,
        Call::RollBack => deploy::rollback(learner.store.as_ref(), agent, &online.why(), None)?,
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
    /// The canary has the `canary_episodes` rewarded episodes a decision needs.
    pub enough: bool,
    /// The champion is shown better (`p_champion_better` below 1 − confidence,
    /// or the sequential test's interval below zero).
    pub shown_worse: bool,
    /// Under `promotion = "sequential"`: the always-valid test of the
    /// canary's reward less the champion's, over every look so far.
    pub sequential: Option<AlwaysValid>,
    /// Under `promotion = "sequential"`: the level this canary's promotion
    /// is tested at (its interval is at that level).
    pub promotion_level: Option<f64>,
    pub call: Call,
}

/// The level the k-th canary since the last promotion (k from 1) is
/// promoted at: α / (k (k + 1)), which sums to α over every k.
pub fn promotion_alpha(alpha: f64, canary_number: usize) -> f64 {
    let k = canary_number.max(1) as f64;
    alpha / (k * (k + 1.0))
}

/// The current canary's place among the agent's canaries since its last
/// promotion (from 1), read from its history (oldest first, as the store
/// returns it).
pub fn canary_number(history: &[HistoryEvent]) -> usize {
    history
        .iter()
        .rev()
        .take_while(|e| e.kind != "promote")
        .filter(|e| e.kind == "canary")
        .count()
        .max(1)
}

/// Rewarded episodes each side needs before the sequential test looks:
/// its variances are estimated from the episodes themselves.
pub const SEQUENTIAL_MIN_EACH: usize = 10;

impl Online {
    /// Every rule of promotion, in one place. Under the fixed-horizon rules
    /// nothing is decided before `canary_episodes` rewarded canary episodes;
    /// a canary the champion is shown to beat (at the monitors'
    /// `confidence`) is rolled back; otherwise, by default, it is promoted;
    /// with `promote_margin` it is promoted only once shown to be at most
    /// the margin below the champion, and rolled back if not shown so by
    /// `canary_max_episodes`. Under `promotion = "sequential"` users decide
    /// at any look: an always-valid test ([`mixture_sprt`]) promotes a
    /// canary shown better, rolls back one shown worse, and rolls back one
    /// not shown better by `canary_max_episodes`. Rewards are
    /// `(started_at, reward)`.
    ///
    /// `canary_number` is the canary's place among the agent's canaries
    /// since its last promotion (from 1, [`canary_number`]): the sequential
    /// rule promotes the k-th at level α / (k (k + 1)), so that over every
    /// canary until the next promotion the chance of promoting one users
    /// cannot tell from the champion stays within α ([`promotion_alpha`]).
    /// Rolling back keeps α: it is the safe direction.
    pub fn of(
        deployment: &DeploymentConfig,
        confidence: f64,
        canary_number: usize,
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
        let mut promotion_level = None;
        let (enough, shown_worse, sequential, call) = match deployment.promotion {
            PromotionRule::Sequential {
                max_episodes,
                expected_gain,
            } => {
                let test = mixture_sprt(champion, canary, expected_gain, alpha, SEQUENTIAL_MIN_EACH);
                let level = promotion_alpha(alpha, canary_number);
                let promotion = mixture_sprt(champion, canary, expected_gain, level, SEQUENTIAL_MIN_EACH);
                let call = if test.shown_less() {
                    Call::RollBack
                } else if promotion.shown_greater() {
                    Call::Promote
                } else if n >= max_episodes {
                    Call::RollBack
                } else {
                    Call::Wait
                };
                promotion_level = Some(level);
                (test.looks > 0, test.shown_less(), Some(promotion), call)
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
            promotion_level,
            call,
        }
    }

    /// [`Online::of`] on the rewarded episodes of the canary's and the
    /// champion's monitor windows.
    pub fn of_windows(
        deployment: &DeploymentConfig,
        confidence: f64,
        canary_number: usize,
        canary: &[hone_store::WindowEpisode],
        champion: &[hone_store::WindowEpisode],
    ) -> Self {
        let rewarded = |w: &[hone_store::WindowEpisode]| -> Vec<(i64, f64)> {
            w.iter().filter_map(|e| Some((e.started_at, e.reward?))).collect()
        };
        Self::of(
            deployment,
            confidence,
            canary_number,
            &rewarded(canary),
            &rewarded(champion),
        )
    }

    fn evidence(&self) -> serde_json::Value {
        json!({"canary_mean": self.canary_mean, "champion_mean": self.champion_mean,
            "canary_episodes": self.canary_episodes, "champion_episodes": self.champion_episodes,
            "p_champion_better": self.p_champion_better, "p_within_margin": self.p_within_margin,
            "promote_margin": self.margin, "sequential": self.sequential})
    }

    /// `online reward 0.412 over 50 episodes vs champion 0.398 over 117
    /// (p that the canary is worse = 0.412)`, with the margin's test when
    /// there is one.
    pub fn summary(&self) -> String {
        let shown = |m: Option<f64>| m.map_or("-".into(), |m| format!("{m:.3}"));
        let mut line = format!(
            "online reward {} over {} episodes vs champion {} over {} (p that the canary is worse = {:.3})",
            shown(self.canary_mean),
            self.canary_episodes,
            shown(self.champion_mean),
            self.champion_episodes,
            self.p_champion_better
        );
        if let (Some(margin), Some(p)) = (self.margin, self.p_within_margin) {
            line.push_str(&format!("; within {margin} of the champion: p = {p:.3}"));
        }
        if let Some(test) = &self.sequential {
            let level = self
                .promotion_level
                .map_or(String::new(), |l| format!(" (promoted at p ≤ {l:.4})"));
            line = format!(
                "online reward {} over {} episodes vs champion {} over {}; sequential test after {} looks: difference {}, always-valid p = {:.4}{level}, interval {}",
                shown(self.canary_mean),
                self.canary_episodes,
                shown(self.champion_mean),
                self.champion_episodes,
                test.looks,
                test.difference.map_or("-".into(), |d| format!("{d:+.3}")),
                test.p,
                test.interval
                    .map_or("-".into(), |(low, high)| format!("[{low:+.3}, {high:+.3}]")),
            );
        }
        line
    }

    /// Why a rolled-back canary was rolled back.
    fn why(&self) -> String {
        if self.sequential.is_some() && !self.shown_worse {
            return format!(
                "not shown better by users after {} episodes: {}",
                self.canary_episodes,
                self.summary()
            );
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
