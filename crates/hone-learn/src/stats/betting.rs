//! The canary's online test: an always-valid comparison of two bounded
//! means by betting (Waudby-Smith and Ramdas, "Estimating means of bounded
//! random variables by betting"), with no variance assumed or plugged in.
//!
//! Observations of the two arms (champion, canary) come in the order their
//! episodes started. They are cut into runs of one arm, and consecutive
//! runs are paired: each pair gives one difference, the canary run's mean
//! less the champion run's, which lies in `[−w, w]` for rewards in a range
//! of width `w`. Runs depend only on which arm served each episode, never
//! on a reward, so while the canary is no better than the champion each
//! difference has a mean of at most zero given every earlier one, whatever
//! the shares (even shares that change with the evidence) — and both sides
//! of a pair come from the same stretch of traffic.
//!
//! For a threshold `m`, the wealth of betting that the mean difference is
//! above `m`, `K⁺(m) = Π (1 + λᵢ (xᵢ − m))` with the bet `λᵢ ≥ 0` chosen
//! from earlier pairs only (aGRAPA), is a nonnegative supermartingale when
//! the mean is at most `m`; by Ville's inequality it ever reaches `1/α`
//! with probability at most `α`, at any sample size and however often it
//! is looked at. So "the canary is better" is shown when `K⁺(0)` reaches
//! `1/α`, "worse" when the mirror bet `K⁻(0)` does, and "not better by
//! `δ`" when `K⁻(δ)` does. Thresholds on a grid give the confidence
//! sequence the reports show.

/// Which arm served an episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    Champion,
    Canary,
}

/// The largest fraction of the bet that keeps wealth positive at the worst
/// outcome: a bet of `c / (1 + m)` loses at most `c` of the wealth on one
/// pair. Any `c < 1` keeps the guarantee; larger bets grow faster on a
/// real gain and swing harder on noise.
const MAX_BET: f64 = 0.75;

/// Prior variance of a difference in `[−1, 1]` before any pair is seen
/// (as in Waudby-Smith and Ramdas's predictable plug-in).
const PRIOR_VARIANCE: f64 = 0.25;

/// Thresholds of the reported confidence sequence: the `GRID − 1` inner
/// points of a grid over `[−1, 1]` (the normalised difference; its ends
/// bound every mean), so bounds are exact to 1/100 of the range and always
/// err wide.
const GRID: usize = 200;

/// Cuts a time-ordered stream of observations into runs of one arm and
/// pairs consecutive runs.
#[derive(Debug, Clone, Default)]
pub struct Pairing {
    /// The run under way: its arm, sum and count.
    current: Option<(Arm, f64, usize)>,
    /// A finished run waiting for the next one to finish: arm and mean.
    waiting: Option<(Arm, f64)>,
}

impl Pairing {
    /// Adds the next observation; returns a finished pair's canary mean
    /// less its champion mean, when this observation finished one.
    pub fn push(&mut self, arm: Arm, value: f64) -> Option<f64> {
        let mut finished = None;
        match &mut self.current {
            Some((side, sum, n)) if *side == arm => {
                *sum += value;
                *n += 1;
                return None;
            }
            Some((side, sum, n)) => {
                let run = (*side, *sum / *n as f64);
                finished = match self.waiting.take() {
                    None => {
                        self.waiting = Some(run);
                        None
                    }
                    Some((Arm::Canary, canary)) => Some(canary - run.1),
                    Some((Arm::Champion, champion)) => Some(run.1 - champion),
                };
            }
            None => {}
        }
        self.current = Some((arm, value, 1));
        finished
    }
}

/// One bet: that the mean difference is above (`up`) or below `threshold`.
#[derive(Debug, Clone, Copy)]
struct Bet {
    threshold: f64,
    up: bool,
    log_wealth: f64,
    /// The largest `log_wealth` so far: what a look at any time would have seen.
    peak: f64,
}

impl Bet {
    fn new(threshold: f64, up: bool) -> Self {
        Self {
            threshold,
            up,
            log_wealth: 0.0,
            peak: 0.0,
        }
    }

    /// aGRAPA: the bet that maximises the wealth's growth to second order,
    /// `(μ̂ − m) / (σ̂² + (μ̂ − m)²)`, from earlier pairs' estimates, capped
    /// so no outcome in `[−1, 1]` takes more than [`MAX_BET`] of the wealth.
    fn place(&mut self, estimate: &Estimate, x: f64) {
        let (m, mean, variance) = (self.threshold, estimate.mean(), estimate.variance());
        let edge = if self.up { mean - m } else { m - mean };
        let room = if self.up { 1.0 + m } else { 1.0 - m };
        if room <= 0.0 {
            return;
        }
        let lambda = (edge / (variance + edge * edge)).clamp(0.0, MAX_BET / room);
        let outcome = if self.up { x - m } else { m - x };
        self.log_wealth += (1.0 + lambda * outcome).ln();
        self.peak = self.peak.max(self.log_wealth);
    }

