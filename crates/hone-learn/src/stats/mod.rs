//! Statistics for evaluation and monitoring: bootstrap confidence intervals
//! (plain and paired) with a seeded generator, so a report is reproducible,
//! the Wilson interval of a proportion, the exact two-sided sign test,
//! Fisher's exact test and Welch's t-test (distributions from `statrs`);
//! the always-valid test a canary is decided by ([`betting`]) and the error
//! control over the sequence of canaries ([`online_fdr`]).

pub mod betting;
pub mod online_fdr;
pub mod simulate;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const BOOTSTRAP_RESAMPLES: usize = 2000;

pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The middle value, or the mean of the middle two for an even count
/// (as `numpy.median`); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Sample variance (n − 1 in the denominator); `None` below two values.
pub fn sample_variance(values: &[f64]) -> Option<f64> {
    let m = mean(values).filter(|_| values.len() > 1)?;
    Some(values.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64)
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

/// The Wilson score interval of a proportion, `hits` of `n`, at 95%:
/// unlike the normal approximation it stays inside [0, 1] and is honest at
/// 0 or n hits, as small held-out sets often give.
pub fn wilson_95(hits: u64, n: u64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    const Z: f64 = 1.959_963_984_540_054;
    let (k, n) = (hits.min(n) as f64, n as f64);
    let p = k / n;
    let denominator = 1.0 + Z * Z / n;
    let centre = (p + Z * Z / (2.0 * n)) / denominator;
    let half = Z * (p * (1.0 - p) / n + Z * Z / (4.0 * n * n)).sqrt() / denominator;
    // At 0 or n hits the closed form is exactly 0 or 1; rounding must not
    // put the bound on the wrong side of the observed rate.
    let low = if hits == 0 { 0.0 } else { (centre - half).max(0.0) };
    let high = if k >= n { 1.0 } else { (centre + half).min(1.0) };
    Some((low, high))
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

/// Standard normal CDF.
pub fn normal_cdf(z: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal};
    Normal::standard().cdf(z)
}

/// The standard normal's upper tail, `1 − Φ(z)`, without the cancellation
/// that subtracting from one suffers far in the tail.
fn normal_sf(z: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal};
    Normal::standard().sf(z)
}

/// One-sided Fisher exact test: the p-value that A passing `passes_a` of
/// `runs_a` and B `passes_b` of `runs_b` shows A's pass rate above B's by
/// chance alone (the hypergeometric tail `P(X ≥ passes_a)` with the
/// margins fixed). Checked against scipy in `tests/stats.rs`.
pub fn fisher_greater_p(passes_a: u64, runs_a: u64, passes_b: u64, runs_b: u64) -> f64 {
    use statrs::distribution::{DiscreteCDF, Hypergeometric};
    let (passes_a, passes_b) = (passes_a.min(runs_a), passes_b.min(runs_b));
    if passes_a == 0 {
        return 1.0;
    }
    match Hypergeometric::new(runs_a + runs_b, passes_a + passes_b, runs_a) {
        Ok(h) => h.sf(passes_a - 1).clamp(0.0, 1.0),
        Err(_) => 1.0,
    }
}

/// One-sided Welch t-test on means: the p-value that B's mean exceeds A's
/// by chance alone (unequal variances, Welch–Satterthwaite degrees of
/// freedom; Student's t, not the normal, so small canary windows are not
/// over-confident). Checked against scipy in `tests/stats.rs`.
pub fn mean_greater_p(a: &[f64], b: &[f64]) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let (Some(ma), Some(mb), Some(va), Some(vb)) = (mean(a), mean(b), sample_variance(a), sample_variance(b)) else {
        return 1.0;
    };
    let (qa, qb) = (va / a.len() as f64, vb / b.len() as f64);
    let se = (qa + qb).sqrt();
    if se == 0.0 {
        return if mb > ma { 0.0 } else { 1.0 };
    }
    let df = (qa + qb).powi(2) / (qa * qa / (a.len() - 1) as f64 + qb * qb / (b.len() - 1) as f64);
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) => t.sf((mb - ma) / se),
        Err(_) => normal_sf((mb - ma) / se),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_matches_numpy() {
        // numpy.median([]) is nan (with a warning); here it is no value.
        assert_eq!(median(&[]), None);
        // numpy.median([3, 1, 2]) == 2.0; numpy.median([4, 1, 3, 2]) == 2.5
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // numpy.median([6.0, 0.5, -15.0]) == 0.5
        assert_eq!(median(&[6.0, 0.5, -15.0]), Some(0.5));
    }

    #[test]
    fn normal_cdf_matches_tables() {
        for (z, expected) in [
            (0.0, 0.5),
            (1.96, 0.975_002_1),
            (-1.645, 0.049_984_7),
            (3.0, 0.998_650_1),
        ] {
            assert!((normal_cdf(z) - expected).abs() < 1e-6, "Φ({z}) = {}", normal_cdf(z));
        }
    }

    #[test]
    fn mean_test_sees_a_shift() {
        let a: Vec<f64> = (0..50).map(|i| f64::from(i % 5)).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 1.0).collect();
        assert!(mean_greater_p(&a, &b) < 0.01);
        assert!(mean_greater_p(&b, &a) > 0.99);
    }

    #[test]
    fn wilson_interval_matches_the_formula_computed_independently() {
        // statsmodels' proportion_confint(k, n, method="wilson") values,
        // recomputed in Python from the closed form: 8/20 → (0.21881, 0.61342),
        // 0/10 → (0, 0.27753), 60/60 → (0.93983, 1).
        for (k, n, lo, hi) in [
            (8, 20, 0.218_807, 0.613_418),
            (0, 10, 0.0, 0.277_533),
            (60, 60, 0.939_828, 1.0),
        ] {
            let (l, h) = wilson_95(k, n).unwrap_or_default();
            assert!((l - lo).abs() < 1e-5 && (h - hi).abs() < 1e-5, "{k}/{n}: ({l}, {h})");
        }
        assert_eq!(wilson_95(0, 0), None);
        assert_eq!(wilson_95(0, 6).map(|c| c.0), Some(0.0), "not a hair above a rate of 0");
        assert_eq!(wilson_95(6, 6).map(|c| c.1), Some(1.0));
    }
}
