//! The gate (docs/ARCHITECTURE.md, "Concepts"): a candidate advances only if it beats the
//! champion on the objective with confidence (over the target and
//! regression sets together), regresses no previously
//! passing case beyond the tolerance (flips confirmed by re-runs), and keeps
//! its behaviour rates within bounds of the champion's. Pure: it reads
//! evaluation results and decides, with every reason written down.
//!
//! Offline runs are not production: no user reacts to a re-run. When the
//! reward spec weighs users' signals and none reached an offline run, the
//! gate sees only what does reach them (critics, the judge, penalties) and
//! cannot show the gain they would; a candidate with no gain shown on what
//! it does see then goes to the users — a canary under `promotion =
//! "sequential"` — unless it is shown worse on it. With no such online
//! test, the gain must show on what the gate sees, and its reason says so
//! ([`Sight`]).

use crate::search::compare::Comparison;
use crate::search::eval::EvalSummary;
use crate::stats::{bootstrap_ci, fisher_greater_p, mean};
use hone_config::{GateSpec, Objective};
use hone_types::{InstanceResult, PairedGain};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct GateDecision {
    pub passed: bool,
    /// Why it was pruned (empty when it passed).
    pub reasons: Vec<String>,
    /// What the gate saw, in one line.
    pub evidence: String,
    /// The paired gain it judged (`None` with no paired instance).
    pub gain: Option<PairedGain>,
    /// Passed on what the offline runs show; its gain is for users to show
    /// online ([`Sight::WithoutUsers`]).
    pub users_decide: bool,
}

/// What offline runs let the gate see of the reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sight {
    /// Every source the reward spec weighs reached the offline runs.
    Whole,
    /// No user's signal reached an offline run, and a usable reward model
    /// learned from users' signals predicted them instead.
    UsersPredicted,
    /// The spec weighs users' signals and none reached an offline run.
    /// `online_test`: the deployment decides canaries by a sequential test
    /// on users' signals (`promotion = "sequential"`).
    WithoutUsers { online_test: bool },
}

/// Paired reward differences (candidate − champion) per instance, each
/// the mean over its `samples`, as [`crate::search::compare`] pairs them, over
/// every set the gate ran (the target set, then the regression set): an
/// instance in several sets counts once, with the first set's runs. The
/// gain is judged on all of them, so a candidate that gains on the
/// traffic's cases only by losing on the cases the champion is kept for
/// does not beat it.
pub fn paired_diffs(sets: &[(&[InstanceResult], &[InstanceResult])], samples: u32) -> Vec<f64> {
    let mut seen = std::collections::HashSet::new();
    sets.iter()
        .flat_map(|(champion, candidate)| crate::search::compare::paired(champion, candidate, samples))
        .filter(|p| seen.insert(p.instance_id.clone()))
        .map(|p| p.b - p.a)
        .collect()
}

/// How the reason of a candidate the gate pruned begins; its reasons
/// follow, joined by `; `.
pub const PRUNED: &str = "pruned by the gate: ";

/// The gate's reasons in the reason a pruned candidate carries (none for
/// any other reason).
pub fn pruned_reasons(reason: &str) -> Vec<&str> {
    reason
        .strip_prefix(PRUNED)
        .map(|r| r.split("; ").collect())
        .unwrap_or_default()
}

/// The behaviour rates the gate bounds, by metric name.
pub fn rates(summary: &EvalSummary) -> BTreeMap<String, f64> {
    let r = &summary.rates;
    let errors = summary.errors as f64 / summary.instances.max(1) as f64;
    [
        ("invalid_tool_call", r.invalid_tool_call),
        ("clarifying_question", r.clarifying_question),
        ("refusal", r.refusal),
        ("empty", r.empty),
        ("error", errors),
        ("tool_use", r.tool_use),
        ("mean_length", r.mean_answer_chars),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// For a rate (a share of samples, or of instances for `error`), the
/// one-sided Fisher exact p-value of the candidate's change from the
/// champion's — a rise, or for `tool_use` either way; `None` for a mean
/// (`mean_length`), which its bound alone decides.
fn rate_change_p(
    metric: &str,
    (champion, x): (&EvalSummary, f64),
    (candidate, y): (&EvalSummary, f64),
    samples: u32,
) -> Option<f64> {
    if metric == "mean_length" {
        return None;
    }
    let per = if metric == "error" {
        1
    } else {
        u64::from(samples.max(1))
    };
    let (na, nb) = (champion.instances as u64 * per, candidate.instances as u64 * per);
    let hits = |rate: f64, n: u64| (rate * n as f64).round() as u64;
    let (ha, hb) = (hits(x, na), hits(y, nb));
    Some(if y >= x {
        fisher_greater_p(hb, nb, ha, na)
    } else {
        fisher_greater_p(ha, na, hb, nb)
    })
}

pub struct GateInput<'a> {
    pub spec: &'a GateSpec,
    pub objective: &'a [Objective],
    pub champion: &'a EvalSummary,
    pub candidate: &'a EvalSummary,
    /// Paired differences on the target and regression sets ([`paired_diffs`]).
    pub diffs: &'a [f64],
    /// Champion (A) vs candidate (B) on the target and regression sets.
    pub comparisons: &'a [&'a Comparison],
    /// What the offline runs show of the reward.
    pub sight: Sight,
}

/// The candidate's reward gain over the champion: the mean of the paired
/// differences ([`paired_diffs`]) and its bootstrap interval at
/// `confidence`, as the gate judges it; `None` with nothing paired.
pub fn paired_gain(diffs: &[f64], confidence: f64) -> Option<PairedGain> {
    let (low, high) = bootstrap_ci(diffs, confidence, 17)?;
    Some(PairedGain {
        mean: mean(diffs)?,
        low,
        high,
        confidence,
        instances: diffs.len(),
    })
}

