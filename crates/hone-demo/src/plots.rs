//! The demo's pictures, drawn with plotters as SVG and PNG (the PNG through
//! plotters' bitmap backend, text set in DejaVu Sans bundled by the `dejavu`
//! crate, so no system font is needed):
//!
//! - `held-out.{svg,png}`: held-out success of the champion after each
//!   cycle, with its 95% interval and a line where a promotion came;
//! - `online.{svg,png}`: the share of users who accepted their answer, as a
//!   moving average over time, with deploy, promote and rollback markers;
//! - `front.{svg,png}`: every candidate's offline reward against its mean
//!   latency, gated ones in colour and pruned ones grey;
//! - `bench-learn.{svg,png}` (`hone bench learn`): each learner's held-out
//!   success against minutes of learning, with 95% intervals and the
//!   threshold;
//! - `seeds.{svg,png}` (`hone demo --seeds`): the same curves, one per seed;
//! - `shift.{svg,png}` (`hone demo --scenario shift`): held-out success on
//!   each kind of task, before and after the users changed (a dashed line);
//! - `bench-learn-seeds.{svg,png}` (`hone bench learn --seeds`): each
//!   learner's seconds to the threshold in every seed, and its median.

use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Held-out success after a cycle: `(cycle index, rate, low, high)`.
pub type HeldOutPoint = (usize, f64, f64, f64);

/// A curve in `hone bench learn` (a learner) or `hone demo --seeds` (a
/// seed): its name and `(minutes of learning, rate, low, high)` points.
pub type Curve = (String, Vec<(f64, f64, f64, f64)>);

