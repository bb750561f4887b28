//! How `hone bench engine` and `hone bench train` repeat a comparison: each
//! run first measures the machine's limits, then hone and the reference
//! (transformers, TRL) one right after the other, the reference first in
//! every other run. A shared machine drifts by a quarter within minutes;
//! measured this way both columns of a run see the same machine, a steady
//! drift favours neither side, and the ratio of each run is taken within it
//! ([`SideBySide::ratios`]) — the runs' ratios, with their spread, are what
//! the tables report.

use crate::roofline::Limits;
use crate::support::Spread;
use anyhow::Result;

/// The runs of a comparison.
#[derive(Debug)]
pub struct SideBySide<T, U> {
    /// hone's result of each run.
    pub ours: Vec<T>,
    /// The reference's result of each run; empty where it was not asked
    /// for or failed (a progress line says why).
    pub theirs: Vec<U>,
    /// The median of the limits measured before each run.
    pub limits: Limits,
}

/// One side of a comparison: its name in the progress lines and the
/// measurement of one run.
pub struct Side<'a, T> {
    pub name: &'a str,
    pub run: Box<dyn FnMut() -> Result<T> + 'a>,
}

impl<'a, T> Side<'a, T> {
    pub fn new(name: &'a str, run: impl FnMut() -> Result<T> + 'a) -> Self {
        Self {
            name,
            run: Box::new(run),
        }
    }
}

/// Runs the comparison `runs` times: `limits` before each run, then
/// `ours` and `theirs` back to back (`theirs` first in the second, fourth, …
/// run). hone's failure ends the benchmark; the reference's drops its column
/// with a progress line, since a comparison with a missing interpreter or
/// package still measures hone.
pub fn side_by_side<T, U>(
    runs: usize,
    mut limits: impl FnMut() -> Result<Limits>,
    mut ours: Side<'_, T>,
    mut theirs: Option<Side<'_, U>>,
) -> Result<SideBySide<T, U>> {
    let runs = runs.max(1);
    let (mut ours_done, mut theirs_done) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    let mut measured = Vec::with_capacity(runs);
    for n in 1..=runs {
        hone_console::note(format_args!(
            "run {n} of {runs}: the machine's limits (memory bandwidth, matmul peak) …"
        ));
        measured.push(limits()?);
        let reference_first = n % 2 == 0;
        if reference_first {
            run_reference(&mut theirs, &mut theirs_done, n, runs);
        }
        hone_console::note(format_args!("run {n} of {runs}: {} …", ours.name));
        ours_done.push((ours.run)()?);
        if !reference_first {
            run_reference(&mut theirs, &mut theirs_done, n, runs);
        }
    }
    Ok(SideBySide {
        ours: ours_done,
        theirs: theirs_done,
        limits: Limits::median(&measured),
    })
}

fn run_reference<U>(side: &mut Option<Side<'_, U>>, results: &mut Vec<U>, n: usize, runs: usize) {
    let Some(reference) = side else { return };
    hone_console::note(format_args!("run {n} of {runs}: {} …", reference.name));
    match (reference.run)() {
        Ok(result) => results.push(result),
        Err(e) => {
            hone_console::note(format_args!("{} skipped: {e:#}", reference.name));
            results.clear();
            *side = None;
        }
    }
}

impl<T, U> SideBySide<T, U> {
    /// `ratio(ours, theirs)` of each run, over the runs; `None` without
    /// the reference.
    pub fn ratios(&self, ratio: impl Fn(&T, &U) -> f64) -> Option<Spread> {
        (!self.theirs.is_empty()).then(|| Spread::of(self.ours.iter().zip(&self.theirs).map(|(a, b)| ratio(a, b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn limits(bandwidth: f64) -> Limits {
        Limits {
            bandwidth_gbs: Some(bandwidth),
            matmul_gflops: 100.0,
        }
    }

    #[test]
    fn the_reference_runs_beside_hone_first_in_every_other_run() {
        let order = RefCell::new(Vec::new());
        let bandwidths = RefCell::new(vec![20.0, 10.0, 30.0].into_iter());
        let runs = side_by_side(
            3,
            || {
                order.borrow_mut().push("limits");
                Ok(limits(bandwidths.borrow_mut().next().unwrap()))
            },
            Side::new("hone", || {
                order.borrow_mut().push("hone");
                Ok(order.borrow().len() as f64)
            }),
            Some(Side::new("reference", || {
                order.borrow_mut().push("reference");
                Ok(2.0)
            })),
        )
        .unwrap();
        assert_eq!(
            *order.borrow(),
            [
                "limits",
                "hone",
                "reference",
                "limits",
                "reference",
                "hone",
                "limits",
                "hone",
                "reference"
            ]
        );
        assert_eq!(runs.ours, [2.0, 6.0, 8.0]);
        assert_eq!(runs.theirs, [2.0; 3]);
        assert_eq!(runs.limits, limits(20.0));
        // Each run's own ratio, not the ratio of the medians.
        let ratios = runs.ratios(|a, b| a / b).unwrap();
        assert_eq!((ratios.min, ratios.median, ratios.max), (1.0, 3.0, 4.0));
    }

    #[test]
    fn a_failing_reference_drops_its_column_and_keeps_hones() {
        let calls = RefCell::new(0);
        let runs = side_by_side(
            3,
            || Ok(limits(10.0)),
            Side::new("hone", || Ok(1.0)),
            Some(Side::new("reference", || {
                *calls.borrow_mut() += 1;
                if *calls.borrow() == 2 {
                    anyhow::bail!("no module named trl")
                }
                Ok(1.0)
            })),
        )
        .unwrap();
        assert_eq!(runs.ours, [1.0; 3]);
        assert!(runs.theirs.is_empty());
        assert_eq!(*calls.borrow(), 2, "not asked again after it failed");
        assert!(runs.ratios(|a: &f64, b: &f64| a / b).is_none());
    }

    #[test]
    fn hones_failure_ends_the_benchmark() {
        let result = side_by_side(
            2,
            || Ok(limits(10.0)),
            Side::new("hone", || -> Result<f64> { anyhow::bail!("out of memory") }),
            None::<Side<'_, f64>>,
        );
        assert_eq!(result.unwrap_err().to_string(), "out of memory");
    }
}