pub fn decide(input: &GateInput<'_>) -> GateDecision {
    let spec = input.spec;
    let mut reasons = Vec::new();
    let judged = paired_gain(input.diffs, spec.confidence);
    let (gain, lo, hi) = judged.map_or((0.0, 0.0, 0.0), |g| (g.mean, g.low, g.high));
    let over = format!("over {} instances", input.diffs.len());
    let pct = (spec.confidence * 100.0).round();
    let better_reward = lo > 0.0;
    let not_worse = lo >= 0.0 || (input.diffs.iter().all(|d| *d >= 0.0) && !input.diffs.is_empty());
    let cheaper = |a: f64, b: f64| a < b * 0.9;
    let better_secondary: Vec<&str> = input
        .objective
        .iter()
        .filter(|o| match o {
            Objective::MinCost => cheaper(input.candidate.mean_cost_usd, input.champion.mean_cost_usd),
            Objective::MinLatency => cheaper(input.candidate.mean_latency_ms, input.champion.mean_latency_ms),
            Objective::MaxReward => false,
        })
        .map(|o| o.as_str())
        .collect();
    // Without users offline and with an online test, a candidate that
    // shows no gain on what offline runs carry goes to the users, unless
    // it is shown worse on it.
    let users_decide = input.sight == (Sight::WithoutUsers { online_test: true }) && !better_reward;
    if input.diffs.is_empty() {
        reasons.push("no instance could be compared".to_owned());
    } else if users_decide {
        if hi < 0.0 {
            reasons.push(format!(
                "worse on what offline runs show (critics, judge, penalties): reward {gain:+.3} {over} ({pct}% CI [{lo:.3}, {hi:.3}])"
            ));
        }
    } else if !(better_reward || not_worse && !better_secondary.is_empty()) {
        let mut reason = if not_worse {
            format!("does not beat the champion: reward {gain:+.3} {over} ({pct}% CI [{lo:.3}, {hi:.3}]) and no cheaper or faster by 10%")
        } else {
            format!("does not beat the champion with {pct}% confidence: reward {gain:+.3} {over} ({pct}% CI [{lo:.3}, {hi:.3}])")
        };
        if input.sight == (Sight::WithoutUsers { online_test: false }) {
            reason.push_str(
                " — judged on critics, the judge and penalties only: the users' signals the reward spec weighs \
                 reached no offline run (users react only to answers they were served); with promotion = \"sequential\" \
                 in the deployment, users decide online",
            );
        }
        reasons.push(reason);
    }
    // An instance can be in both the target and the regression set: it
    // counts once (with the first set's runs).
    let mut by_instance: BTreeMap<&str, String> = BTreeMap::new();
    for f in input
        .comparisons
        .iter()
        .flat_map(|c| c.regressions.iter().filter(|f| f.confirmed))
    {
        by_instance.entry(f.instance_id.as_str()).or_insert_with(|| {
            format!(
                "{} ({}/{} vs {}/{})",
                f.instance_id, f.b_passes, f.runs, f.a_passes, f.runs
            )
        });
    }
    let regressed: Vec<String> = by_instance.into_values().collect();
    if regressed.len() > spec.tolerance {
        reasons.push(format!(
            "breaks {} previously passing case{} (tolerance {}): {}",
            regressed.len(),
            if regressed.len() == 1 { "" } else { "s" },
            spec.tolerance,
            regressed.join(", ")
        ));
    }
    let (a, b) = (rates(input.champion), rates(input.candidate));
    for (metric, bound) in &spec.bounds {
        let (Some(x), Some(y)) = (a.get(metric), b.get(metric)) else {
            continue;
        };
        // Length and tool use count either way; the other rates only rising.
        let change = match metric.as_str() {
            "mean_length" | "tool_use" => (y - x).abs(),
            _ => y - x,
        };
        if !bound.exceeded_by(*x, change) {
            continue;
        }
        // A rate beyond its bound counts when the runs show it at the gate's
        // confidence: two more invalid calls in 96 samples are noise.
        match rate_change_p(metric, (input.champion, *x), (input.candidate, *y), spec.samples) {
            Some(p) if p > 1.0 - spec.confidence => {}
            Some(p) => reasons.push(format!(
                "{metric} {y:.3} vs champion {x:.3} is beyond its bound {bound} (p = {p:.3})"
            )),
            None => reasons.push(format!(
                "{metric} {y:.3} vs champion {x:.3} is beyond its bound {bound}"
            )),
        }
    }
    let evidence = format!(
        "{}{}reward {:.3} vs {:.3} on the target set, {gain:+.3} {over} ({pct}% CI [{lo:.3}, {hi:.3}]), cost ${:.6} vs ${:.6}, {} confirmed regressions{}",
        if input.sight == Sight::UsersPredicted {
            "users' signals predicted by the reward model offline; "
        } else {
            ""
        },
        if users_decide {
            "users decide online (no offline run carries their signals); offline, without them: "
        } else {
            ""
        },
        input.candidate.mean_score.unwrap_or(0.0),
        input.champion.mean_score.unwrap_or(0.0),
        input.candidate.mean_cost_usd,
        input.champion.mean_cost_usd,
        regressed.len(),
        if better_secondary.is_empty() {
            String::new()
        } else {
            format!(", better on {}", better_secondary.join(", "))
        }
    );
    let passed = reasons.is_empty();
    GateDecision {
        passed,
        reasons,
        evidence,
        gain: judged,
        users_decide: users_decide && passed,
    }
}