/// A marker on the online chart: seconds since the start and what happened.
#[derive(Debug, Clone)]
pub struct Marker {
    pub at: f64,
    pub label: String,
    pub kind: MarkerKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerKind {
    Deploy,
    Promote,
    Rollback,
}

/// A candidate on the front chart.
#[derive(Debug, Clone)]
pub struct FrontPoint {
    pub label: String,
    pub reward: f64,
    pub latency_ms: f64,
    pub gated: bool,
    /// The cycle's champion, drawn as a black square for reference.
    pub champion: bool,
}

const SIZE: (u32, u32) = (900, 520);
const FONT: &str = "sans-serif";

fn register_font() {
    // Registering twice is harmless; a failure leaves plotters' own error
    // when text is drawn, which the caller reports.
    let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
}

/// Draws one chart into `<dir>/<name>.svg` and `<dir>/<name>.png` (the
/// same drawing function instantiated for each backend); returns both paths.
fn both(
    dir: &Path,
    name: &str,
    svg_draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
    png_draw: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> Result<()>,
) -> Result<Vec<PathBuf>> {
    register_font();
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        svg_draw(&root)?;
        root.present().map_err(|e| anyhow!("{}: {e}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        png_draw(&root)?;
        root.present().map_err(|e| anyhow!("{}: {e}", png.display()))?;
    }
    Ok(vec![svg, png])
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e}")
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A chart on `root` with the demo's caption style, margins and axis areas.
fn frame<'a, DB: DrawingBackend + 'a>(
    root: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<Chart<'a, DB>>
where
    DB::ErrorType: 'static,
{
    ChartBuilder::on(root)
        .caption(caption, (FONT, 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)
        .map_err(err)
}

/// A white chart of a share (0–100%) against minutes, its mesh drawn:
/// `axes` are the x and y descriptions.
fn share_chart<'a, DB: DrawingBackend + 'a>(
    root: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: std::ops::Range<f64>,
    axes: (&str, &str),
) -> Result<Chart<'a, DB>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let mut chart = frame(root, caption, x, 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc(axes.0)
        .y_desc(axes.1)
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// The series' legend, in the corner where it hides the least of `lines`
/// (each a series' points in data coordinates, joined in order).
fn legend<'a, DB: DrawingBackend + 'a>(chart: &mut Chart<'a, DB>, lines: &[Vec<(f64, f64)>]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let corner = quietest_corner(lines, chart.x_range(), chart.y_range());
    chart
        .configure_series_labels()
        .position(corner)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(err)
}

/// Of the four corners, the one whose box (45% of the width, 35% of the
/// height: about a legend's size) holds the fewest points of `lines`, the
/// segments between points sampled too; the lower right on a tie.
fn quietest_corner(lines: &[Vec<(f64, f64)>], x: Range<f64>, y: Range<f64>) -> SeriesLabelPosition {
    let (w, h) = (x.end - x.start, y.end - y.start);
    let samples: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|line| {
            let segments = line.windows(2).flat_map(|pair| {
                let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
                (0..8).map(move |k| {
                    let t = f64::from(k) / 8.0;
                    (x0 + t * (x1 - x0), y0 + t * (y1 - y0))
                })
            });
            segments.chain(line.last().copied())
        })
        .collect();
    let inside = |(left, lower): (bool, bool)| {
        samples
            .iter()
            .filter(|(px, py)| {
                let fx = (px - x.start) / w;
                let fy = (py - y.start) / h;
                (if left { fx <= 0.45 } else { fx >= 0.55 }) && (if lower { fy <= 0.35 } else { fy >= 0.65 })
            })
            .count()
    };
    [
        ((false, true), SeriesLabelPosition::LowerRight),
        ((true, true), SeriesLabelPosition::LowerLeft),
        ((false, false), SeriesLabelPosition::UpperRight),
        ((true, false), SeriesLabelPosition::UpperLeft),
    ]
    .into_iter()
    .min_by_key(|(corner, _)| inside(*corner))
    .map_or(SeriesLabelPosition::LowerRight, |(_, position)| position)
}

/// Labels drawn beside points, in the points' colour.
fn labels<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    labels: Vec<(String, (f64, f64))>,
    colour: RGBColor,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .draw_series(
            labels
                .into_iter()
                .map(|(text, at)| Text::new(text, at, (FONT, 12).into_font().color(&colour))),
        )
        .map_err(err)?;
    Ok(())
}

/// Held-out success per cycle with 95% intervals; `promoted` are the
/// rounds in which a new champion was promoted, with a label each (drawn
/// just before that round's measurement, the new champion's first).
pub fn held_out(dir: &Path, points: &[HeldOutPoint], promoted: &[(usize, String)]) -> Result<Vec<PathBuf>> {
    both(
        dir,
        "held-out",
        |r| draw_held_out(r, points, promoted),
        |r| draw_held_out(r, points, promoted),
    )
}

fn draw_held_out<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    points: &[HeldOutPoint],
    promoted: &[(usize, String)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let last = points.iter().map(|p| p.0).max().unwrap_or(1).max(1);
    root.fill(&WHITE).map_err(err)?;
    let mut chart = frame(
        root,
        "Held-out success of the champion (95% interval)",
        -0.5..(last as f64 + 0.5),
        0.0..1.0,
    )?;
    chart
        .configure_mesh()
        .x_desc("after cycle (0 = the base policy)")
        .y_desc("held-out tasks solved")
        .x_labels(last + 2)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y, lo, hi)| ErrorBar::new_vertical(x as f64, lo, y, hi, BLUE.stroke_width(2), 12)),
        )
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|&(x, y, _, _)| (x as f64, y)),
            BLUE.stroke_width(2),
        ))
        .map_err(err)?;
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y, _, _)| Circle::new((x as f64, y), 5, BLUE.filled())),
        )
        .map_err(err)?;
    let green = RGBColor(0, 150, 60);
    chart
        .draw_series(promoted.iter().map(|(round, _)| {
            let x = *round as f64 - 0.5;
            PathElement::new(vec![(x, 0.0), (x, 1.0)], green.stroke_width(2))
        }))
        .map_err(err)?;
    labels(
        &mut chart,
        promoted
            .iter()
            .map(|(round, label)| (label.clone(), (*round as f64 - 0.45, 0.96)))
            .collect(),
        green,
    )
}

/// The moving share of accepted answers over time, with markers.
pub fn online(dir: &Path, accepted: &[(f64, bool)], window: usize, markers: &[Marker]) -> Result<Vec<PathBuf>> {
    let mut sorted = accepted.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let series: Vec<(f64, f64)> = (0..sorted.len())
        .filter(|&i| i + 1 >= window.min(sorted.len()))
        .map(|i| {
            let from = (i + 1).saturating_sub(window);
            let part = &sorted[from..=i];
            let share = part.iter().filter(|(_, a)| *a).count() as f64 / part.len() as f64;
            (sorted[i].0 / 60.0, share)
        })
        .collect();
    let end = sorted.last().map_or(1.0, |(t, _)| t / 60.0).max(0.1);
    both(
        dir,
        "online",
        |r| draw_online(r, &series, end, window, markers),
        |r| draw_online(r, &series, end, window, markers),
    )
}

