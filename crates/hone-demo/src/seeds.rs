//! `hone demo --seeds 1,2,3`: the whole demo once per seed, one after the
//! other on the same base policy and the same held-out tasks, then their
//! learning curves in one picture (`plots/seeds.{svg,png}`) and the spread
//! of what they gained (`seeds.json`). A learning result is one seed's
//! luck until it is shown over several.

use super::plots::{self, Curve};
use super::{once, promotions, DemoArgs, Pooled, Summary};
use anyhow::{bail, Context, Result};
use hone_console::note;
use hone_learn::stats;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One seed's run, as `seeds.json` lists it.
#[derive(Debug, Serialize)]
struct SeedRun {
    seed: u64,
    data_dir: PathBuf,
    rounds: usize,
    user_episodes: usize,
    minutes: f64,
    /// Every measurement of the base against every one of the last
    /// champion (`None` when nothing was promoted: the same model).
    pooled: Option<Pooled>,
    promotions: usize,
    regressions_shipped: usize,
    /// Learning seconds and user episodes before the first promotion.
    first_promotion: Option<super::FirstPromotion>,
    /// Users served by a canary that did worse for them than the champion.
    users_on_worse_canaries: usize,
    /// Of those, users on canaries shown worse for them (p < 0.05).
    users_on_shown_worse_canaries: usize,
    /// How long those canaries were out (seconds, summed).
    seconds_of_worse_canaries: f64,
    seconds_of_shown_worse_canaries: f64,
    /// Held-out success and the share of held-out answers that asked a
    /// clarifying question: the base's and the last champion's.
    held_out_success: (f64, f64),
    held_out_asked: (f64, f64),
    /// The users of the first and the last round.
    first_round: Option<super::UserRound>,
    last_round: Option<super::UserRound>,
    /// Candidates a behaviour bound stopped, and how.
    caught: Vec<super::Caught>,
    /// With a `--scenario`: every candidate on the held-out tasks.
    candidates: Vec<super::CandidateMeasured>,
    /// Every canary users met, and how it did for them.
    exposures: Vec<super::Exposure>,
    /// With `--scenario shift`: the drift raised and each kind of task's
    /// held-out success through the run.
    shift: Option<super::shift::ShiftReport>,
}

impl SeedRun {
    fn of(seed: u64, data_dir: PathBuf, s: &Summary) -> Self {
        Self {
            seed,
            data_dir,
            rounds: s.rounds,
            user_episodes: s.user_episodes,
            minutes: s.minutes,
            pooled: s.pooled.clone(),
            promotions: s.promotions.len(),
            regressions_shipped: s.regressions_shipped,
            first_promotion: s.first_promotion,
            users_on_worse_canaries: s.users_on_worse_canaries,
            users_on_shown_worse_canaries: s.users_on_shown_worse_canaries,
            seconds_of_worse_canaries: s.seconds_of_worse_canaries,
            seconds_of_shown_worse_canaries: s.seconds_of_shown_worse_canaries,
            held_out_success: (s.base.rate, s.last.rate),
            held_out_asked: (s.base.asked_rate(), s.last.asked_rate()),
            first_round: s.user_rounds.first().cloned(),
            last_round: s.user_rounds.last().cloned(),
            caught: s.caught.clone(),
            candidates: s.candidates.clone(),
            exposures: s.exposures.clone(),
            shift: s.shift.clone(),
        }
    }

    /// The pooled paired gain; 0 for a run that promoted nothing (its last
    /// champion is its base).
    fn gain(&self) -> f64 {
        self.pooled.as_ref().map_or(0.0, |p| p.gain)
    }
}

/// What `seeds.json` holds: every run, and the pooled gain's spread over
/// them.
#[derive(Debug, Serialize)]
struct Seeds {
    /// The command, commit, date and machine that produced it.
    produced_by: hone_console::Provenance,
    /// `honest` or `sandbox` (`--sandbox-users`).
    mode: &'static str,
    /// The reward (`--reward`), the scenario (`--scenario`) and whether
    /// the behaviour bounds were off (`--unguarded`).
    reward: String,
    scenario: Option<&'static str>,
    unguarded: bool,
    runs: Vec<SeedRun>,
    gain: Spread,
    /// With `--scenario shift`: over the seeds, each kind of task's change
    /// in held-out success from the shift to the end (points of share).
    shift: Option<ShiftSpread>,
    plots: Vec<PathBuf>,
}

