//! Paired comparison of two versions on one dataset: per-instance score
//! differences (each instance's mean over its samples) with a paired
//! bootstrap interval and a sign test, the instances that regressed (pass
//! in most samples under A, fail in most under B), re-runs of those flips
//! to tell noise from regression, and a verdict with its confidence.

use crate::search::eval::{per_instance, EvalOptions, Evaluator, InstanceScore, Progress, Target};
use crate::stats::{bootstrap_ci, mean, sign_test};
use hone_store::StoreError;
use hone_types::{DatasetInfo, InstanceResult, VersionId};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flip {
    pub instance_id: String,
    /// Passes of A and B over the samples and the re-runs.
    pub a_passes: u32,
    pub b_passes: u32,
    pub runs: u32,
    /// One-sided Fisher exact p-value of A's pass rate above B's.
    pub p_value: f64,
    /// `p_value ≤ 1 − confidence`: a regression, not noise.
    pub confirmed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub dataset: String,
    pub a: String,
    pub b: String,
    pub pairs: usize,
    pub mean_a: Option<f64>,
    pub mean_b: Option<f64>,
    /// Mean of B − A over paired instances, with its 95% paired-bootstrap interval.
    pub mean_diff: Option<f64>,
    pub diff_ci95: Option<(f64, f64)>,
    pub wins: u64,
    pub losses: u64,
    pub ties: u64,
    /// Two-sided sign test on wins vs losses.
    pub sign_test_p: f64,
    pub regressions: Vec<Flip>,
    pub improvements: Vec<String>,
    pub verdict: String,
}

/// Each instance over its samples (attempts `0..samples`), by id.
pub(crate) fn sampled(results: &[InstanceResult], samples: u32) -> BTreeMap<String, InstanceScore> {
    let runs: Vec<&InstanceResult> = results.iter().filter(|r| r.attempt < samples.max(1)).collect();
    per_instance(&runs)
        .into_iter()
        .map(|i| (i.instance_id.clone(), i))
        .collect()
}

/// Whether a one-sided Fisher p-value of A passing more often than B
/// confirms a regression at `confidence` (at 95%, 3 of 3 against 0 of 3 is
/// exactly p = 0.05, the least evidence that counts; 3 of 5 against 0 of 5
/// is p = 0.08 and does not).
fn confirmed(p_value: f64, confidence: f64) -> bool {
    p_value <= 1.0 - confidence + 1e-12
}

/// Whether A's samples mostly pass and B's mostly fail.
pub(crate) fn flipped(a: &InstanceScore, b: &InstanceScore) -> bool {
    a.pass_rate() > 0.5 && b.pass_rate() < 0.5
}

/// Evaluates A and B (resuming earlier runs), re-runs each regressed instance
/// `reruns` more times under both, and compares.
pub async fn compare(
    evaluator: &Evaluator,
    dataset: &DatasetInfo,
    (a, b): (&VersionId, &VersionId),
    target: &Target,
    options: &EvalOptions,
    (reruns, confidence): (u32, f64),
    progress: &(dyn Fn(&str, Progress) + Sync),
) -> Result<Comparison, StoreError> {
    let (_, results_a) = evaluator
        .run(dataset, a, target, options, &|p| progress("A", p))
        .await?;
    let (_, results_b) = evaluator
        .run(dataset, b, target, options, &|p| progress("B", p))
        .await?;
    let samples = options.samples.max(1);
    let (first_a, first_b) = (sampled(&results_a, samples), sampled(&results_b, samples));
    let regressed: HashSet<String> = first_a
        .iter()
        .filter(|(id, ra)| first_b.get(*id).is_some_and(|rb| flipped(ra, rb)))
        .map(|(id, _)| id.clone())
        .collect();
    let (mut all_a, mut all_b) = (results_a.clone(), results_b.clone());
    if !regressed.is_empty() && reruns > 0 {
        // Re-runs are the attempts after the samples.
        let rerun = EvalOptions {
            attempt: samples,
            samples: reruns,
            only: Some(regressed.clone()),
            ..options.clone()
        };
        all_a = evaluator
            .run(dataset, a, target, &rerun, &|p| progress("re-run A", p))
            .await?
            .1;
        all_b = evaluator
            .run(dataset, b, target, &rerun, &|p| progress("re-run B", p))
            .await?
            .1;
    }
    Ok(judge_pairs(
        dataset,
        (a, b),
        (&all_a, &all_b),
        &regressed,
        (samples, confidence),
    ))
}

/// One instance under A and B: its mean score over the samples of each
/// (an instance whose every sample failed scores as the worst the other
/// side saw, less one) and its pass rates.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub instance_id: String,
    pub a: f64,
    pub b: f64,
    pub a_pass_rate: f64,
    pub b_pass_rate: f64,
}