fn draw_online<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    series: &[(f64, f64)],
    end: f64,
    window: usize,
    markers: &[Marker],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let mut chart = share_chart(
        root,
        &format!("Users who accepted the answer (moving share over {window} episodes)"),
        0.0..end * 1.02,
        ("minutes since the demo started", "accepted"),
    )?;
    // Broken where no user came for a while, rather than bridged.
    for (k, run) in hone_ui::without_gaps(series, 1.0).into_iter().enumerate() {
        let drawn = chart
            .draw_series(LineSeries::new(run.iter().copied(), BLUE.stroke_width(2)))
            .map_err(err)?;
        if k == 0 {
            drawn
                .label("accepted (implicit signal)")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLUE.stroke_width(2)));
        }
    }
    for kind in [MarkerKind::Deploy, MarkerKind::Promote, MarkerKind::Rollback] {
        let (colour, name) = match kind {
            MarkerKind::Deploy => (RGBColor(230, 140, 0), "canary deployed"),
            MarkerKind::Promote => (RGBColor(0, 150, 60), "promoted"),
            MarkerKind::Rollback => (RGBColor(210, 30, 30), "rolled back"),
        };
        let these: Vec<&Marker> = markers.iter().filter(|m| m.kind == kind).collect();
        if these.is_empty() {
            continue;
        }
        chart
            .draw_series(these.iter().map(|m| {
                let x = m.at / 60.0;
                PathElement::new(vec![(x, 0.0), (x, 1.0)], colour.stroke_width(2))
            }))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        labels(
            &mut chart,
            these
                .iter()
                .map(|m| (m.label.clone(), (m.at / 60.0, marker_height(markers, m))))
                .collect(),
            colour,
        )?;
    }
    // The legend keeps clear of the marker labels as of the curve.
    let label_spots = markers.iter().map(|m| vec![(m.at / 60.0, marker_height(markers, m))]);
    let avoid: Vec<Vec<(f64, f64)>> = std::iter::once(series.to_vec()).chain(label_spots).collect();
    legend(&mut chart, &avoid)
}

/// Where a marker's label sits: markers close in time would print their
/// labels over each other, so each takes one of four heights by its place
/// in time.
fn marker_height(markers: &[Marker], m: &Marker) -> f64 {
    let place = markers.iter().filter(|other| other.at < m.at).count();
    0.04 + 0.06 * (place % 4) as f64
}

/// Beyond this many points a front labels only the last champion: more
/// labels print over each other.
const MAX_LABELLED: usize = 8;

/// Candidates' offline reward against latency (the demo's local model has
/// no price: the dashboard's front sets reward against latency too, by
/// `hone_ui::charts::FrontAxis`), each cycle's champion for reference.
pub fn front(dir: &Path, points: &[FrontPoint]) -> Result<Vec<PathBuf>> {
    both(dir, "front", |r| draw_front(r, points), |r| draw_front(r, points))
}