    fn reached(&self, alpha: f64) -> bool {
        self.peak >= (1.0 / alpha).ln()
    }
}

/// Predictable estimates of the pairs' mean and variance: each pair is bet
/// on with the estimates of the pairs before it.
#[derive(Debug, Clone, Copy, Default)]
struct Estimate {
    n: usize,
    sum: f64,
    squares: f64,
}

impl Estimate {
    fn mean(&self) -> f64 {
        self.sum / (self.n as f64 + 1.0)
    }

    fn variance(&self) -> f64 {
        (PRIOR_VARIANCE + self.squares) / (self.n as f64 + 1.0)
    }

    fn add(&mut self, x: f64) {
        let before = self.mean();
        self.n += 1;
        self.sum += x;
        self.squares += (x - before).powi(2);
    }
}

/// The bets of one comparison, fed pair by pair.
#[derive(Debug, Clone)]
pub struct Betting {
    estimate: Estimate,
    /// The mean difference's running sum (normalised), for the report.
    sum: f64,
    better: Bet,
    worse: Bet,
    /// `K⁻(δ)`: not better by the least gain worth shipping.
    short_of_gain: Bet,
    /// Both directions at every grid threshold (the confidence sequence).
    grid_up: Vec<Bet>,
    grid_down: Vec<Bet>,
}

impl Betting {
    /// The bets a decision needs; `least_gain` is normalised (a share of
    /// the difference's range).
    pub fn new(least_gain: f64) -> Self {
        Self {
            estimate: Estimate::default(),
            sum: 0.0,
            better: Bet::new(0.0, true),
            worse: Bet::new(0.0, false),
            short_of_gain: Bet::new(least_gain.clamp(0.0, 1.0), false),
            grid_up: Vec::new(),
            grid_down: Vec::new(),
        }
    }

    /// [`Betting::new`] with the grid of bets [`Betting::interval`] reads.
    pub fn with_interval(least_gain: f64) -> Self {
        let grid = |up| {
            (1..GRID)
                .map(|k| Bet::new(-1.0 + 2.0 * k as f64 / GRID as f64, up))
                .collect()
        };
        Self {
            grid_up: grid(true),
            grid_down: grid(false),
            ..Self::new(least_gain)
        }
    }

    /// The wealth of the bet that the canary is better, now.
    pub fn wealth(&self) -> f64 {
        self.better.log_wealth.exp()
    }

    /// Shown better at level `alpha` (at some pair so far).
    pub fn shown_better(&self, alpha: f64) -> bool {
        self.better.reached(alpha)
    }

    /// Shown worse at level `alpha`.
    pub fn shown_worse(&self, alpha: f64) -> bool {
        self.worse.reached(alpha)
    }

    /// Shown not better by the least gain at level `alpha`.
    pub fn shown_short(&self, alpha: f64) -> bool {
        self.short_of_gain.reached(alpha)
    }

    /// Bets on the next pair's normalised difference `x` in `[−1, 1]`.
    pub fn push(&mut self, x: f64) {
        let x = x.clamp(-1.0, 1.0);
        for bet in [&mut self.better, &mut self.worse, &mut self.short_of_gain]
            .into_iter()
            .chain(self.grid_up.iter_mut())
            .chain(self.grid_down.iter_mut())
        {
            bet.place(&self.estimate, x);
        }
        self.estimate.add(x);
        self.sum += x;
    }

    pub fn pairs(&self) -> usize {
        self.estimate.n
    }

    /// The confidence sequence at level `1 − alpha` (each side `alpha / 2`),
    /// normalised: the thresholds never rejected, widened to the grid
    /// points just outside them ([-1, 1] without the grid).
    pub fn interval(&self, alpha: f64) -> (f64, f64) {
        let side = alpha / 2.0;
        let low = self
            .grid_up
            .iter()
            .take_while(|b| b.reached(side))
            .last()
            .map_or(-1.0, |b| b.threshold);
        let high = self
            .grid_down
            .iter()
            .rev()
            .take_while(|b| b.reached(side))
            .last()
            .map_or(1.0, |b| b.threshold);
        (low, high.max(low))
    }
}

/// What the bets on a canary against its champion show at one look.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Comparison {
    /// Pairs of runs bet on.
    pub pairs: usize,
    /// The pairs' mean difference, canary less champion (reward units).
    pub difference: Option<f64>,
    /// The wealth of betting that the canary is better: `K⁺(0)` now (the
    /// evidence for it; 1 before any pair).
    pub wealth: f64,
    /// Its largest value so far: the canary is shown better at level `α`
    /// once this reaches `1/α`.
    pub peak_wealth: f64,
    /// The largest wealth of betting that it is worse, `K⁻(0)`.
    pub peak_wealth_worse: f64,
    /// The largest wealth of betting that it is not better by the least
    /// gain worth shipping, `K⁻(δ)`.
    pub peak_wealth_short: f64,
    /// The confidence sequence for the difference at the report's level
    /// (reward units); none before the first pair.
    pub interval: Option<(f64, f64)>,
}

