//! Online monitors (docs/ARCHITECTURE.md, "Concepts"): a canary's reward, behaviour
//! rates, error rate, cost and latency over a sliding window of its recent
//! episodes, against the champion's over the same period (cost and latency
//! against the champion's scaled by what evaluation predicted). A change
//! fires only when it is both beyond its bound — a minimum effect size,
//! relative and/or absolute (`hone_config::Bound`) — and significant
//! (one-sided Fisher exact test for rates, Welch's t-test for means).
//!
//! [`overoptimisation`] watches the reward model itself: when it rates the
//! canary above the champion while the canary's users give it
//! significantly less than it predicted — less than the champion's users
//! fall short of its predictions — the canary has learned what the model
//! rewards, not what users want (Goodhart).

use crate::stats::{fisher_greater_p, mean, mean_greater_p};
use hone_config::{MonitorSpec, RATE_METRICS};
use hone_store::WindowEpisode;
use hone_types::Firing;

/// Reads one mean-type measure off an episode.
type Measure = fn(&WindowEpisode) -> Option<f64>;

fn values(window: &[WindowEpisode], f: impl Fn(&WindowEpisode) -> Option<f64>) -> Vec<f64> {
    window.iter().filter_map(f).collect()
}

/// What evaluation led us to expect of the canary relative to the champion:
/// a candidate approved at twice the cost should not alert for costing twice
/// as much, only for costing more than that.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expected {
    pub cost_ratio: f64,
    pub latency_ratio: f64,
}

impl Default for Expected {
    fn default() -> Self {
        Self {
            cost_ratio: 1.0,
            latency_ratio: 1.0,
        }
    }
}

/// One monitored measure of the canary against the champion right now.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub metric: String,
    pub canary: f64,
    pub champion: f64,
    pub canary_episodes: u64,
    pub champion_episodes: u64,
    /// The effect the change must exceed (towards worse).
    pub bound: hone_config::Bound,
    pub p_value: f64,
    /// Beyond the bound, significant, and over enough canary episodes.
    pub fires: bool,
    /// Canary episodes that show it (at most 10).
    pub episodes: Vec<String>,
}

impl From<Reading> for Firing {
    fn from(r: Reading) -> Self {
        Firing {
            metric: r.metric,
            canary_rate: r.canary,
            champion_rate: r.champion,
            canary_episodes: r.canary_episodes,
            champion_episodes: r.champion_episodes,
            p_value: r.p_value,
            episodes: r.episodes,
        }
    }
}

/// Every monitor that fires for the canary against the champion.
pub fn check(
    spec: &MonitorSpec,
    canary: &[WindowEpisode],
    champion: &[WindowEpisode],
    expected: Expected,
) -> Vec<Firing> {
    readings(spec, canary, champion, expected)
        .into_iter()
        .filter(|r| r.fires)
        .map(Firing::from)
        .collect()
}

/// Every monitored measure (each metric with a bound) of the canary
/// against the champion, firing or not: what `check` decides on, and what
/// the dashboard shows against each bound.
pub fn readings(
    spec: &MonitorSpec,
    canary: &[WindowEpisode],
    champion: &[WindowEpisode],
    expected: Expected,
) -> Vec<Reading> {
    let alpha = 1.0 - spec.confidence;
    let mut out = Vec::new();
    if canary.is_empty() || champion.is_empty() {
        return out;
    }
    let enough = canary.len() >= spec.min_episodes;
    let (nc, nh) = (canary.len() as u64, champion.len() as u64);
    for metric in RATE_METRICS {
        let Some(bound) = spec.bounds.get(metric) else { continue };
        let hits = |w: &[WindowEpisode]| w.iter().filter(|e| e.shows(metric) == Some(true)).count() as u64;
        let (hc, hh) = (hits(canary), hits(champion));
        let (rc, rh) = (hc as f64 / nc as f64, hh as f64 / nh as f64);
        // Fisher's exact test, not a z-test: these are rare events, and a
        // pooled z-test on one invalid call in 24 canary episodes against
        // none in 87 said p = 0.028 (Fisher: 0.22) and rolled back a
        // candidate three times better on reward.
        let (rise, p) = if metric == "tool_use" && rc < rh {
            (rh - rc, fisher_greater_p(nc - hc, nc, nh - hh, nh))
        } else {
            (rc - rh, fisher_greater_p(hc, nc, hh, nh))
        };
        out.push(Reading {
            metric: metric.to_owned(),
            canary: rc,
            champion: rh,
            canary_episodes: nc,
            champion_episodes: nh,
            bound: *bound,
            p_value: p,
            fires: enough && bound.exceeded_by(rh, rise) && p < alpha,
            episodes: canary
                .iter()
                .filter(|e| e.shows(metric) == Some(true))
                .take(10)
                .map(|e| e.id.to_string())
                .collect(),
        });
    }
    let means: [(&str, Measure); 4] = [
        ("reward", |e| e.reward),
        ("cost", |e| Some(e.cost_usd)),
        ("latency", |e| Some(e.latency_ms)),
        ("mean_length", |e| Some(e.answer_chars)),
    ];
    for (metric, get) in means {
        let Some(bound) = spec.bounds.get(metric) else { continue };
        let (c, h) = (values(canary, get), values(champion, get));
        let (Some(mc), Some(mh)) = (mean(&c), mean(&h)) else {
            continue;
        };
        let (beyond, p) = match metric {
            // A drop.
            "reward" => (bound.exceeded_by(mh, mh - mc), mean_greater_p(&c, &h)),
            // Length: a change either way.
            "mean_length" if mc < mh => (bound.exceeded_by(mh, mh - mc), mean_greater_p(&c, &h)),
            // A rise beyond what evaluation predicted for the canary.
            _ => {
                let ratio = match metric {
                    "cost" => expected.cost_ratio,
                    "latency" => expected.latency_ratio,
                    _ => 1.0,
                };
                let predicted = mh * ratio;
                let h: Vec<f64> = h.iter().map(|x| x * ratio).collect();
                (bound.exceeded_by(predicted, mc - predicted), mean_greater_p(&h, &c))
            }
        };
        out.push(Reading {
            metric: metric.to_owned(),
            canary: mc,
            champion: mh,
            canary_episodes: c.len() as u64,
            champion_episodes: h.len() as u64,
            bound: *bound,
            p_value: p,
            fires: c.len() >= spec.min_episodes && beyond && p < alpha,
            episodes: canary.iter().take(10).map(|e| e.id.to_string()).collect(),
        });
    }
    out
}

