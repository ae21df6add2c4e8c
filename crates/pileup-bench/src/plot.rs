//! The curves as an SVG plot (plotters): throughput against client
//! threads, one line per curve, each point the median of its rounds with
//! its min–max spread as an error bar, the knee marked. Threads are on a
//! log scale when they span a factor of ten or more.

use plotters::prelude::*;

use crate::report::{rate, ExperimentReport};

pub(crate) const COLORS: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// The plot as an SVG document.
pub fn svg(r: &ExperimentReport) -> Result<String, String> {
    svg_of(|root| draw(r, root))
}

/// An SVG document of the size every bench plot has, drawn by `draw`.
pub(crate) fn svg_of(
    draw: impl for<'a> FnOnce(
        &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    ) -> Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>,
) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 560)).into_drawing_area();
        draw(&root).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn draw<DB: DrawingBackend>(
    r: &ExperimentReport,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let threads: Vec<u32> = r.series.iter().flat_map(|s| s.points.iter().map(|p| p.threads)).collect();
    let (tmin, tmax) = (threads.iter().copied().min().unwrap_or(1), threads.iter().copied().max().unwrap_or(1));
    let ymax = r
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| if p.max.is_finite() { p.max } else { p.median }))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.1;
    let systems: Vec<String> = r.systems.iter().map(|s| format!("{} {}", s.name, s.version)).collect();
    let caption = format!("pileup bench {} — {}", r.experiment, systems.join(" · "));
    let (x0, x1) = (tmin.max(1) as f64 * 0.9, tmax.max(1) as f64 * 1.1);
    let log = tmax >= 10 * tmin.max(1);
    let mut chart = ChartBuilder::on(root);
    chart.caption(caption, ("sans-serif", 18)).margin(16).x_label_area_size(44).y_label_area_size(70);
    // One body for both scales: plotters types the chart by its coordinates.
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .y_max_light_lines(1)
                .x_desc("client threads")
                .y_desc(r.unit.as_str())
                .y_label_formatter(&|v| rate(*v))
                .x_label_formatter(&|v| format!("{v:.0}"))
                .draw()?;
            for (i, s) in r.series.iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                let pts: Vec<(f64, f64)> =
                    s.points.iter().filter(|p| p.median.is_finite()).map(|p| (p.threads as f64, p.median)).collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
                chart.draw_series(
                    s.points.iter().filter(|p| p.min.is_finite() && p.max.is_finite()).map(|p| {
                        ErrorBar::new_vertical(p.threads as f64, p.min, p.median, p.max, c.stroke_width(1), 8)
                    }),
                )?;
                if let Some(k) = s.knee_threads.and_then(|k| s.points.iter().find(|p| p.threads == k)) {
                    chart.draw_series(std::iter::once(Cross::new(
                        (k.threads as f64, k.median),
                        9,
                        c.stroke_width(2),
                    )))?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .draw()?;
        }};
    }
    if log {
        body!(chart.build_cartesian_2d((x0..x1).log_scale(), 0f64..ymax)?);
    } else {
        body!(chart.build_cartesian_2d(x0..x1, 0f64..ymax)?);
    }
    Ok(())
}