fn draw_front<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, points: &[FrontPoint]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    // Room on the right for the labels of the slowest points.
    let max_latency = points.iter().map(|p| p.latency_ms).fold(1.0, f64::max) * 1.35;
    let (low, high) = points.iter().fold((0.0f64, 1.0f64), |(lo, hi), p| {
        (lo.min(p.reward - 0.1), hi.max(p.reward + 0.1))
    });
    let mut chart = frame(
        root,
        "Candidates: offline reward against latency",
        0.0..max_latency,
        low..high,
    )?;
    chart
        .configure_mesh()
        .x_desc("mean episode latency (ms)")
        .y_desc("mean reward on the cycle's held-out instances")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    let label_all = points.len() <= MAX_LABELLED;
    let champions: Vec<&FrontPoint> = points.iter().filter(|p| p.champion).collect();
    if !champions.is_empty() {
        let side = (max_latency * 0.006, (high - low) * 0.012);
        chart
            .draw_series(champions.iter().map(|p| {
                Rectangle::new(
                    [
                        (p.latency_ms - side.0, p.reward - side.1),
                        (p.latency_ms + side.0, p.reward + side.1),
                    ],
                    BLACK.filled(),
                )
            }))
            .map_err(err)?
            .label("the cycle's champion")
            .legend(|(x, y)| Rectangle::new([(x + 1, y - 5), (x + 11, y + 5)], BLACK.filled()));
        let labelled = if label_all {
            &champions[..]
        } else {
            &champions[champions.len() - 1..]
        };
        labels(
            &mut chart,
            labelled
                .iter()
                .map(|p| (p.label.clone(), (p.latency_ms, p.reward - 3.0 * side.1)))
                .collect(),
            BLACK,
        )?;
    }
    for gated in [false, true] {
        let colour = if gated {
            RGBColor(0, 110, 200)
        } else {
            RGBColor(160, 160, 160)
        };
        let these: Vec<&FrontPoint> = points.iter().filter(|p| p.gated == gated && !p.champion).collect();
        if these.is_empty() {
            continue;
        }
        chart
            .draw_series(
                these
                    .iter()
                    .map(|p| Circle::new((p.latency_ms, p.reward), 6, colour.filled())),
            )
            .map_err(err)?
            .label(if gated { "passed the gate" } else { "pruned" })
            .legend(move |(x, y)| Circle::new((x + 6, y), 5, colour.filled()));
        if label_all {
            labels(
                &mut chart,
                these
                    .iter()
                    .map(|p| (p.label.clone(), (p.latency_ms, p.reward)))
                    .collect(),
                colour,
            )?;
        }
    }
    let dots: Vec<Vec<(f64, f64)>> = points.iter().map(|p| vec![(p.latency_ms, p.reward)]).collect();
    legend(&mut chart, &dots)
}

/// A candidate on the held-out tasks: the share of its answers that asked
/// a clarifying question, its success, and where it ended (`pruned`,
/// `rolled_back`, `champion`, …).
pub type CandidateDot = (f64, f64, String);

/// Every candidate's held-out success against how often it asked back,
/// coloured by where it ended, the base (`asked`, `success`) for
/// reference: a reward hack shows as points to the right, and the guards
/// as their colour (`--scenario`).
pub fn candidates(dir: &Path, base: (f64, f64), dots: &[CandidateDot]) -> Result<Vec<PathBuf>> {
    both(
        dir,
        "candidates",
        |r| draw_candidates(r, base, dots),
        |r| draw_candidates(r, base, dots),
    )
}

fn draw_candidates<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    base: (f64, f64),
    dots: &[CandidateDot],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let mut chart = frame(
        root,
        "Candidates on the held-out tasks: success against asking back",
        -0.02..1.02,
        -0.02..1.02,
    )?;
    chart
        .configure_mesh()
        .x_desc("held-out answers that asked a clarifying question")
        .y_desc("held-out success")
        .x_label_formatter(&|x| format!("{:.0}%", x * 100.0))
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    let groups = [
        ("pruned", "pruned by the gate (no user met it)", RGBColor(150, 150, 150)),
        (
            "rolled_back",
            "met users as a canary, rolled back",
            RGBColor(210, 30, 30),
        ),
        ("champion", "promoted", RGBColor(0, 150, 60)),
    ];
    let mut drawn: Vec<(f64, f64)> = Vec::new();
    for (status, name, colour) in groups {
        let these: Vec<(f64, f64)> = dots.iter().filter(|d| d.2 == status).map(|d| (d.0, d.1)).collect();
        draw_dots(&mut chart, &these, name, colour)?;
        drawn.extend(these);
    }
    let others: Vec<(f64, f64)> = dots
        .iter()
        .filter(|d| !groups.iter().any(|(status, _, _)| d.2 == *status))
        .map(|d| (d.0, d.1))
        .collect();
    draw_dots(&mut chart, &others, "still deployed or gated", RGBColor(0, 110, 200))?;
    drawn.extend(others);
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(base.0 - 0.008, base.1 - 0.012), (base.0 + 0.008, base.1 + 0.012)],
            BLACK.filled(),
        )))
        .map_err(err)?
        .label("the base")
        .legend(|(x, y)| Rectangle::new([(x + 1, y - 5), (x + 11, y + 5)], BLACK.filled()));
    drawn.push(base);
    let spots: Vec<Vec<(f64, f64)>> = drawn.into_iter().map(|d| vec![d]).collect();
    legend(&mut chart, &spots)
}

