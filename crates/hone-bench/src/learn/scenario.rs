//! `hone bench learn --scenario`: what each learner did under one of the
//! demo's real-world conditions, read from its held-out curve (and, for
//! hone's loops, from what the demo's summary says), for one race and over
//! seeds.
//!
//! - `hack`: held-out success, and the share of held-out answers that asked
//!   a clarifying question instead of answering — at the base, at the end
//!   and at most, over what served (the loop's champions, the other
//!   learners' checkpoints) and, for hone's loops, over every candidate
//!   training made; and the candidates a behaviour bound stopped for it.
//! - `shift`: each kind of task's held-out success when users changed and
//!   at the end, with the paired change since the shift, and the first
//!   drift the loop raised after it (hone's loops only: the others sample
//!   their own tasks and meet no change).

use super::{Report, Side};
use anyhow::Result;
use hone_demo::plots::{self, Curve};
use hone_demo::{Measured, Scenario, ShiftReport, Spread};
use hone_learn::stats::wilson_95;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The behaviour the hack scenario's users are blind to, as the gate's
/// bounds and the monitors name it.
const ASKING: &str = "clarifying_question";

/// A held-out measurement on one kind of task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyRate {
    pub family: String,
    pub rate: f64,
    pub ci95: (f64, f64),
}

impl FamilyRate {
    /// Each kind of task's rate in `measured`, in the order first met
    /// (none for a measurement of one kind).
    pub fn all_of(measured: &Measured) -> Vec<Self> {
        let mut families: Vec<&String> = Vec::new();
        for family in &measured.families {
            if !families.contains(&family) {
                families.push(family);
            }
        }
        families
            .into_iter()
            .map(|family| {
                let of = measured.of_family(family);
                Self {
                    family: family.clone(),
                    rate: of.rate,
                    ci95: of.ci95,
                }
            })
            .collect()
    }
}

/// A learner's figures under the hack scenario (shares of 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hack {
    pub learner: String,
    /// Held-out success of the base and of the last that served.
    pub success: (f64, f64),
    /// Held-out answers that asked: the base's, the last's that served,
    /// and the most of any that served.
    pub asked: (f64, f64, f64),
    /// hone's loops: the most of any candidate training made, served or not.
    pub candidates_asked: Option<f64>,
    /// hone's loops: candidates a behaviour bound stopped for asking
    /// (`None`: a learner without guards).
    pub caught_asking: Option<usize>,
}

impl Hack {
    pub fn of(side: &Side) -> Option<Self> {
        let (first, last) = (side.points.first()?, side.points.last()?);
        let most = side.points.iter().map(|p| p.asked).fold(0.0, f64::max);
        Some(Self {
            learner: side.name().to_owned(),
            success: (first.rate, last.rate),
            asked: (first.asked, last.asked, most),
            candidates_asked: side
                .caught
                .as_ref()
                .map(|_| side.candidates.iter().map(|c| c.asked).fold(0.0, f64::max)),
            caught_asking: side
                .caught
                .as_ref()
                .map(|caught| caught.iter().filter(|c| c.behaviour == ASKING).count()),
        })
    }
}

/// A loop's figures under the shift scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Shift {
    pub learner: String,
    /// The first round of new users (`None`: the run ended before).
    pub shift_round: Option<usize>,
    /// Rounds from the shift to the first drift a cycle raised at or after
    /// it (0: the cycle right after the first round of new users).
    pub drift_after_rounds: Option<usize>,
    /// Drifts raised before the shift (false alarms).
    pub drifts_before: usize,
    /// Held-out success on the old and new kinds: change from the shift
    /// to the end, in shares.
    pub old_change: f64,
    pub new_change: f64,
    pub report: ShiftReport,
}

impl Shift {
    pub fn of(side: &Side) -> Option<Self> {
        let report = side.shift.clone()?;
        let shift_round = report.round;
        let (before, after): (Vec<_>, Vec<_>) = report
            .drifts
            .iter()
            .partition(|d| shift_round.is_none_or(|r| d.round < r));
        Some(Self {
            learner: side.name().to_owned(),
            shift_round,
            drift_after_rounds: shift_round.and_then(|r| after.first().map(|d| d.round - r)),
            drifts_before: before.len(),
            old_change: report.old.last.rate - report.old.at_shift.rate,
            new_change: report.new.last.rate - report.new.at_shift.rate,
            report,
        })
    }
}

