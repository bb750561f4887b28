//! `hone bench canary`: the online test's error and power, by simulation of
//! canaries decided exactly as the watcher decides them
//! (`hone_learn::stats::simulate`): for each reward shape and champion
//! success rate, the share of canaries promoted when they are as good as
//! the champion (the false-promotion rate, at the first canary's level and
//! at the 20th's with no promotion before it) and when they are +5, +10 or
//! +20 points better (the power), with the episodes a decision took. Not a
//! speed benchmark: a table of the rule's guarantees as data.

use anyhow::Result;
use hone_learn::stats::online_fdr::e_lond_level;
use hone_learn::stats::simulate::{rates, Rule, Shape};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

pub struct Options {
    /// Simulated canaries per cell.
    pub runs: usize,
    /// The canary's starting share and the cap its share grows to.
    pub start_share: f64,
    pub max_share: f64,
    /// Canary episodes after which an undecided canary is rolled back.
    pub max_episodes: usize,
    /// Reward units.
    pub least_gain: f64,
    pub out: Option<PathBuf>,
}

pub fn run(o: Options) -> Result<ExitCode> {
    let mut out = crate::report::Report::new(o.out.clone());
    let rule = |place: u64| Rule {
        level: e_lond_level(0.05, place, 0),
        rollback_level: 0.05,
        least_gain: o.least_gain,
        start_share: o.start_share,
        max_share: o.max_share,
        max_episodes: o.max_episodes,
    };
    writeln!(
        out,
        "Simulated canaries ({} per cell), a look after every episode; share {:.0}% growing with the evidence up to {:.0}%; rolled back once shown worse{} or at {} canary episodes; α = 0.05 over the sequence (e-LOND): the 1st canary is promoted at level {:.4}, the 20th without a promotion before it at {:.6}.",
        o.runs,
        o.start_share * 100.0,
        o.max_share * 100.0,
        if o.least_gain > 0.0 { format!(" or short of a {} gain", o.least_gain) } else { String::new() },
        o.max_episodes,
        e_lond_level(0.05, 1, 0),
        e_lond_level(0.05, 20, 0)
    )?;
    writeln!(
        out,
        "| reward | champion success | gain points | reward gain | place | promoted | canary episodes | episodes |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|")?;
    let mut seed = 1u64;
    for shape in [Shape::Bernoulli, Shape::Skewed] {
        for p in [0.05, 0.5, 0.8, 0.95] {
            for (gain, place) in [(0.0, 1), (0.0, 20), (0.05, 1), (0.10, 1), (0.20, 1), (0.10, 20)] {
                let q = p + gain;
                if q > 1.0 + 1e-9 {
                    continue;
                }
                seed += 1;
                let r = rates(&rule(place), shape, p, q.min(1.0), o.runs, seed);
                writeln!(
                    out,
                    "| {} | {p:.2} | {:+.0} | {:+.3} | {place} | {:.4} | {:.0} | {:.0} |",
                    match shape {
                        Shape::Bernoulli => "+1 / -0.5",
                        Shape::Skewed => "+1 / 0 / -2",
                    },
                    gain * 100.0,
                    shape.mean(q.min(1.0)) - shape.mean(p),
                    r.promoted,
                    r.mean_canary_episodes,
                    r.mean_episodes
                )?;
            }
        }
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