/// `points` as hollow circles of `colour` (where several fall on one spot
/// their rings still show), under `name` in the legend; nothing when empty.
fn draw_dots<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    points: &[(f64, f64)],
    name: &str,
    colour: RGBColor,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    if points.is_empty() {
        return Ok(());
    }
    chart
        .draw_series(points.iter().map(|p| Circle::new(*p, 6, colour.stroke_width(2))))
        .map_err(err)?
        .label(name.to_owned())
        .legend(move |(x, y)| Circle::new((x + 6, y), 5, colour.stroke_width(2)));
    Ok(())
}

/// What a chart of curves against minutes of learning shows: its caption
/// and share axis, and a line for a threshold or where users changed.
#[derive(Clone, Copy)]
struct CurveChart<'a> {
    caption: &'a str,
    share: &'a str,
    threshold: Option<f64>,
    shift: Option<f64>,
}

const HELD_OUT: CurveChart<'static> = CurveChart {
    caption: "Held-out success against minutes of learning (95% interval)",
    share: "held-out tasks solved",
    threshold: None,
    shift: None,
};

/// `curves` as `chart` says, in `dir` as `name`.{svg,png}.
fn curve_chart(dir: &Path, name: &str, curves: &[Curve], chart: CurveChart) -> Result<Vec<PathBuf>> {
    both(
        dir,
        name,
        |r| draw_curves(r, curves, chart),
        |r| draw_curves(r, curves, chart),
    )
}

/// Learners' held-out success against minutes of learning, with the threshold.
pub fn learning_race(dir: &Path, curves: &[Curve], threshold: f64) -> Result<Vec<PathBuf>> {
    let chart = CurveChart {
        threshold: Some(threshold),
        ..HELD_OUT
    };
    curve_chart(dir, "bench-learn", curves, chart)
}

/// Several runs' held-out success against minutes of learning, one curve
/// per seed.
pub fn seeds(dir: &Path, curves: &[Curve]) -> Result<Vec<PathBuf>> {
    curve_chart(dir, "seeds", curves, HELD_OUT)
}

/// `--scenario shift`: held-out success on each kind of task against
/// minutes of learning (one curve per family, per seed or learner over
/// several), and a dashed line where the users changed; as `name`.
pub fn shift(dir: &Path, name: &str, curves: &[Curve], at_minutes: f64) -> Result<Vec<PathBuf>> {
    let chart = CurveChart {
        caption: "Held-out success on each kind of task against minutes of learning (95% interval)",
        shift: Some(at_minutes),
        ..HELD_OUT
    };
    curve_chart(dir, name, curves, chart)
}

/// `--scenario hack`: the share of held-out answers that asked a
/// clarifying question against minutes of learning (one curve per
/// learner, and per seed over several); as `name`.
pub fn asking(dir: &Path, name: &str, curves: &[Curve]) -> Result<Vec<PathBuf>> {
    let chart = CurveChart {
        caption: "Held-out answers that asked back, against minutes of learning (95% interval)",
        share: "held-out answers that asked a clarifying question",
        ..HELD_OUT
    };
    curve_chart(dir, name, curves, chart)
}

/// A learner in `hone bench learn --seeds`: its name and, per seed,
/// seconds of learning to the threshold (`None`: not within the budget).
pub type SeedTimes = (String, Vec<Option<f64>>);

/// Each learner's seconds to the threshold per seed (a dot each, a cross
/// at the top where it was not reached) and its median over the seeds
/// where it was (a dashed line).
pub fn race_seeds(dir: &Path, seeds: &[u64], learners: &[SeedTimes], threshold: f64) -> Result<Vec<PathBuf>> {
    both(
        dir,
        "bench-learn-seeds",
        |r| draw_race_seeds(r, seeds, learners, threshold),
        |r| draw_race_seeds(r, seeds, learners, threshold),
    )
}