/// How far, in reward, the canary's users must fall short of the reward
/// model's predictions beyond the champion's users before the
/// overoptimisation monitor may fire.
pub const OVEROPTIMISATION_GAP: f64 = 0.1;

/// The overoptimisation monitor on the canary's and the champion's
/// episodes users reacted to, each `(episode, the reward model's
/// predicted users' part, the users' part they gave)`: its reading, where
/// `canary` and `champion` are the mean of users' less predicted, and it
/// fires when the model rates the canary higher, the canary's shortfall
/// exceeds the champion's by [`OVEROPTIMISATION_GAP`], and Welch's test
/// shows it at the monitors' confidence over at least `min_episodes`.
/// `None` with no episode on either side.
pub fn overoptimisation(
    spec: &MonitorSpec,
    canary: &[(String, f64, f64)],
    champion: &[(String, f64, f64)],
) -> Option<Reading> {
    let predicted = |side: &[(String, f64, f64)]| mean(&side.iter().map(|e| e.1).collect::<Vec<_>>());
    let residuals = |side: &[(String, f64, f64)]| side.iter().map(|e| e.2 - e.1).collect::<Vec<_>>();
    let (pc, ph) = (predicted(canary)?, predicted(champion)?);
    let (rc, rh) = (residuals(canary), residuals(champion));
    let (mc, mh) = (mean(&rc)?, mean(&rh)?);
    let p = mean_greater_p(&rc, &rh);
    let bound = hone_config::Bound::absolute(OVEROPTIMISATION_GAP);
    Some(Reading {
        metric: "overoptimisation".to_owned(),
        canary: mc,
        champion: mh,
        canary_episodes: canary.len() as u64,
        champion_episodes: champion.len() as u64,
        bound,
        p_value: p,
        fires: canary.len() >= spec.min_episodes
            && pc > ph
            && bound.exceeded_by(mh, mh - mc)
            && p < 1.0 - spec.confidence,
        episodes: canary.iter().take(10).map(|e| e.0.clone()).collect(),
    })
}

/// What evaluation predicted of `canary` against the champion it was
/// evaluated with (its cost and latency ratios), from its candidate record.
pub fn expected(
    store: &dyn hone_store::CycleStore,
    agent: &str,
    canary: &hone_types::VersionId,
) -> Result<Expected, crate::LearnError> {
    let Some(candidate) = crate::release::deploy::candidate_of(store, agent, canary)? else {
        return Ok(Expected::default());
    };
    let champion: Option<hone_types::CandidateScores> =
        store.cycle(&candidate.cycle_id)?.and_then(|c| c.detail.champion_scores);
    let (Some(s), Some(h)) = (candidate.scores, champion) else {
        return Ok(Expected::default());
    };
    let ratio = |a: f64, b: f64| if b > 0.0 && a > 0.0 { a / b } else { 1.0 };
    Ok(Expected {
        cost_ratio: ratio(s.mean_cost_usd, h.mean_cost_usd),
        latency_ratio: ratio(s.mean_latency_ms, h.mean_latency_ms),
    })
}
