//! An evaluation run's summary: mean score with a bootstrap confidence
//! interval, pass rate, cost and latency per instance, and behaviour rates.

use crate::stats::{bootstrap_ci, mean};
use hone_types::InstanceResult;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rates {
    pub invalid_tool_call: f64,
    pub clarifying_question: f64,
    pub refusal: f64,
    pub empty: f64,
    pub truncated: f64,
    /// Share of instances that made at least one tool call.
    pub tool_use: f64,
    pub mean_answer_chars: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalSummary {
    pub run_id: String,
    pub instances: usize,
    /// Instances whose run failed (no score) after every retry.
    pub errors: usize,
    pub mean_score: Option<f64>,
    /// 95% bootstrap interval of the mean score.
    pub ci95: Option<(f64, f64)>,
    pub pass_rate: f64,
    pub mean_cost_usd: f64,
    pub mean_latency_ms: f64,
    pub p95_latency_ms: f64,
    pub rates: Rates,
}

/// Summarises the samples of a run (attempts `0..samples`; later attempts
/// are re-runs for telling flips from noise). Scores are averaged per
/// instance first, so the interval is over instances, not samples; rates
/// are shares of samples.
pub fn summarise(run_id: &str, results: &[InstanceResult], samples: u32) -> EvalSummary {
    let first: Vec<&InstanceResult> = results.iter().filter(|r| r.attempt < samples.max(1)).collect();
    let n = first.len().max(1) as f64;
    let per_instance = per_instance(&first);
    let scores: Vec<f64> = per_instance.iter().filter_map(|i| i.score).collect();
    let share = |f: &dyn Fn(&InstanceResult) -> bool| first.iter().filter(|r| f(r)).count() as f64 / n;
    let mut latencies: Vec<f64> = first.iter().map(|r| r.latency_ms).collect();
    latencies.sort_by(f64::total_cmp);
    EvalSummary {
        run_id: run_id.to_owned(),
        instances: per_instance.len(),
        errors: per_instance.iter().filter(|i| i.score.is_none()).count(),
        mean_score: mean(&scores),
        ci95: bootstrap_ci(&scores, 0.95, 7),
        pass_rate: share(&|r| r.passed),
        // `+ 0.0`: an empty f64 sum is -0.0, which prints as "-0.000000".
        mean_cost_usd: first.iter().map(|r| r.cost_usd).sum::<f64>() / n + 0.0,
        mean_latency_ms: first.iter().map(|r| r.latency_ms).sum::<f64>() / n,
        p95_latency_ms: latencies
            .get(((latencies.len() as f64 * 0.95).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0),
        rates: Rates {
            invalid_tool_call: share(&|r| r.flags.invalid_tool_call),
            clarifying_question: share(&|r| r.flags.clarifying_question),
            refusal: share(&|r| r.flags.refusal),
            empty: share(&|r| r.flags.empty),
            truncated: share(&|r| r.flags.truncated),
            tool_use: share(&|r| r.tool_calls > 0),
            mean_answer_chars: first.iter().map(|r| r.answer_chars as f64).sum::<f64>() / n,
        },
    }
}

/// One instance over its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceScore {
    pub instance_id: String,
    /// Mean score of the samples that ran (None: every sample failed).
    pub score: Option<f64>,
    /// Samples that passed, and samples.
    pub passes: u32,
    pub runs: u32,
}

impl InstanceScore {
    pub fn pass_rate(&self) -> f64 {
        f64::from(self.passes) / f64::from(self.runs.max(1))
    }
}

/// `results` grouped by instance (in instance-id order).
pub fn per_instance(results: &[&InstanceResult]) -> Vec<InstanceScore> {
    let mut by_id: std::collections::BTreeMap<&str, Vec<&InstanceResult>> = std::collections::BTreeMap::new();
    for r in results {
        by_id.entry(r.instance_id.as_str()).or_default().push(r);
    }
    by_id
        .into_iter()
        .map(|(id, runs)| {
            let scores: Vec<f64> = runs.iter().filter_map(|r| r.score).collect();
            InstanceScore {
                instance_id: id.to_owned(),
                score: mean(&scores),
                passes: runs.iter().filter(|r| r.passed).count() as u32,
                runs: runs.len() as u32,
            }
        })
        .collect()
}