fn draw_race_seeds<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    seeds: &[u64],
    learners: &[SeedTimes],
    threshold: f64,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let most = learners
        .iter()
        .flat_map(|(_, times)| times.iter().flatten().copied())
        .fold(1.0, f64::max);
    let top = most * 1.15;
    let n = seeds.len().max(1);
    let mut chart = frame(
        root,
        &format!(
            "Seconds of learning to held-out success ≥ {:.0}%, per seed (× at the top: not reached)",
            threshold * 100.0
        ),
        -0.5..n as f64 - 0.5,
        0.0..top,
    )?;
    let seed_at = |x: &f64| {
        let i = x.round();
        ((x - i).abs() < 1e-6 && i >= 0.0)
            .then(|| seeds.get(i as usize).map(|s| format!("seed {s}")))
            .flatten()
            .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&seed_at)
        .disable_x_mesh()
        .y_desc("seconds of learning (measuring left out)")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    let spread = 0.5 / learners.len().max(1) as f64;
    let mut lines = Vec::new();
    for (k, (name, times)) in learners.iter().enumerate() {
        let colour = hone_ui::PALETTE[k % hone_ui::PALETTE.len()];
        let offset = (k as f64 - (learners.len() as f64 - 1.0) / 2.0) * spread;
        let reached: Vec<(f64, f64)> = times
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i as f64 + offset, t)))
            .collect();
        let median = hone_learn::stats::median(&reached.iter().map(|p| p.1).collect::<Vec<_>>());
        if let Some(m) = median {
            chart
                .draw_series(DashedLineSeries::new(
                    [(-0.5, m), (n as f64 - 0.5, m)],
                    6,
                    4,
                    colour.mix(0.7).stroke_width(1),
                ))
                .map_err(err)?;
        }
        chart
            .draw_series(reached.iter().map(|&p| Circle::new(p, 5, colour.filled())))
            .map_err(err)?
            .label(match median {
                Some(m) => format!("{name} (median {m:.1} s)"),
                None => format!("{name} (never reached)"),
            })
            .legend(move |(x, y)| Circle::new((x + 9, y), 5, colour.filled()));
        let missed = times.iter().enumerate().filter(|(_, t)| t.is_none());
        chart
            .draw_series(missed.map(|(i, _)| Cross::new((i as f64 + offset, top * 0.97), 6, colour.stroke_width(2))))
            .map_err(err)?;
        lines.push(reached);
    }
    legend(&mut chart, &lines)
}

