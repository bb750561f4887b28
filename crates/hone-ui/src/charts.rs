//! The dashboard's charts, drawn by plotters into SVG strings that the
//! pages inline (text set in DejaVu Sans, bundled, so a server with no
//! fonts draws labels). Empty data gives a chart that says so.

use plotters::prelude::*;
use plotters::style::FontStyle;

const FONT: &str = "sans-serif";
const SIZE: (u32, u32) = (720, 340);

fn register_font() {
    // Registering twice is harmless.
    let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
}

/// What the front chart sets reward against: the agent's objective's cost
/// side — its cost, unless no call is priced (then its latency, what a
/// local model's calls cost), or its latency when that is the objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontAxis {
    Cost,
    Latency,
}

impl FrontAxis {
    pub fn of(objective: &[hone_config::Objective], any_priced: bool) -> Self {
        let by_latency = objective.contains(&hone_config::Objective::MinLatency)
            && !objective.contains(&hone_config::Objective::MinCost);
        if by_latency || !any_priced {
            FrontAxis::Latency
        } else {
            FrontAxis::Cost
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            FrontAxis::Cost => "mean cost per call (USD)",
            FrontAxis::Latency => "mean latency per episode (ms)",
        }
    }
}

/// One candidate on the front chart.
pub struct FrontPoint {
    /// Its row number in the page's table.
    pub label: String,
    /// Its cost per call (USD) or latency (ms), as the chart's axis says.
    pub x: f64,
    pub reward: f64,
    /// Pruned (gate or front): drawn grey.
    pub pruned: bool,
    /// What hovering the point shows (its status and reason).
    pub title: String,
}

/// One version's online reward: (unix ms, mean reward of a window) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

/// A deployment change drawn as a vertical line.
pub struct Marker {
    pub at: i64,
    pub label: String,
}

fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    // A tenth of the range each side; one value (or nearly) gets ±5% of it.
    let pad = ((hi - lo) * 0.1).max(hi.abs().max(lo.abs()) * 0.05).max(1e-6);
    (lo - pad, hi + pad)
}

fn draw(draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), String>) -> String {
    register_font();
    let mut svg = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(|e| e.to_string()))
    };
    match result {
        Ok(()) => svg,
        Err(e) => format!("<p class=\"muted\">chart not drawn: {e}</p>"),
    }
}

