//! `hone bench learn --seeds 1,2,3`: the race once per seed, each in
//! `<data-dir>/seed-N` from the same base, then who reached the threshold
//! first in how many seeds and by how much: a table, `bench-learn-seeds.json`
//! and `bench-learn-seeds.{svg,png}`. One seed's race is one draw of the
//! held-out measurement's noise and of each learner's luck; "faster" is a
//! claim about several.
//!
//! Every pair of learners is compared seed by seed on their first
//! measurement at or above the threshold: first in how many seeds (a seed
//! where neither reached it, or both at once, is a tie), the exact sign
//! test on those counts, and, over the seeds where both reached it, the
//! paired difference in seconds of learning (mean with a bootstrap 95%
//! interval, median).

use super::{once, prepare, read_report, scenario, LearnArgs, Report};
use anyhow::{bail, Result};
use hone_demo as demo;
use hone_learn::stats;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One seed's race as the aggregate reads it.
#[derive(Debug, Serialize)]
struct Race {
    seed: u64,
    /// The base's held-out success as hone's side measured it.
    base: f64,
    /// Seconds of learning to each learner's first measurement at or above
    /// the threshold, in the report's order of learners (`None`: not within
    /// the budget).
    reached_s: Vec<Option<f64>>,
}

impl Race {
    fn of(report: &Report) -> Self {
        Self {
            seed: report.seed,
            base: report
                .sides
                .first()
                .and_then(|side| side.points.first())
                .map_or(0.0, |p| p.rate),
            reached_s: report
                .sides
                .iter()
                .map(|side| side.reached.as_ref().map(|p| p.learning_s))
                .collect(),
        }
    }
}

/// Two learners over the seeds.
#[derive(Debug, Serialize)]
struct Versus {
    first: String,
    second: String,
    /// Seeds where `first` reached the threshold sooner (or alone).
    first_sooner: u64,
    /// Seeds where `second` did.
    second_sooner: u64,
    /// Seeds where neither reached it, or both at the same time.
    ties: u64,
    /// Exact two-sided sign test on the two counts (ties dropped).
    sign_test_p: f64,
    /// Seeds where both reached it.
    both_reached: usize,
    /// `second`'s time minus `first`'s, over the seeds where both reached
    /// it (positive: `first` was sooner): mean, its bootstrap 95%
    /// interval, median.
    mean_lead_s: Option<f64>,
    mean_lead_ci95: Option<(f64, f64)>,
    median_lead_s: Option<f64>,
}

impl Versus {
    fn of(races: &[Race], (i, first): (usize, &str), (j, second): (usize, &str)) -> Self {
        let (mut first_sooner, mut second_sooner, mut ties) = (0, 0, 0);
        let mut leads = Vec::new();
        for race in races {
            match (race.reached_s[i], race.reached_s[j]) {
                (Some(a), Some(b)) => {
                    leads.push(b - a);
                    match a.total_cmp(&b) {
                        std::cmp::Ordering::Less => first_sooner += 1,
                        std::cmp::Ordering::Greater => second_sooner += 1,
                        std::cmp::Ordering::Equal => ties += 1,
                    }
                }
                (Some(_), None) => first_sooner += 1,
                (None, Some(_)) => second_sooner += 1,
                (None, None) => ties += 1,
            }
        }
        Self {
            first: first.to_owned(),
            second: second.to_owned(),
            first_sooner,
            second_sooner,
            ties,
            sign_test_p: stats::sign_test(first_sooner, second_sooner),
            both_reached: leads.len(),
            mean_lead_s: stats::mean(&leads),
            // Seeded by the races' seeds, so a report is the same each time.
            mean_lead_ci95: stats::bootstrap_ci(&leads, 0.95, races.iter().map(|r| r.seed).sum()),
            median_lead_s: stats::median(&leads),
        }
    }
}

/// What `bench-learn-seeds.json` holds.
#[derive(Debug, Serialize)]
struct Seeds {
    /// The command, commit, date and machine that wrote it, and those of
    /// each race (the same run, or an earlier one with `--report`).
    produced_by: hone_console::Provenance,
    races_produced_by: Vec<Option<hone_console::Provenance>>,
    threshold: f64,
    minutes: f64,
    held_out_tasks: u64,
    base: PathBuf,
    /// The learners, in the order of every race's `reached_s`.
    learners: Vec<String>,
    races: Vec<Race>,
    /// Every pair of learners.
    versus: Vec<Versus>,
    /// `--scenario`, if any, and each learner's figures under it.
    #[serde(skip_serializing_if = "Option::is_none")]
    scenario: Option<demo::Scenario>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    under_scenario: Vec<scenario::OverSeeds>,
    plots: Vec<PathBuf>,
}

