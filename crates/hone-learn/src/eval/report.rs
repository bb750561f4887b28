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

/// Summarises first attempts (attempt 0): re-runs are for telling flips from noise.
pub fn summarise(run_id: &str, results: &[InstanceResult]) -> EvalSummary {
    let first: Vec<&InstanceResult> = results.iter().filter(|r| r.attempt == 0).collect();
    let n = first.len().max(1) as f64;
    let scores: Vec<f64> = first.iter().filter_map(|r| r.score).collect();
    let share = |f: &dyn Fn(&InstanceResult) -> bool| first.iter().filter(|r| f(r)).count() as f64 / n;
    let mut latencies: Vec<f64> = first.iter().map(|r| r.latency_ms).collect();
    latencies.sort_by(f64::total_cmp);
    EvalSummary {
        run_id: run_id.to_owned(),
        instances: first.len(),
        errors: first.iter().filter(|r| r.score.is_none()).count(),
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
