//! `hone demo --scenario shift`: what a run whose users change shows —
//! when the drift check raised the change, and each family's held-out
//! success at the start, when the users changed and at the end, with the
//! paired change since the shift. The old family's is what replay and the
//! regression set should keep; the new family's is what the loop should
//! gain.

use super::plots::Curve;
use super::{Measured, Pooled, UserRound};
use hone_learn::data::drift::Mix;
use hone_types::Alert;
use serde::{Deserialize, Serialize};

/// A held-out rate with its 95% interval.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Rate {
    pub rate: f64,
    pub ci95: (f64, f64),
}

impl Rate {
    fn of(m: &Measured) -> Self {
        Self {
            rate: m.rate,
            ci95: m.ci95,
        }
    }

    /// "88.3% (95% CI 77.8–94.2)".
    fn text(self) -> String {
        format!(
            "{:.1}% (95% CI {:.1}–{:.1})",
            self.rate * 100.0,
            self.ci95.0 * 100.0,
            self.ci95.1 * 100.0
        )
    }
}

/// One family's held-out success through the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FamilyOutcome {
    pub family: String,
    pub base: Rate,
    /// The champion serving when the users changed, measured just before
    /// the first round of new users (the last measurement if they never
    /// came).
    pub at_shift: Rate,
    pub last: Rate,
    /// Every measurement of the champion at the shift against every one
    /// of the last champion, paired over the family's tasks (`None`: the
    /// same version).
    pub since_shift: Option<Pooled>,
    /// The last rate is inside, or above, the 95% interval of the rate at
    /// the shift.
    pub within_interval: bool,
}

/// A drift a cycle raised, and the round whose cycle raised it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DriftRaised {
    pub round: usize,
    pub metric: String,
    /// Jensen–Shannon divergence of the word mixes, in bits.
    pub divergence: f64,
    pub p_value: f64,
    pub window_episodes: u64,
    pub earlier_episodes: u64,
}

/// What `summary.json` says of a run whose users changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShiftReport {
    /// `--shift-after`, in minutes of learning.
    pub after_minutes: f64,
    /// The first round whose users brought the new family (`None`: the
    /// run ended before).
    pub round: Option<usize>,
    /// Every drift the cycles raised, before the shift as well.
    pub drifts: Vec<DriftRaised>,
    pub old: FamilyOutcome,
    pub new: FamilyOutcome,
}

impl ShiftReport {
    /// The report of a run whose users brought `families` (before, after);
    /// `None` for one whose users did not change.
    pub fn of(
        families: &[&str],
        after_minutes: f64,
        measured: &[Measured],
        rounds: &[UserRound],
        alerts: &[Alert],
        seed: u64,
    ) -> Option<Self> {
        let [old, new] = families else {
            return None;
        };
        let round = rounds
            .iter()
            .find(|r| r.family.as_deref() == Some(*new))
            .map(|r| r.round);
        let at_shift = match round {
            Some(r) => measured.iter().rposition(|m| m.round < r)?,
            None => measured.len().checked_sub(1)?,
        };
        let outcome = |family: &str| -> Option<FamilyOutcome> {
            let of_family: Vec<Measured> = measured.iter().map(|m| m.of_family(family)).collect();
            let (base, at, last) = (of_family.first()?, &of_family[at_shift], of_family.last()?);
            Some(FamilyOutcome {
                family: family.to_owned(),
                base: Rate::of(base),
                at_shift: Rate::of(at),
                last: Rate::of(last),
                since_shift: Pooled::between(&of_family, &at.champion, &last.champion, seed),
                within_interval: last.rate >= at.ci95.0,
            })
        };
        let drift_metrics = [Mix::Tasks.metric(), Mix::Failures.metric()];
        let mut drifts = alerts
            .iter()
            .filter(|a| drift_metrics.contains(&a.firing.metric.as_str()))
            .filter_map(|a| {
                // A cycle runs after its round's measurement.
                let round = measured.iter().rev().find(|m| m.at_ms <= a.at)?.round;
                Some(DriftRaised {
                    round,
                    metric: a.firing.metric.clone(),
                    divergence: a.firing.canary_rate,
                    p_value: a.firing.p_value,
                    window_episodes: a.firing.canary_episodes,
                    earlier_episodes: a.firing.champion_episodes,
                })
            })
            .collect::<Vec<_>>();
        drifts.sort_by_key(|d| d.round);
        Some(Self {
            after_minutes,
            round,
            drifts,
            old: outcome(old)?,
            new: outcome(new)?,
        })
    }

    /// The report's lines for the terminal.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![match self.round {
            Some(r) => format!(
                "users changed from `{}` to `{}` problems in round {r} (after {:.2} min of learning)",
                self.old.family, self.new.family, self.after_minutes
            ),
            None => format!(
                "users never changed: the run ended before {:.2} min of learning",
                self.after_minutes
            ),
        }];
        let shift_round = self.round.unwrap_or(usize::MAX);
        let before = self.drifts.iter().filter(|d| d.round < shift_round).count();
        let first = self.drifts.iter().find(|d| d.round >= shift_round);
        lines.push(match first {
            Some(d) => format!(
                "drift raised by the cycle after round {} ({}: {:.3} bits, p = {:.4}); {} drift alerts in all, {before} before the shift",
                d.round,
                d.metric,
                d.divergence,
                d.p_value,
                self.drifts.len()
            ),
            None => format!("no drift raised after the shift; {before} drift alerts before it"),
        });
        for (o, when) in [(&self.old, "before"), (&self.new, "after")] {
            lines.push(format!(
                "`{}` (users {when} the shift), held out: {} at the start, {} at the shift, {} at the end{}{}",
                o.family,
                o.base.text(),
                o.at_shift.text(),
                o.last.text(),
                if o.within_interval {
                    ""
                } else {
                    ", below the interval at the shift"
                },
                o.since_shift
                    .as_ref()
                    .map(|p| format!("; since the shift {}", p.line()))
                    .unwrap_or_default()
            ));
        }
        lines
    }
}

/// Each family's held-out success against minutes of learning, named
/// `<prefix><family>`.
pub fn curves(prefix: &str, families: &[&str], measured: &[Measured]) -> Vec<Curve> {
    families
        .iter()
        .map(|family| {
            let points = measured
                .iter()
                .map(|m| m.of_family(family))
                .map(|m| (m.learning_s / 60.0, m.rate, m.ci95.0, m.ci95.1))
                .collect();
            (format!("{prefix}{family}"), points)
        })
        .collect()
}