/// The instances run under both A and B (attempts `0..samples`), paired.
pub fn paired(results_a: &[InstanceResult], results_b: &[InstanceResult], samples: u32) -> Vec<Pair> {
    let (first_a, first_b) = (sampled(results_a, samples), sampled(results_b, samples));
    first_a
        .into_iter()
        .filter_map(|(id, ra)| {
            let rb = first_b.get(&id)?;
            let (xa, xb) = match (ra.score, rb.score) {
                (Some(x), Some(y)) => (x, y),
                (Some(x), None) => (x, x.min(0.0) - 1.0),
                (None, Some(y)) => (y.min(0.0) - 1.0, y),
                (None, None) => return None,
            };
            Some(Pair {
                a_pass_rate: ra.pass_rate(),
                b_pass_rate: rb.pass_rate(),
                instance_id: id,
                a: xa,
                b: xb,
            })
        })
        .collect()
}

/// The comparison from stored results (no running): `samples` runs of
/// every instance, then any re-runs of the `regressed` ones.
pub fn judge_pairs(
    dataset: &DatasetInfo,
    (a, b): (&VersionId, &VersionId),
    (results_a, results_b): (&[InstanceResult], &[InstanceResult]),
    regressed: &HashSet<String>,
    (samples, confidence): (u32, f64),
) -> Comparison {
    let mut diffs = Vec::new();
    let (mut wins, mut losses, mut ties) = (0, 0, 0);
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let mut improvements = Vec::new();
    for pair in paired(results_a, results_b, samples) {
        let (xa, xb) = (pair.a, pair.b);
        sa.push(xa);
        sb.push(xb);
        diffs.push(xb - xa);
        match xb.partial_cmp(&xa) {
            Some(std::cmp::Ordering::Greater) => wins += 1,
            Some(std::cmp::Ordering::Less) => losses += 1,
            _ => ties += 1,
        }
        if pair.a_pass_rate < 0.5 && pair.b_pass_rate > 0.5 {
            improvements.push(pair.instance_id);
        }
    }
    let passes = |results: &[InstanceResult], id: &str| {
        let runs: Vec<&InstanceResult> = results.iter().filter(|r| r.instance_id == id).collect();
        (runs.iter().filter(|r| r.passed).count() as u32, runs.len() as u32)
    };
    let mut regressions: Vec<Flip> = regressed
        .iter()
        .map(|id| {
            let (a_passes, runs_a) = passes(results_a, id);
            let (b_passes, runs_b) = passes(results_b, id);
            let runs = runs_a.min(runs_b);
            let p_value =
                crate::stats::fisher_greater_p(a_passes.into(), runs_a.into(), b_passes.into(), runs_b.into());
            Flip {
                instance_id: id.clone(),
                a_passes,
                b_passes,
                runs,
                p_value,
                confirmed: confirmed(p_value, confidence),
            }
        })
        .collect();
    regressions.sort_by(|x, y| x.instance_id.cmp(&y.instance_id));
    let mean_diff = mean(&diffs);
    let ci = bootstrap_ci(&diffs, 0.95, 11);
    let p = sign_test(wins, losses);
    let confirmed = regressions.iter().filter(|f| f.confirmed).count();
    let verdict = match (confirmed, ci) {
        (n, _) if n > 0 => format!(
            "B regresses {n} instance{} that pass under A (confirmed by re-runs)",
            if n == 1 { "" } else { "s" }
        ),
        (_, Some((lo, _))) if lo > 0.0 => format!(
            "B is better: mean +{:.3} (95% CI [{:.3}, {:.3}]), sign test p = {p:.3}",
            mean_diff.unwrap_or(0.0),
            lo,
            ci.map(|c| c.1).unwrap_or(0.0)
        ),
        (_, Some((_, hi))) if hi < 0.0 => format!(
            "B is worse: mean {:.3} (95% CI [{:.3}, {:.3}]), sign test p = {p:.3}",
            mean_diff.unwrap_or(0.0),
            ci.map(|c| c.0).unwrap_or(0.0),
            hi
        ),
        _ => format!(
            "no significant difference: mean {:+.3} (95% CI [{:.3}, {:.3}]), sign test p = {p:.3}",
            mean_diff.unwrap_or(0.0),
            ci.map(|c| c.0).unwrap_or(0.0),
            ci.map(|c| c.1).unwrap_or(0.0)
        ),
    };
    Comparison {
        dataset: dataset.id.clone(),
        a: a.to_string(),
        b: b.to_string(),
        pairs: diffs.len(),
        mean_a: mean(&sa),
        mean_b: mean(&sb),
        mean_diff,
        diff_ci95: ci,
        wins,
        losses,
        ties,
        sign_test_p: p,
        regressions,
        improvements,
        verdict,
    }
}