fn draw_curves<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, curves: &[Curve], chart: CurveChart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let CurveChart {
        caption,
        share,
        threshold,
        shift,
    } = chart;
    let end = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.0))
        .fold(shift.unwrap_or(0.1), f64::max);
    let mut chart = share_chart(
        root,
        caption,
        // A margin in proportion, so short runs are not squeezed right.
        -end * 0.02..end * 1.04,
        ("minutes of learning (measuring left out)", share),
    )?;
    if let Some(threshold) = threshold {
        let grey = RGBColor(40, 40, 40);
        chart
            .draw_series(LineSeries::new(
                [(-0.2, threshold), (end * 1.04, threshold)],
                grey.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("threshold {:.0}%", threshold * 100.0))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(2)));
    }
    if let Some(at) = shift {
        let grey = RGBColor(90, 90, 90);
        chart
            .draw_series(DashedLineSeries::new(
                [(at, 0.0), (at, 1.0)],
                6,
                4,
                grey.stroke_width(2),
            ))
            .map_err(err)?
            .label("users change")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(2)));
    }
    for (i, (name, points)) in curves.iter().enumerate() {
        let colour = hone_ui::PALETTE[i % hone_ui::PALETTE.len()];
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y, lo, hi)| ErrorBar::new_vertical(x, lo, y, hi, colour.mix(0.5).stroke_width(1), 8)),
            )
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(x, y, _, _)| (x, y)),
                colour.stroke_width(2),
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y, _, _)| Circle::new((x, y), 4, colour.filled())),
            )
            .map_err(err)?;
    }
    let lines: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|(_, points)| points.iter().map(|&(x, y, _, _)| (x, y)).collect())
        .collect();
    legend(&mut chart, &lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_candidates_picture_names_only_the_outcomes_it_shows() {
        let dir = tempfile::tempdir().unwrap();
        let dots = vec![
            (0.45, 0.48, "pruned".to_owned()),
            (0.02, 0.50, "rolled_back".to_owned()),
            (0.0, 0.47, "canary".to_owned()),
        ];
        let paths = candidates(dir.path(), (0.0, 0.5), &dots).unwrap();
        assert_eq!(paths.len(), 2);
        let svg = std::fs::read_to_string(dir.path().join("candidates.svg")).unwrap();
        for shown in [
            "pruned by the gate (no user met it)",
            "met users as a canary, rolled back",
            "still deployed or gated",
            "the base",
        ] {
            assert!(svg.contains(shown), "no `{shown}` in the legend");
        }
        assert!(!svg.contains("promoted"), "no promotion to show");
        assert!(dir.path().join("candidates.png").is_file());
    }

    #[test]
    fn a_crowded_front_labels_only_its_last_champion() {
        let point = |i: usize, champion: bool| FrontPoint {
            label: if champion {
                format!("champion c{i}")
            } else {
                format!("grpo g{i}")
            },
            reward: 0.0,
            latency_ms: 1_000.0 + i as f64,
            gated: true,
            champion,
        };
        let texts = |points: &[FrontPoint]| {
            let dir = tempfile::tempdir().unwrap();
            front(dir.path(), points).unwrap();
            let svg = std::fs::read_to_string(dir.path().join("front.svg")).unwrap();
            (0..points.len())
                .filter(|i| svg.contains(&format!(" c{i}\n")) || svg.contains(&format!(" g{i}\n")))
                .count()
        };
        // A few points: every one labelled.
        let few: Vec<FrontPoint> = (0..4).map(|i| point(i, i % 2 == 0)).collect();
        assert_eq!(texts(&few), 4);
        // Twenty at one reward: one label, the last champion's.
        let many: Vec<FrontPoint> = (0..20).map(|i| point(i, i % 2 == 0)).collect();
        assert_eq!(texts(&many), 1);
    }

    #[test]
    fn the_legend_goes_where_it_hides_the_fewest_points() {
        let (x, y) = (0.0..5.0, 0.0..1.0);
        // The bench's picture: one curve holds at the top, the other
        // collapses to zero late and ends at 70%: the lower left is free.
        let held = vec![(0.0, 0.4), (0.4, 1.0), (5.0, 1.0)];
        let late_dive = vec![(0.0, 0.4), (0.3, 1.0), (3.0, 1.0), (3.5, 0.0), (4.0, 0.1), (5.0, 0.7)];
        let corner = quietest_corner(&[held.clone(), late_dive], x.clone(), y.clone());
        assert_eq!(corner, SeriesLabelPosition::LowerLeft);
        // An early dive instead: the lower right is free again.
        let early_dive = vec![
            (0.0, 0.4),
            (0.3, 1.0),
            (1.0, 1.0),
            (1.5, 0.0),
            (2.0, 0.1),
            (3.0, 1.0),
            (5.0, 1.0),
        ];
        let corner = quietest_corner(&[held, early_dive], x.clone(), y.clone());
        assert_eq!(corner, SeriesLabelPosition::LowerRight);
        // A curve climbing from the lower left to the upper right: either
        // other corner is free; the lower right wins the tie.
        let climb = vec![(0.0, 0.1), (1.0, 0.2), (4.0, 0.8), (5.0, 0.9)];
        assert_eq!(
            quietest_corner(&[climb], x.clone(), y.clone()),
            SeriesLabelPosition::LowerRight
        );
        // A curve falling from the upper left to the lower right: the lower
        // left and the upper right are both free; the lower left comes first.
        let fall = vec![(0.0, 0.9), (1.0, 0.8), (4.0, 0.2), (5.0, 0.1)];
        assert_eq!(
            quietest_corner(&[fall], x.clone(), y.clone()),
            SeriesLabelPosition::LowerLeft
        );
        // Nothing drawn: the lower right, as before.
        assert_eq!(quietest_corner(&[], x, y), SeriesLabelPosition::LowerRight);
    }
}