/// The scenario's pictures of `sides` (each with the name its curves go
/// by), as `<name>-asking` (hack: the share of held-out answers that
/// asked back) or `<name>-shift` (each kind of task's success) in `dir`;
/// none without a scenario.
pub fn plots(
    scenario: Option<Scenario>,
    held_out: u64,
    sides: &[(String, &Side)],
    dir: &Path,
    name: &str,
) -> Result<Vec<PathBuf>> {
    let minutes = |s: f64| s / 60.0;
    match scenario {
        None => Ok(Vec::new()),
        Some(Scenario::Hack) => {
            let curves: Vec<Curve> = sides
                .iter()
                .map(|(label, side)| {
                    let points = side.points.iter().map(|p| {
                        let asked = (p.asked * held_out as f64).round() as u64;
                        let (lo, hi) = wilson_95(asked, held_out).unwrap_or((0.0, 1.0));
                        (minutes(p.learning_s), p.asked, lo, hi)
                    });
                    (label.clone(), points.collect())
                })
                .collect();
            plots::asking(dir, &format!("{name}-asking"), &curves)
        }
        Some(Scenario::Shift) => {
            let Some(at) = sides.iter().find_map(|(_, side)| side.shift.as_ref()) else {
                return Ok(Vec::new());
            };
            let mut curves: Vec<Curve> = Vec::new();
            for (label, side) in sides {
                let families = side.points.first().map_or(&[][..], |p| &p.families[..]);
                for family in families.iter().map(|f| &f.family) {
                    let points = side.points.iter().filter_map(|p| {
                        let f = p.families.iter().find(|f| &f.family == family)?;
                        Some((minutes(p.learning_s), f.rate, f.ci95.0, f.ci95.1))
                    });
                    curves.push((format!("{label}: {family}"), points.collect()));
                }
            }
            plots::shift(dir, &format!("{name}-shift"), &curves, at.after_minutes)
        }
    }
}

/// "48.3%".
fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// The race's scenario table, after its main one (nothing without a
/// scenario).
pub fn print(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    match report.scenario {
        Some(Scenario::Hack) => {
            writeln!(
                out,
                "\nUsers with a blind spot (silent when asked a clarifying question), on {} held-out tasks:\n",
                report.held_out_tasks
            )?;
            writeln!(out, "| learner | success base → last | asked base → last (most served) | most asked by a candidate | stopped for asking |")?;
            writeln!(out, "|---|---|---|---|---|")?;
            for hack in report.sides.iter().filter_map(Hack::of) {
                writeln!(
                    out,
                    "| {} | {} → {} | {} → {} ({}) | {} | {} |",
                    hack.learner,
                    pct(hack.success.0),
                    pct(hack.success.1),
                    pct(hack.asked.0),
                    pct(hack.asked.1),
                    pct(hack.asked.2),
                    hack.candidates_asked.map_or("— (no gate)".to_owned(), pct),
                    hack.caught_asking.map_or("— (no guards)".to_owned(), |n| n.to_string()),
                )?;
            }
        }
        Some(Scenario::Shift) => {
            writeln!(
                out,
                "\nUsers who change, on {} held-out tasks of each kind:\n",
                report.held_out_tasks
            )?;
            writeln!(out, "| learner | users changed in round | first drift after it | drifts before | old kind at shift → last (paired change, 95% CI) | new kind at shift → last (paired change, 95% CI) |")?;
            writeln!(out, "|---|---|---|---|---|---|")?;
            for shift in report.sides.iter().filter_map(Shift::of) {
                let kind = |o: &hone_demo::FamilyOutcome| {
                    let change = o
                        .since_shift
                        .as_ref()
                        .map_or("same version".to_owned(), |p| match p.gain_ci95 {
                            Some((lo, hi)) => {
                                format!("{:+.1} ({:+.1} to {:+.1})", p.gain * 100.0, lo * 100.0, hi * 100.0)
                            }
                            None => format!("{:+.1}", p.gain * 100.0),
                        });
                    format!(
                        "{}: {} → {} ({change})",
                        o.family,
                        pct(o.at_shift.rate),
                        pct(o.last.rate)
                    )
                };
                writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} |",
                    shift.learner,
                    shift.shift_round.map_or("never".to_owned(), |r| r.to_string()),
                    shift
                        .drift_after_rounds
                        .map_or("none".to_owned(), |n| format!("{n} rounds later")),
                    shift.drifts_before,
                    kind(&shift.report.old),
                    kind(&shift.report.new),
                )?;
            }
        }
        None => {}
    }
    Ok(())
}

/// A learner's scenario figures over the seeds.
#[derive(Debug, Serialize)]
pub struct OverSeeds {
    pub learner: String,
    /// Held-out success of the last that served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_success: Option<Spread>,
    /// hack: held-out answers that asked, the last that served and the
    /// most of any that served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_asked: Option<Spread>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub most_asked: Option<Spread>,
    /// hack, hone's loops: the most of any candidate, and candidates
    /// stopped for asking in all seeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates_asked: Option<Spread>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caught_asking: Option<usize>,
    /// shift: change since the shift on the old and the new kind, and,
    /// per seed, rounds from the change to the first drift raised (cycles
    /// run only while no canary is out, so the first after the change may
    /// come rounds later).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_change: Option<Spread>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_change: Option<Spread>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift_after_rounds: Vec<Option<usize>>,
    /// Each seed's figures, in the races' order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hack: Vec<Hack>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shift: Vec<Shift>,
}

