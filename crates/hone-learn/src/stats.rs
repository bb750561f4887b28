//! Statistics for evaluation: bootstrap confidence intervals (plain and
//! paired) with a seeded generator, so a report is reproducible, and the
//! exact two-sided sign test.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const BOOTSTRAP_RESAMPLES: usize = 2000;

pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Percentile bootstrap interval of the mean at `level` (e.g. 0.95).
pub fn bootstrap_ci(values: &[f64], level: f64, seed: u64) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let n = values.len();
    let mut means: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| (0..n).map(|_| values[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    let at = |q: f64| means[((q * (BOOTSTRAP_RESAMPLES - 1) as f64).round() as usize).min(BOOTSTRAP_RESAMPLES - 1)];
    Some((at(tail), at(1.0 - tail)))
}

/// Two-sided exact sign test: the probability of a split at least this
/// uneven between `wins` and `losses` if either were equally likely (ties dropped).
pub fn sign_test(wins: u64, losses: u64) -> f64 {
    let n = wins + losses;
    if n == 0 {
        return 1.0;
    }
    let k = wins.min(losses);
    // Σ_{i≤k} C(n, i) / 2^n in log space.
    let ln_choose = |i: u64| ln_factorial(n) - ln_factorial(i) - ln_factorial(n - i);
    let tail: f64 = (0..=k)
        .map(|i| (ln_choose(i) - n as f64 * std::f64::consts::LN_2).exp())
        .sum();
    (2.0 * tail).min(1.0)
}

fn ln_factorial(n: u64) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
}
