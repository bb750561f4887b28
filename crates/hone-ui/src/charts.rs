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

/// One candidate on the front chart.
pub struct FrontPoint {
    /// Its row number in the page's table.
    pub label: String,
    pub cost_usd: f64,
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

/// Reward × cost per call, one point per candidate, its status and reason
/// on hover.
pub fn front(points: &[FrontPoint]) -> String {
    let svg = front_svg(points);
    with_titles(svg, &points.iter().map(|p| p.title.clone()).collect::<Vec<_>>())
}

fn front_svg(points: &[FrontPoint]) -> String {
    draw(|root| {
        let (x0, x1) = span(points.iter().map(|p| p.cost_usd));
        let (y0, y1) = span(points.iter().map(|p| p.reward));
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(56)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("mean cost per call (USD)")
            .y_desc("reward on the target set")
            .label_style((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
        let grey = RGBColor(170, 170, 170);
        for p in points {
            let colour = if p.pruned { grey } else { PALETTE[0] };
            chart
                .draw_series([Circle::new((p.cost_usd, p.reward), 6, colour.filled())])
                .map_err(|e| e.to_string())?;
            chart
                .draw_series([Text::new(
                    p.label.clone(),
                    (p.cost_usd, p.reward),
                    (FONT, 13).into_font().color(&BLACK),
                )])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

/// Online reward per version over time, with deployment changes marked.
pub fn reward_over_time(series: &[Series], markers: &[Marker]) -> String {
    draw(|root| {
        let times = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(markers.iter().map(|m| m.at));
        let (t0, t1) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let (t0, t1) = if t0 > t1 { (0, 1) } else { (t0, t1.max(t0 + 1)) };
        let (y0, y1) = span(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        // The unit that gives the span readable numbers.
        let (unit_ms, unit) = match t1 - t0 {
            d if d < 2 * 60_000 => (1_000.0, "seconds"),
            d if d < 2 * 3_600_000 => (60_000.0, "minutes"),
            d if d < 3 * 86_400_000 => (3_600_000.0, "hours"),
            _ => (86_400_000.0, "days"),
        };
        let hours = |t: i64| (t - t0) as f64 / unit_ms;
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..hours(t1), y0..y1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(format!("{unit} since the first point"))
            .y_desc("mean reward (rolling)")
            .label_style((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
        for marker in markers {
            let x = hours(marker.at);
            chart
                .draw_series([PathElement::new(vec![(x, y0), (x, y1)], RGBColor(120, 120, 120))])
                .map_err(|e| e.to_string())?;
            chart
                .draw_series([Text::new(marker.label.clone(), (x, y1), (FONT, 11).into_font())])
                .map_err(|e| e.to_string())?;
        }
        for (i, s) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().map(|(t, r)| (hours(*t), *r)),
                    colour.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .label_font((FONT, 12))
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
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
                cost_usd: 0.001 * f64::from(i + 1),
                reward: 0.5 + 0.1 * f64::from(i),
                pruned: i == 0,
                title: format!("#{} pruned: dominated by <{i}> & more", i + 1),
            })
            .collect();
        let svg = front(&points);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches("</title></circle>").count(), 3);
        assert!(
            svg.contains("<title>#1 pruned: dominated by &lt;0&gt; &amp; more</title>"),
            "{svg}"
        );
        assert!(front(&[]).contains("<svg"), "an empty front is still a chart");
    }
}