pub(super) fn run(args: &LearnArgs) -> Result<ExitCode> {
    demo::check_seeds(&args.seeds)?;
    let mut reports = Vec::new();
    if args.report {
        for &seed in &args.seeds {
            reports.push(read_report(&demo::seed_dir(&args.data_dir, seed))?);
        }
    } else {
        let (data_dir, base) = prepare(args)?;
        for (i, &seed) in args.seeds.iter().enumerate() {
            let dir = demo::start_seed(&data_dir, seed, (i, args.seeds.len()))?;
            let one = LearnArgs {
                seed,
                seeds: Vec::new(),
                data_dir: dir.clone(),
                ..args.clone()
            };
            reports.push(once(&one, &dir, &base)?);
        }
    }
    let seeds = aggregate(&reports, &args.data_dir)?;
    let path = args.data_dir.join("bench-learn-seeds.json");
    std::fs::write(&path, serde_json::to_string_pretty(&seeds)? + "\n")?;
    print(&seeds, &path)?;
    Ok(ExitCode::SUCCESS)
}

/// The races side by side; refuses races run with different learners,
/// thresholds or tasks (their times would not compare).
fn aggregate(reports: &[Report], data_dir: &Path) -> Result<Seeds> {
    let Some(first) = reports.first() else {
        bail!("--seeds: no race to aggregate");
    };
    let learners: Vec<String> = first.sides.iter().map(|s| s.name().to_owned()).collect();
    for r in reports {
        let names: Vec<String> = r.sides.iter().map(|s| s.name().to_owned()).collect();
        if names != learners
            || r.threshold != first.threshold
            || r.held_out_tasks != first.held_out_tasks
            || r.scenario != first.scenario
        {
            bail!(
                "--seeds: seed {}'s race ({} at {:.0}% on {} tasks, scenario {:?}) differs from seed {}'s ({} at {:.0}% on {} tasks, scenario {:?})",
                r.seed,
                names.join(", "),
                r.threshold * 100.0,
                r.held_out_tasks,
                r.scenario,
                first.seed,
                learners.join(", "),
                first.threshold * 100.0,
                first.held_out_tasks,
                first.scenario
            );
        }
    }
    let races: Vec<Race> = reports.iter().map(Race::of).collect();
    let mut versus = Vec::new();
    for i in 0..learners.len() {
        for j in i + 1..learners.len() {
            versus.push(Versus::of(&races, (i, &learners[i]), (j, &learners[j])));
        }
    }
    let mut plots = demo::plots::race_seeds(
        data_dir,
        &races.iter().map(|r| r.seed).collect::<Vec<_>>(),
        &learners
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), races.iter().map(|r| r.reached_s[i]).collect()))
            .collect::<Vec<_>>(),
        first.threshold,
    )?;
    // Learner by learner, each seed's curve.
    let named: Vec<(String, &super::Side)> = (0..learners.len())
        .flat_map(|i| reports.iter().map(move |r| (r, &r.sides[i])))
        .map(|(r, s)| (format!("{}, seed {}", s.name(), r.seed), s))
        .collect();
    plots.extend(scenario::plots(
        first.scenario,
        first.held_out_tasks,
        &named,
        data_dir,
        "bench-learn-seeds",
    )?);
    let command: Vec<String> = std::env::args().collect();
    Ok(Seeds {
        produced_by: hone_console::Provenance::now(&command),
        races_produced_by: reports.iter().map(|r| r.produced_by.clone()).collect(),
        threshold: first.threshold,
        minutes: first.minutes,
        held_out_tasks: first.held_out_tasks,
        base: first.base.clone(),
        learners,
        races,
        versus,
        scenario: first.scenario,
        under_scenario: scenario::over_seeds(reports),
        plots,
    })
}