/// Each learner's scenario figures over `reports` (one per seed, the same
/// learners in the same order); empty without a scenario.
pub fn over_seeds(reports: &[Report]) -> Vec<OverSeeds> {
    let Some(first) = reports.first() else {
        return Vec::new();
    };
    let spread = |values: Vec<f64>| (!values.is_empty()).then(|| Spread::of(&values));
    (0..first.sides.len())
        .map(|i| {
            let sides: Vec<&Side> = reports.iter().filter_map(|r| r.sides.get(i)).collect();
            let hacks: Vec<Hack> = match first.scenario {
                Some(Scenario::Hack) => sides.iter().filter_map(|s| Hack::of(s)).collect(),
                _ => Vec::new(),
            };
            let shifts: Vec<Shift> = sides.iter().filter_map(|s| Shift::of(s)).collect();
            let last_success = match (hacks.is_empty(), shifts.is_empty()) {
                (true, true) => None,
                _ => spread(sides.iter().filter_map(|s| s.points.last()).map(|p| p.rate).collect()),
            };
            OverSeeds {
                learner: first.sides[i].name().to_owned(),
                last_success,
                last_asked: spread(hacks.iter().map(|h| h.asked.1).collect()),
                most_asked: spread(hacks.iter().map(|h| h.asked.2).collect()),
                candidates_asked: spread(hacks.iter().filter_map(|h| h.candidates_asked).collect()),
                caught_asking: hacks
                    .iter()
                    .map(|h| h.caught_asking)
                    .sum::<Option<usize>>()
                    .filter(|_| !hacks.is_empty()),
                old_change: spread(shifts.iter().map(|s| s.old_change).collect()),
                new_change: spread(shifts.iter().map(|s| s.new_change).collect()),
                drift_after_rounds: shifts.iter().map(|s| s.drift_after_rounds).collect(),
                hack: hacks,
                shift: shifts,
            }
        })
        .filter(|o| o.last_success.is_some())
        .collect()
}

/// The seeds' scenario figures as lines of the seeds' table.
pub fn print_over_seeds(all: &[OverSeeds], seeds: usize, out: &mut impl Write) -> std::io::Result<()> {
    let points = |s: &Spread| {
        format!(
            "{:.1}% (sd {:.1}, {:.1}–{:.1})",
            s.mean * 100.0,
            s.sd * 100.0,
            s.min * 100.0,
            s.max * 100.0
        )
    };
    let change = |s: &Spread| {
        format!(
            "{:+.1} points (sd {:.1}, {:+.1} to {:+.1})",
            s.mean * 100.0,
            s.sd * 100.0,
            s.min * 100.0,
            s.max * 100.0
        )
    };
    for o in all {
        let mut parts = Vec::new();
        if let Some(s) = &o.last_success {
            parts.push(format!("held-out success at the end {}", points(s)));
        }
        if let Some(s) = &o.last_asked {
            parts.push(format!("asking at the end {}", points(s)));
        }
        if let Some(s) = &o.most_asked {
            parts.push(format!("most asking served {}", points(s)));
        }
        if let Some(s) = &o.candidates_asked {
            parts.push(format!("most asking of a candidate {}", points(s)));
        }
        if let Some(n) = o.caught_asking {
            parts.push(format!("{n} candidates stopped for asking"));
        }
        if let Some(s) = &o.old_change {
            parts.push(format!("old kind since the shift {}", change(s)));
        }
        if let Some(s) = &o.new_change {
            parts.push(format!("new kind since the shift {}", change(s)));
        }
        if !o.drift_after_rounds.is_empty() {
            let rounds: Vec<String> = o
                .drift_after_rounds
                .iter()
                .map(|r| r.map_or("none".to_owned(), |r| r.to_string()))
                .collect();
            parts.push(format!(
                "first drift raised {} rounds after the change ({seeds} seeds in order)",
                rounds.join(", ")
            ));
        }
        writeln!(out, "{}: {}", o.learner, parts.join("; "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_of_two_kinds_gives_each_kinds_rate() {
        let mut m = Measured::new(0, "v".into(), vec![true, false, true, true]);
        m.families = ["take-away", "take-away", "add-up", "add-up"]
            .map(String::from)
            .to_vec();
        let rates = FamilyRate::all_of(&m);
        assert_eq!(
            rates.iter().map(|r| (r.family.as_str(), r.rate)).collect::<Vec<_>>(),
            [("take-away", 0.5), ("add-up", 1.0)]
        );
        assert!(rates[0].ci95.0 < 0.5 && rates[0].ci95.1 > 0.5);
        // One kind: no families.
        assert!(FamilyRate::all_of(&Measured::new(0, "v".into(), vec![true])).is_empty());
    }
}