/// The series colours every hone chart shares, the dashboard's and
/// `hone demo`'s (readable on white, told apart in order).
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// plotters writes one `<circle …/>` per point, in the order drawn; each
/// gets a `<title>`, which browsers show on hover.
fn with_titles(svg: String, titles: &[String]) -> String {
    let mut out = String::with_capacity(svg.len() + titles.iter().map(String::len).sum::<usize>() * 2);
    let mut rest = svg.as_str();
    for title in titles {
        let Some(at) = rest.find("<circle") else { break };
        let Some(close) = rest[at..].find("/>") else { break };
        let end = at + close;
        out.push_str(&rest[..end]);
        out.push_str("><title>");
        out.push_str(&escape(title));
        out.push_str("</title></circle>");
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Tick labels for an axis spanning `lo..hi`: as many decimals as the step
/// between ticks needs (a cost axis of millionths of a dollar reads
/// `0.000012`, not `0.0` five times), and no `-0`.
fn tick_label(value: f64, lo: f64, hi: f64) -> String {
    let step = ((hi - lo) / 5.0).abs().max(f64::MIN_POSITIVE);
    let decimals = (-step.log10()).ceil().max(0.0) as usize + 1;
    let shown = if value.abs() < step * 1e-6 { 0.0 } else { value };
    let text = format!("{shown:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// The champion drawn on the front chart for reference.
pub struct Reference {
    pub label: String,
    pub x: f64,
    pub reward: f64,
}

/// Reward × cost (or latency, as `axis` says), one point per candidate,
/// its status and reason on hover, the champion as a black square for
/// reference.
pub fn front(points: &[FrontPoint], champion: Option<&Reference>, axis: FrontAxis) -> String {
    let svg = front_svg(points, champion, axis);
    with_titles(svg, &points.iter().map(|p| p.title.clone()).collect::<Vec<_>>())
}

fn front_svg(points: &[FrontPoint], champion: Option<&Reference>, axis: FrontAxis) -> String {
    draw(|root| {
        let xs = points.iter().map(|p| p.x).chain(champion.map(|c| c.x));
        let (x0, x1) = span(xs);
        // A cost or a latency is never negative: the axis starts at 0 when
        // padding would take it below.
        let x0 = x0.max(0.0);
        let (y0, y1) = span(points.iter().map(|p| p.reward).chain(champion.map(|c| c.reward)));
        let mut chart = ChartBuilder::on(root)
            .margin(14)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(axis.describe())
            .y_desc("reward on the target set")
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 15))
            .x_label_formatter(&|v| tick_label(*v, x0, x1))
            .y_label_formatter(&|v| tick_label(*v, y0, y1))
            .draw()
            .map_err(|e| e.to_string())?;
        let grey = RGBColor(170, 170, 170);
        for p in points {
            let colour = if p.pruned { grey } else { PALETTE[0] };
            chart
                .draw_series([Circle::new((p.x, p.reward), 7, colour.filled())])
                .map_err(|e| e.to_string())?;
            chart
                .draw_series([Text::new(
                    p.label.clone(),
                    (p.x, p.reward),
                    (FONT, 15).into_font().color(&BLACK),
                )])
                .map_err(|e| e.to_string())?;
        }
        if let Some(c) = champion {
            // A square (not a circle: the circles are the candidates).
            let (dx, dy) = ((x1 - x0) * 0.008, (y1 - y0) * 0.018);
            chart
                .draw_series([Rectangle::new(
                    [(c.x - dx, c.reward - dy), (c.x + dx, c.reward + dy)],
                    BLACK.filled(),
                )])
                .map_err(|e| e.to_string())?;
            chart
                .draw_series([Text::new(
                    c.label.clone(),
                    (c.x, c.reward - 2.5 * dy),
                    (FONT, 14).into_font().color(&BLACK),
                )])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

/// The runs of `points` (sorted by x, a time) without a gap in traffic: a
/// gap is longer than `min_gap` and five times the usual spacing, and a
/// line breaks there instead of bridging what nobody measured (the
/// dashboard's charts and `hone demo`'s).
pub fn without_gaps<X: Copy + PartialOrd + std::ops::Sub<Output = X> + std::ops::Mul<Output = X> + From<u8>>(
    points: &[(X, f64)],
    min_gap: X,
) -> Vec<&[(X, f64)]> {
    let mut spacing: Vec<X> = points.windows(2).map(|w| w[1].0 - w[0].0).collect();
    spacing.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let usual = spacing.get(spacing.len() / 2).copied().unwrap_or(X::from(0));
    let five = usual * X::from(5);
    let gap = if five > min_gap { five } else { min_gap };
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..points.len() {
        if points[i].0 - points[i - 1].0 > gap {
            runs.push(&points[start..i]);
            start = i;
        }
    }
    if start < points.len() {
        runs.push(&points[start..]);
    }
    runs
}

/// Online reward per version over time, with deployment changes marked
/// (labels set on rows of their own where they would overprint), the line
/// broken where traffic stopped, and the legend below the plot, clear of
/// the newest data.
pub fn reward_over_time(series: &[Series], markers: &[Marker]) -> String {
    draw(|root| {
        let legend_rows = series.len().div_ceil(3).max(1) as u32;
        let (plot, legend) = root.split_vertically(SIZE.1 - 26 * legend_rows);
        let times = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(markers.iter().map(|m| m.at));
        let (t0, t1) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let (t0, t1) = if t0 > t1 { (0, 1) } else { (t0, t1.max(t0 + 1)) };
        let (y0, y1) = span(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        // Room above the data for the markers' labels.
        let y1 = y1 + (y1 - y0) * 0.25;
        // The unit that gives the span readable numbers.
        let (unit_ms, unit) = match t1 - t0 {
            d if d < 2 * 60_000 => (1_000.0, "seconds"),
            d if d < 2 * 3_600_000 => (60_000.0, "minutes"),
            d if d < 3 * 86_400_000 => (3_600_000.0, "hours"),
            _ => (86_400_000.0, "days"),
        };
        let at = |t: i64| (t - t0) as f64 / unit_ms;
        let x1 = at(t1);
        let mut chart = ChartBuilder::on(&plot)
            .margin(14)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(format!("{unit} since the first point"))
            .y_desc("mean reward (rolling)")
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 15))
            .y_label_formatter(&|v| tick_label(*v, y0, y1))
            .draw()
            .map_err(|e| e.to_string())?;
        let mut placed: Vec<(f64, usize)> = Vec::new();
        let mut sorted: Vec<&Marker> = markers.iter().collect();
        sorted.sort_by_key(|m| m.at);
        for marker in sorted {
            let x = at(marker.at);
            // The first row whose last label is far enough to the left.
            let width = x1 * (marker.label.chars().count() as f64 * 0.0125 + 0.01);
            let row = (0..4)
                .find(|r| placed.iter().filter(|(_, pr)| pr == r).all(|(px, _)| x - px > width))
                .unwrap_or(0);
            placed.push((x, row));
            chart
                .draw_series([PathElement::new(vec![(x, y0), (x, y1)], RGBColor(150, 150, 150))])
                .map_err(|e| e.to_string())?;
            let y = y1 - (y1 - y0) * (0.015 + 0.06 * row as f64);
            chart
                .draw_series([Text::new(
                    marker.label.clone(),
                    (x, y),
                    (FONT, 13).into_font().color(&RGBColor(60, 60, 60)),
                )])
                .map_err(|e| e.to_string())?;
        }
        for (i, s) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            for run in without_gaps(&s.points, 60_000) {
                if run.len() == 1 {
                    chart
                        .draw_series([Circle::new((at(run[0].0), run[0].1), 3, colour.filled())])
                        .map_err(|e| e.to_string())?;
                } else {
                    chart
                        .draw_series(LineSeries::new(
                            run.iter().map(|(t, r)| (at(*t), *r)),
                            colour.stroke_width(2),
                        ))
                        .map_err(|e| e.to_string())?;
                }
            }
            // The legend, below the plot.
            let (row, column) = ((i / 3) as i32, (i % 3) as i32);
            let (x, y) = (70 + column * 220, 6 + row * 26);
            legend
                .draw(&PathElement::new(
                    vec![(x, y + 8), (x + 22, y + 8)],
                    colour.stroke_width(3),
                ))
                .map_err(|e| e.to_string())?;
            legend
                .draw(&Text::new(
                    s.name.clone(),
                    (x + 28, y),
                    (FONT, 14).into_font().color(&BLACK),
                ))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_front_point_is_a_circle_with_its_reason_as_title() {
        let points: Vec<FrontPoint> = (0..3)
            .map(|i| FrontPoint {
                label: (i + 1).to_string(),
                x: 0.001 * f64::from(i + 1),
                reward: 0.5 + 0.1 * f64::from(i),
                pruned: i == 0,
                title: format!("#{} pruned: dominated by <{i}> & more", i + 1),
            })
            .collect();
        let svg = front(&points, None, FrontAxis::Cost);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches("</title></circle>").count(), 3);
        assert!(
            svg.contains("<title>#1 pruned: dominated by &lt;0&gt; &amp; more</title>"),
            "{svg}"
        );
        assert!(
            front(&[], None, FrontAxis::Latency).contains("<svg"),
            "an empty front is still a chart"
        );
        use hone_config::Objective::*;
        assert_eq!(FrontAxis::of(&[MaxReward, MinCost], true), FrontAxis::Cost);
        assert_eq!(FrontAxis::of(&[MaxReward, MinCost], false), FrontAxis::Latency);
        assert_eq!(FrontAxis::of(&[MaxReward, MinLatency], true), FrontAxis::Latency);
    }

    #[test]
    fn ticks_show_the_digits_their_step_needs_and_no_minus_zero() {
        let (lo, hi) = (0.0, 0.00005);
        let labels: Vec<String> = (0..=5).map(|i| tick_label(f64::from(i) * 0.00001, lo, hi)).collect();
        assert_eq!(labels, ["0", "0.00001", "0.00002", "0.00003", "0.00004", "0.00005"]);
        assert_eq!(tick_label(-1e-19, -0.5, 0.5), "0");
        assert_eq!(tick_label(0.25, 0.0, 1.0), "0.25");
        assert_eq!(tick_label(1200.0, 0.0, 5000.0), "1200");
    }

    #[test]
    fn a_line_breaks_where_traffic_stopped() {
        let mut points: Vec<(i64, f64)> = (0..10).map(|i| (i * 1_000, 0.5)).collect();
        points.extend((0..5).map(|i| (300_000 + i * 1_000, 0.7)));
        let runs = without_gaps(&points, 60_000);
        assert_eq!(runs.iter().map(|r| r.len()).collect::<Vec<_>>(), [10, 5]);
        assert_eq!(without_gaps(&points[..10], 60_000).len(), 1);
    }
}
