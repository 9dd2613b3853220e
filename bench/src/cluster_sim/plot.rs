//! The `size` scenario's plot: rounds to converge and crash detection time
//! against the cluster size (log scale), beside the O(log N) and 6 s
//! references.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::quantile;
use super::size::Point;
use crate::runner::plots::register_font;

const BLUE: RGBColor = RGBColor(31, 119, 180);
const RED: RGBColor = RGBColor(214, 39, 40);
const GREEN: RGBColor = RGBColor(44, 160, 44);

type PlotResult = Result<(), Box<dyn std::error::Error>>;

/// One line of a panel: points, colour, legend, whether to mark points.
struct Line<'a> {
    points: Vec<(f64, f64)>,
    color: RGBColor,
    label: &'a str,
    marked: bool,
}

/// Draws both panels into `path`.
pub(super) fn draw(path: &Path, font: Option<&Path>, points: &[Point]) -> PlotResult {
    register_font(font)?;
    let root = BitMapBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let xmax = points.iter().map(|p| p.members).max().unwrap_or(2) as f64 * 1.3;
    let series = |f: &dyn Fn(&Point) -> &[f64], q: f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .map(|p| (p.members as f64, quantile(&mut f(p).to_vec(), q)))
            .collect()
    };
    let single = series(&|p| &p.single_join_rounds, 0.5);
    // c · log2 N through the single-join curve's first point, for the shape.
    let reference: Vec<(f64, f64)> = single.first().map_or_else(Vec::new, |&(n0, r0)| {
        points
            .iter()
            .map(|p| {
                let n = p.members as f64;
                (n, r0 * n.log2() / n0.log2())
            })
            .collect()
    });
    panel(
        &left,
        "Rounds (200 ms) until all see a join",
        "gossip rounds",
        xmax,
        &[
            Line {
                points: series(&|p| &p.mass_join_rounds, 0.5),
                color: BLUE,
                label: "all join at once (median)",
                marked: true,
            },
            Line {
                points: single,
                color: RED,
                label: "one joins a formed cluster (median)",
                marked: true,
            },
            Line {
                points: reference,
                color: BLACK,
                label: "c · log2 N",
                marked: false,
            },
        ],
    )?;
    panel(
        &right,
        "A crash: time until every member…",
        "seconds after the crash",
        xmax,
        &[
            Line {
                points: series(&|p| &p.seen, 0.5),
                color: BLUE,
                label: "…sees it (p50)",
                marked: true,
            },
            Line {
                points: series(&|p| &p.seen, 0.99),
                color: RED,
                label: "…sees it (p99)",
                marked: true,
            },
            Line {
                points: series(&|p| &p.downed, 0.5),
                color: GREEN,
                label: "…holds it down (p50)",
                marked: true,
            },
            Line {
                points: vec![(4.0, 6.0), (xmax, 6.0)],
                color: BLACK,
                label: "target: seen within 6 s at p99",
                marked: false,
            },
        ],
    )?;
    root.present()?;
    Ok(())
}

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    y_desc: &str,
    xmax: f64,
    lines: &[Line<'_>],
) -> PlotResult {
    let ymax = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((4.0..xmax).log_scale(), 0.0..ymax * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("members")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 14))
        .draw()?;
    for l in lines {
        let (color, width) = (l.color, if l.marked { 2 } else { 1 });
        chart
            .draw_series(LineSeries::new(l.points.clone(), color.stroke_width(width)))?
            .label(l.label)
            .legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 20, y)], color.stroke_width(width))
            });
        if l.marked {
            chart.draw_series(l.points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}