impl Comparison {
    /// Shown better at level `alpha`.
    pub fn shown_better(&self, alpha: f64) -> bool {
        self.peak_wealth >= 1.0 / alpha
    }

    /// Shown worse at level `alpha`.
    pub fn shown_worse(&self, alpha: f64) -> bool {
        self.peak_wealth_worse >= 1.0 / alpha
    }

    /// Shown not better by the least gain at level `alpha`.
    pub fn shown_short(&self, alpha: f64) -> bool {
        self.peak_wealth_short >= 1.0 / alpha
    }
}

/// Rewards clipped into `range` and normalised pair differences, for one
/// stream of `(arm, reward)` in the order the episodes started.
pub fn compare(
    stream: impl IntoIterator<Item = (Arm, f64)>,
    range: (f64, f64),
    least_gain: f64,
    report_alpha: f64,
) -> Comparison {
    let width = (range.1 - range.0).max(f64::MIN_POSITIVE);
    let mut pairing = Pairing::default();
    let mut betting = Betting::with_interval(least_gain / width);
    for (arm, reward) in stream {
        let clipped = if reward.is_finite() {
            reward.clamp(range.0, range.1)
        } else {
            continue;
        };
        if let Some(d) = pairing.push(arm, clipped) {
            betting.push(d / width);
        }
    }
    let n = betting.pairs();
    Comparison {
        pairs: n,
        difference: (n > 0).then(|| betting.sum / n as f64 * width),
        wealth: betting.better.log_wealth.exp(),
        peak_wealth: betting.better.peak.exp(),
        peak_wealth_worse: betting.worse.peak.exp(),
        peak_wealth_short: betting.short_of_gain.peak.exp(),
        interval: (n > 0).then(|| {
            let (low, high) = betting.interval(report_alpha);
            (low * width, high * width)
        }),
    }
}

/// Merges two arms' `(started_at, reward)` observations into one stream in
/// the order their episodes started (ties: champion first, then by value's
/// place in its arm, so the order never depends on a reward).
pub fn merged(champion: &[(i64, f64)], canary: &[(i64, f64)]) -> Vec<(Arm, f64)> {
    let mut all: Vec<(i64, u8, usize, Arm, f64)> = champion
        .iter()
        .enumerate()
        .map(|(i, (t, r))| (*t, 0, i, Arm::Champion, *r))
        .chain(canary.iter().enumerate().map(|(i, (t, r))| (*t, 1, i, Arm::Canary, *r)))
        .collect();
    all.sort_by_key(|(t, side, i, _, _)| (*t, *side, *i));
    all.into_iter().map(|(_, _, _, arm, r)| (arm, r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_pair_in_turn_and_the_last_runs_wait() {
        use Arm::{Canary as C, Champion as H};
        let mut p = Pairing::default();
        let out: Vec<Option<f64>> = [(H, 1.0), (H, 0.0), (C, 1.0), (H, 0.0), (C, 0.0), (C, 1.0), (H, 1.0)]
            .into_iter()
            .map(|(a, v)| p.push(a, v))
            .collect();
        // Runs: [H 1 0] [C 1] [H 0] [C 0 1] [H 1 …]: pairs (H, C) = 1 − 0.5
        // when the third run starts, (H, C) = 0.5 − 0 when the fifth does.
        assert_eq!(out, vec![None, None, None, Some(0.5), None, None, Some(0.5)]);
    }

    #[test]
    fn wealth_grows_on_a_clear_gain_and_not_on_none() {
        let gain = compare(
            (0..400).map(|i| {
                if i % 2 == 0 {
                    (Arm::Canary, 1.0)
                } else {
                    (Arm::Champion, 0.0)
                }
            }),
            (0.0, 1.0),
            0.0,
            0.05,
        );
        assert!(gain.shown_better(0.001) && !gain.shown_worse(0.05), "{gain:?}");
        let (low, high) = gain.interval.unwrap();
        assert!(low > 0.9 && high >= 1.0 - 1e-9, "{gain:?}");
        let none = compare(
            (0..400).map(|i| {
                (
                    if i % 2 == 0 { Arm::Canary } else { Arm::Champion },
                    f64::from(i / 2 % 2),
                )
            }),
            (0.0, 1.0),
            0.0,
            0.05,
        );
        assert!(!none.shown_better(0.05) && !none.shown_worse(0.05), "{none:?}");
    }
}
