//! Simulated canaries, decided exactly as `watch` decides a real one: each
//! episode goes to the canary with the share its evidence allows
//! ([`crate::watch::share_for`]), its reward enters the run pairing and the
//! bets, and the rule looks after every episode. The test suite checks the
//! false-promotion rate on it; `hone bench canary` reports power with it.

use super::betting::{Arm, Betting, Pairing};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What one episode's reward can be: `success` with probability `p`, and
/// otherwise `failure`, or (three-valued) `bad` with probability
/// `bad_share` of the failures.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Shape {
    /// +1 or −0.5: the demo's accepted answer or complaint.
    Bernoulli,
    /// +1, 0, or −2 for a fifth of the failures: a rare large penalty.
    Skewed,
}

impl Shape {
    pub fn range(self) -> (f64, f64) {
        match self {
            Shape::Bernoulli => (-0.5, 1.0),
            Shape::Skewed => (-2.0, 1.0),
        }
    }

    fn draw(self, rng: &mut StdRng, p: f64) -> f64 {
        let success = rng.random::<f64>() < p;
        match (self, success) {
            (_, true) => 1.0,
            (Shape::Bernoulli, false) => -0.5,
            (Shape::Skewed, false) if rng.random::<f64>() < 0.2 => -2.0,
            (Shape::Skewed, false) => 0.0,
        }
    }

    /// The mean reward at success rate `p`.
    pub fn mean(self, p: f64) -> f64 {
        match self {
            Shape::Bernoulli => p - 0.5 * (1.0 - p),
            Shape::Skewed => p - 0.4 * (1.0 - p),
        }
    }
}

/// The rule a simulated canary runs under.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Rule {
    /// The promotion level (e-LOND's αₜ for the canary's place).
    pub level: f64,
    /// The rollback level (1 − the monitors' confidence).
    pub rollback_level: f64,
    /// Reward units.
    pub least_gain: f64,
    pub start_share: f64,
    pub max_share: f64,
    /// Canary episodes after which an undecided canary is rolled back.
    pub max_episodes: usize,
}

/// How one simulated canary ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Promoted,
    RolledBack,
}

/// One simulated canary's fate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fate {
    pub ending: Ending,
    pub canary_episodes: usize,
    pub champion_episodes: usize,
}

/// Runs one canary whose users succeed with probability `canary_p` against
/// a champion's `champion_p`.
pub fn canary(rule: &Rule, shape: Shape, champion_p: f64, canary_p: f64, rng: &mut StdRng) -> Fate {
    let (low, high) = shape.range();
    let width = high - low;
    let mut pairing = Pairing::default();
    let mut betting = Betting::new(rule.least_gain / width);
    let (mut canary_episodes, mut champion_episodes) = (0, 0);
    let mut share = rule.start_share;
    loop {
        let to_canary = rng.random::<f64>() < share;
        let (arm, p) = if to_canary {
            canary_episodes += 1;
            (Arm::Canary, canary_p)
        } else {
            champion_episodes += 1;
            (Arm::Champion, champion_p)
        };
        if let Some(d) = pairing.push(arm, shape.draw(rng, p)) {
            betting.push(d / width);
        }
        let ending = if betting.shown_worse(rule.rollback_level) || betting.shown_short(rule.rollback_level) {
            Some(Ending::RolledBack)
        } else if betting.shown_better(rule.level) {
            Some(Ending::Promoted)
        } else if canary_episodes >= rule.max_episodes {
            Some(Ending::RolledBack)
        } else {
            None
        };
        if let Some(ending) = ending {
            return Fate {
                ending,
                canary_episodes,
                champion_episodes,
            };
        }
        share = crate::watch::share_for(rule.start_share, rule.max_share, betting.wealth());
    }
}

/// The share of `runs` canaries promoted, and their mean canary episodes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Rates {
    pub runs: usize,
    pub promoted: f64,
    pub mean_canary_episodes: f64,
    /// Mean episodes of both arms while the canary ran.
    pub mean_episodes: f64,
}

/// `runs` canaries, seeded.
pub fn rates(rule: &Rule, shape: Shape, champion_p: f64, canary_p: f64, runs: usize, seed: u64) -> Rates {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut promoted, mut canary_episodes, mut episodes) = (0usize, 0usize, 0usize);
    for _ in 0..runs {
        let fate = canary(rule, shape, champion_p, canary_p, &mut rng);
        promoted += usize::from(fate.ending == Ending::Promoted);
        canary_episodes += fate.canary_episodes;
        episodes += fate.canary_episodes + fate.champion_episodes;
    }
    let n = runs.max(1) as f64;
    Rates {
        runs,
        promoted: promoted as f64 / n,
        mean_canary_episodes: canary_episodes as f64 / n,
        mean_episodes: episodes as f64 / n,
    }
}