/// The change since the shift over the seeds: on the tasks users brought
/// before it (which the loop should keep) and after it (which it should
/// learn).
#[derive(Debug, Serialize)]
struct ShiftSpread {
    old: Spread,
    new: Spread,
}

impl ShiftSpread {
    fn of(runs: &[SeedRun]) -> Option<Self> {
        let reports: Vec<&super::shift::ShiftReport> = runs.iter().filter_map(|r| r.shift.as_ref()).collect();
        if reports.is_empty() {
            return None;
        }
        let change = |o: &super::shift::FamilyOutcome| o.last.rate - o.at_shift.rate;
        Some(Self {
            old: Spread::of(&reports.iter().map(|r| change(&r.old)).collect::<Vec<_>>()),
            new: Spread::of(&reports.iter().map(|r| change(&r.new)).collect::<Vec<_>>()),
        })
    }
}

/// Mean, sample standard deviation (0 for one value), least and most of
/// some values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub sd: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Self {
        Self {
            mean: stats::mean(values).unwrap_or(0.0),
            sd: stats::sample_variance(values).map_or(0.0, f64::sqrt),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// Refuses a seed given twice (its run would overwrite the first).
pub fn check(seeds: &[u64]) -> Result<()> {
    for (i, seed) in seeds.iter().enumerate() {
        if seeds[..i].contains(seed) {
            bail!("--seeds: seed {seed} is given twice");
        }
    }
    Ok(())
}

/// The directory of one seed's run among several (`<data_dir>/seed-N`).
pub fn seed_dir(data_dir: &Path, seed: u64) -> PathBuf {
    data_dir.join(format!("seed-{seed}"))
}

/// Makes the `i`-th of `of` seeds' directory and says it starts there.
pub fn start_seed(data_dir: &Path, seed: u64, (i, of): (usize, usize)) -> Result<PathBuf> {
    let dir = seed_dir(data_dir, seed);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    note(format_args!("seed {seed} ({} of {of}) in {}", i + 1, dir.display()));
    Ok(dir)
}

pub(super) fn run(args: &DemoArgs, data_dir: &Path, base_dir: &Path) -> Result<ExitCode> {
    let (mut runs, mut curves, mut family_curves): (Vec<SeedRun>, Vec<Curve>, Vec<Curve>) =
        (Vec::new(), Vec::new(), Vec::new());
    for (i, &seed) in args.seeds.iter().enumerate() {
        let dir = start_seed(data_dir, seed, (i, args.seeds.len()))?;
        let one = DemoArgs {
            seed,
            seeds: Vec::new(),
            data_dir: dir.clone(),
            ..args.clone()
        };
        let summary = once(one, dir.clone(), base_dir.to_path_buf())?;
        let points = summary
            .measurements
            .iter()
            .map(|m| (m.learning_s / 60.0, m.rate, m.ci95.0, m.ci95.1))
            .collect();
        curves.push((format!("seed {seed}"), points));
        if summary.shift.is_some() {
            let families = args.scenario.map_or(&[][..], super::Scenario::families);
            family_curves.extend(super::shift::curves(
                &format!("seed {seed}: "),
                families,
                &summary.measurements,
            ));
        }
        runs.push(SeedRun::of(seed, dir, &summary));
    }

    let dir = data_dir.join("plots");
    std::fs::create_dir_all(&dir)?;
    let mut plots = plots::seeds(&dir, &curves)?;
    if args.scenario.is_some() {
        // Every seed's candidates on one picture, the first seed's base
        // for reference (all seeds share the base and the held-out tasks).
        let dots: Vec<plots::CandidateDot> = runs
            .iter()
            .flat_map(|r| r.candidates.iter().map(|c| (c.asked, c.success, c.status.clone())))
            .collect();
        if let Some(first) = runs.first() {
            let base = (first.held_out_asked.0, first.held_out_success.0);
            plots.extend(plots::candidates(&dir, base, &dots)?);
        }
    }
    if !family_curves.is_empty() {
        plots.extend(plots::shift(&dir, "shift", &family_curves, args.shift_after_minutes())?);
    }
    let gains: Vec<f64> = runs.iter().map(SeedRun::gain).collect();
    let command: Vec<String> = std::env::args().collect();
    let seeds = Seeds {
        produced_by: hone_console::Provenance::now(&command),
        mode: args.mode(),
        reward: args.reward.name().to_owned(),
        scenario: args.scenario.map(super::Scenario::name),
        unguarded: args.unguarded,
        gain: Spread::of(&gains),
        shift: ShiftSpread::of(&runs),
        runs,
        plots,
    };
    let path = data_dir.join("seeds.json");
    std::fs::write(&path, serde_json::to_string_pretty(&seeds)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    report(&seeds, &path);
    Ok(ExitCode::SUCCESS)
}

fn report(s: &Seeds, path: &Path) {
    note(format_args!(
        "over {} seeds ({}; the same base policy and held-out tasks):",
        s.runs.len(),
        s.mode
    ));
    for r in &s.runs {
        let held_out = match &r.pooled {
            Some(p) => format!("base → last champion {}", p.line()),
            None => "nothing promoted, the base throughout".to_owned(),
        };
        note(format_args!(
            "  seed {}: {} rounds, {} user episodes, {:.1} min; {held_out}; {}, {} shipped a regression; first promotion {}; {} users on a canary worse for them",
            r.seed,
            r.rounds,
            r.user_episodes,
            r.minutes,
            promotions(r.promotions),
            r.regressions_shipped,
            r.first_promotion.map_or("never".to_owned(), |f| format!(
                "after {:.0} s and {} user episodes",
                f.learning_s, f.user_episodes
            )),
            r.users_on_worse_canaries
        ));
        if r.held_out_asked != (0.0, 0.0) || !r.caught.is_empty() {
            note(format_args!(
                "    held-out success {:.1}% → {:.1}%, clarifying questions {:.1}% → {:.1}%; {} candidates stopped for a behaviour",
                r.held_out_success.0 * 100.0,
                r.held_out_success.1 * 100.0,
                r.held_out_asked.0 * 100.0,
                r.held_out_asked.1 * 100.0,
                r.caught.len()
            ));
        }
        for line in r.shift.iter().flat_map(super::shift::ShiftReport::lines) {
            note(format_args!("    {line}"));
        }
    }
    let promotions_total: usize = s.runs.iter().map(|r| r.promotions).sum();
    let regressions: usize = s.runs.iter().map(|r| r.regressions_shipped).sum();
    note(format_args!(
        "  paired held-out gain over the seeds: mean {:+.1} points, sd {:.1}, from {:+.1} to {:+.1}; regressions shipped: {regressions} of {}",
        s.gain.mean * 100.0,
        s.gain.sd * 100.0,
        s.gain.min * 100.0,
        s.gain.max * 100.0,
        promotions(promotions_total),
    ));
    if let Some(shift) = &s.shift {
        for (o, which) in [(&shift.old, "before"), (&shift.new, "after")] {
            note(format_args!(
                "  held-out change from the shift to the end on the tasks users brought {which} it: mean {:+.1} points, sd {:.1}, from {:+.1} to {:+.1}",
                o.mean * 100.0,
                o.sd * 100.0,
                o.min * 100.0,
                o.max * 100.0
            ));
        }
    }
    for p in &s.plots {
        note(format_args!("  plot: {}", p.display()));
    }
    note(format_args!("  summary: {}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn the_spread_matches_pythons_statistics_module() {
        // The pooled gains of three ten-minute seeds of the demo; expected
        // values from `python3 -c "import statistics as st; g = [7/90, 0.0,
        // 13/120]; print(st.mean(g), st.stdev(g))"`.
        let s = Spread::of(&[7.0 / 90.0, 0.0, 13.0 / 120.0]);
        assert!((s.mean - 0.062_037_037_037_037_036).abs() < 1e-15, "{s:?}");
        assert!((s.sd - 0.055_855_670_858_724_72).abs() < 1e-15, "{s:?}");
        assert_eq!((s.min, s.max), (0.0, 13.0 / 120.0));
        let one = Spread::of(&[0.25]);
        assert_eq!(
            one,
            Spread {
                mean: 0.25,
                sd: 0.0,
                min: 0.25,
                max: 0.25
            }
        );
    }
}
