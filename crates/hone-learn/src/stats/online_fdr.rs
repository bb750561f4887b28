//! Error control over the endless sequence of canaries: e-LOND (Xu and
//! Ramdas, "Online multiple testing with e-values").
//!
//! The t-th canary an agent ever runs is promoted when the wealth of its
//! bet that it beats its champion (an e-value at any stopping time, see
//! [`super::betting`]) reaches `1 / αₜ`, where
//!
//! `αₜ = α · γₜ · (promotions before it + 1)`,
//!
//! with `γₜ ∝ 1 / ((t + 1) ln²(t + 1))` summing to at most one. Guarantee:
//! at every point of the sequence, the expected share of promotions that
//! were of canaries no better than their champion (the false discovery
//! rate) is at most `α`, under any dependence between canaries (one trains
//! on what the last one served; e-values need no independence). Each true
//! promotion earns level back, so a loop that keeps finding better
//! versions keeps its power; one that finds none spends it slowly (the
//! 10th canary is tested at 1.5% of α, the 100th at 0.02% — more episodes,
//! never a closed door: the wealth needed grows with `ln(1/αₜ)` only).

/// `γₜ` before normalising.
fn decay(t: u64) -> f64 {
    let x = t as f64 + 1.0;
    1.0 / (x * x.ln().powi(2))
}

/// An upper bound on `Σₜ decay(t)`: the first terms summed, the rest
/// bounded by the integral `1 / ln(N + 1)`.
fn decay_sum() -> f64 {
    const SUMMED: u64 = 100_000;
    (1..=SUMMED).map(decay).sum::<f64>() + 1.0 / ((SUMMED + 1) as f64).ln()
}

/// `γₜ` for the t-th test (from 1).
pub fn gamma(t: u64) -> f64 {
    static SUM: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    decay(t.max(1)) / SUM.get_or_init(decay_sum)
}

/// The level the t-th canary (from 1) is promoted at, given the promotions
/// made before it started.
pub fn e_lond_level(alpha: f64, t: u64, promotions_before: u64) -> f64 {
    (alpha * gamma(t) * (promotions_before as f64 + 1.0)).min(alpha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_levels_spend_at_most_alpha_without_promotions_and_earn_it_back() {
        let spent: f64 = (1..=200_000).map(|t| e_lond_level(0.05, t, 0)).sum();
        assert!(spent <= 0.05 && spent > 0.04, "{spent}");
        assert!((e_lond_level(0.05, 1, 0) - 0.0247).abs() < 1e-3);
        assert!((e_lond_level(0.05, 10, 3) - 4.0 * e_lond_level(0.05, 10, 0)).abs() < 1e-15);
        assert!(e_lond_level(0.05, 1, 10) <= 0.05, "never above α");
    }
}
