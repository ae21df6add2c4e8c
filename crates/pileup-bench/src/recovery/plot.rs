//! The crash-recovery curve as an SVG plot (plotters): seconds until the
//! server answered against the dirty pages at the kill, one line per
//! redo-log size killed under load and a dashed one for the same with the
//! pages flushed first; each point the median of its crashes with its
//! min–max spread as an error bar.

use plotters::prelude::*;

use crate::plot::COLORS;
use crate::recovery::report::{mib, RecoveryReport};

/// The plot as an SVG document.
pub fn svg(r: &RecoveryReport) -> Result<String, String> {
    crate::plot::svg_of(|root| draw(r, root))
}

fn draw<DB: DrawingBackend>(
    r: &RecoveryReport,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let xmax = r.points.iter().map(|p| p.median_dirty_at_kill.max(p.dirty_target)).max().unwrap_or(1) as f64 * 1.1;
    let ymax = r.points.iter().map(|p| p.max_seconds).fold(0.1f64, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(root)
        .caption(format!("pileup bench recovery — MariaDB {}", r.version), ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .y_max_light_lines(1)
        .x_desc("dirty pages at the kill (median)")
        .y_desc("seconds until it answered")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.1}"))
        .draw()?;
    let mut redo: Vec<u64> = r.points.iter().map(|p| p.redo_log_bytes).collect();
    redo.dedup();
    for (i, &size) in redo.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        for flushed in [false, true] {
            let pts: Vec<_> = r.points.iter().filter(|p| p.redo_log_bytes == size && p.flushed == flushed).collect();
            if pts.is_empty() {
                continue;
            }
            let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.median_dirty_at_kill as f64, p.median_seconds)).collect();
            let label = format!("redo {}, {}", mib(size), if flushed { "flushed first" } else { "killed under load" });
            let style = if flushed { c.mix(0.5).stroke_width(2) } else { c.stroke_width(2) };
            chart
                .draw_series(LineSeries::new(xy.clone(), style))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart.draw_series(xy.iter().map(|&p| Circle::new(p, 4, style.filled())))?;
            chart.draw_series(pts.iter().map(|p| {
                ErrorBar::new_vertical(
                    p.median_dirty_at_kill as f64,
                    p.min_seconds,
                    p.median_seconds,
                    p.max_seconds,
                    style,
                    8,
                )
            }))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}