fn print(s: &Seeds, path: &Path) -> Result<()> {
    let mut out = std::io::stdout();
    let seconds = |t: Option<f64>| t.map_or("not reached".to_owned(), |t| format!("{t:.1} s"));
    writeln!(
        out,
        "\nhone bench learn over {} seeds — the first held-out measurement ≥ {:.0}% on {} tasks, in seconds of learning \
         (measuring left out; budget {} minutes each), base {}\n",
        s.races.len(),
        s.threshold * 100.0,
        s.held_out_tasks,
        s.minutes,
        s.base.display()
    )?;
    writeln!(out, "| seed | base | {} |", s.learners.join(" | "))?;
    writeln!(out, "|---|---|{}", "---|".repeat(s.learners.len()))?;
    for race in &s.races {
        let times: Vec<String> = race.reached_s.iter().map(|t| seconds(*t)).collect();
        writeln!(
            out,
            "| {} | {:.1}% | {} |",
            race.seed,
            race.base * 100.0,
            times.join(" | ")
        )?;
    }
    let medians: Vec<String> = (0..s.learners.len())
        .map(|i| {
            let reached: Vec<f64> = s.races.iter().filter_map(|r| r.reached_s[i]).collect();
            match stats::median(&reached) {
                Some(m) => format!("{m:.1} s ({} of {} reached)", reached.len(), s.races.len()),
                None => "never reached".to_owned(),
            }
        })
        .collect();
    writeln!(out, "| median | | {} |", medians.join(" | "))?;
    writeln!(out)?;
    for v in &s.versus {
        let lead = match (v.mean_lead_s, v.mean_lead_ci95, v.median_lead_s) {
            (Some(mean), Some((lo, hi)), Some(median)) => format!(
                "; where both reached it ({} seeds), {} minus {}: mean {mean:+.1} s (95% CI {lo:+.1} to {hi:+.1}), median {median:+.1} s",
                v.both_reached, v.second, v.first
            ),
            _ => "; no seed where both reached it".to_owned(),
        };
        writeln!(
            out,
            "{} vs {}: sooner in {} and {} seeds, {} tied (sign test p = {:.4}){lead}",
            v.first, v.second, v.first_sooner, v.second_sooner, v.ties, v.sign_test_p
        )?;
    }
    if let Some(name) = s.scenario {
        writeln!(out, "\nUnder --scenario {} over {} seeds:", name.name(), s.races.len())?;
        scenario::print_over_seeds(&s.under_scenario, s.races.len(), &mut out)?;
    }
    for plot in &s.plots {
        writeln!(out, "plot: {}", plot.display())?;
    }
    writeln!(out, "summary: {}", path.display())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn race(seed: u64, reached_s: &[Option<f64>]) -> Race {
        Race {
            seed,
            base: 0.45,
            reached_s: reached_s.to_vec(),
        }
    }

    #[test]
    fn pairs_count_who_was_sooner_and_by_how_much_where_both_reached() {
        let races = [
            race(1, &[Some(9.0), Some(15.0)]),
            race(2, &[Some(9.0), Some(9.5)]),
            race(3, &[Some(45.0), Some(30.0)]),
            race(4, &[Some(9.0), None]),
            race(5, &[None, None]),
            race(6, &[None, Some(20.0)]),
        ];
        let v = Versus::of(&races, (0, "a"), (1, "b"));
        // a sooner in 1, 2 and 4 (alone); b in 3 and 6 (alone); 5 a tie.
        assert_eq!((v.first_sooner, v.second_sooner, v.ties), (3, 2, 1));
        // scipy.stats.binomtest(3, 5).pvalue == 1.0
        assert_eq!(v.sign_test_p, 1.0);
        // Leads where both reached: 6.0, 0.5, −15.0.
        assert_eq!(v.both_reached, 3);
        assert!((v.mean_lead_s.unwrap() - (6.0 + 0.5 - 15.0) / 3.0).abs() < 1e-12);
        assert_eq!(v.median_lead_s, Some(0.5));
        let (lo, hi) = v.mean_lead_ci95.unwrap();
        assert!(lo <= v.mean_lead_s.unwrap() && v.mean_lead_s.unwrap() <= hi && lo >= -15.0 && hi <= 6.0);
        // The same pair the other way round mirrors every figure.
        let w = Versus::of(&races, (1, "b"), (0, "a"));
        assert_eq!((w.first_sooner, w.second_sooner, w.ties), (2, 3, 1));
        assert_eq!(w.median_lead_s, Some(-0.5));
    }

    #[test]
    fn one_learner_sooner_in_ten_seeds_of_ten_is_significant() {
        let races: Vec<Race> = (1..=10).map(|s| race(s, &[Some(9.0), Some(9.0 + s as f64)])).collect();
        let v = Versus::of(&races, (0, "a"), (1, "b"));
        assert_eq!((v.first_sooner, v.second_sooner), (10, 0));
        // scipy.stats.binomtest(10, 10).pvalue == 2 / 1024
        assert!((v.sign_test_p - 2.0 / 1024.0).abs() < 1e-12);
        assert_eq!(v.median_lead_s, Some(5.5));
    }
}
