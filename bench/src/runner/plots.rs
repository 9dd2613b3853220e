//! PNG plots with `plotters` (bitmap backend, fonts through `ab_glyph`: no
//! system font library is linked; a TrueType file is read at run time).

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::tables::{Rates, W3};

/// Font files tried in order when `--font` is not given.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers a TrueType font as `sans-serif`; returns the file used, or why
/// none could be.
pub fn register_font(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_owned()],
        None => FONT_CANDIDATES.iter().map(PathBuf::from).collect(),
    };
    for path in candidates {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        // The font must live as long as the process: plotters keeps it in a
        // global registry.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
            return Ok(path);
        }
    }
    Err(format!(
        "no usable TrueType font (tried {}); pass --font FILE.ttf or install fonts-dejavu-core",
        explicit.map_or_else(|| FONT_CANDIDATES.join(", "), |p| p.display().to_string())
    ))
}

const PALETTE: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

type PlotResult = Result<(), Box<dyn std::error::Error>>;

/// W1 / W2: `y_label` against N (log scale), one line per transport, the
/// baseline in black.
pub fn rates(path: &Path, title: &str, y_label: &str, r: &Rates) -> PlotResult {
    let mut ns: Vec<u64> = r
        .by_transport
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.n))
        .chain(r.baseline.iter().map(|(n, _)| *n))
        .collect();
    ns.sort_unstable();
    ns.dedup();
    let ymax = r
        .by_transport
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.rate))
        .chain(r.baseline.iter().map(|(_, v)| *v))
        .fold(0.0_f64, f64::max);
    let xmax = ns.last().copied().unwrap_or(1).max(2) as f64;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(90)
        .build_cartesian_2d((0.8..xmax * 1.25).log_scale(), 0.0..ymax * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("N (nodes on the other side)")
        .y_desc(y_label)
        .x_labels(ns.len().max(2))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 15))
        .draw()?;
    for (i, (t, pts)) in r.by_transport.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.n as f64, p.rate)).collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), color.stroke_width(2)))?
            .label(format!("plexus {t}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(xy.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    if !r.baseline.is_empty() {
        let xy: Vec<(f64, f64)> = r.baseline.iter().map(|&(n, v)| (n as f64, v)).collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), BLACK.stroke_width(2)))?
            .label("baseline (plain tokio, tcp)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
        chart.draw_series(xy.iter().map(|&p| Cross::new(p, 5, BLACK.stroke_width(2))))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// W3: runtime against loss, one panel per delay, one line per transport
/// through the medians, error bars from the 5th to the 95th percentile.
pub fn w3(path: &Path, w: &W3) -> PlotResult {
    let panels = w.delays.len().max(1);
    let root = BitMapBackend::new(path, (560 * panels as u32, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, panels));
    let xmax = w.losses.iter().copied().fold(1.0_f64, f64::max);
    for (area, &d) in areas.iter().zip(&w.delays) {
        let ymax = w
            .transports
            .iter()
            .flat_map(|t| w.losses.iter().filter_map(move |&p| w.spread(d, p, t)))
            .map(|s| s.p95)
            .fold(0.0_f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("W3 lossy: runtime, one-way delay {d} ms"),
                ("sans-serif", 19),
            )
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.3..xmax + 0.5, 0.0..(ymax * 1.12).max(0.1))?;
        chart
            .configure_mesh()
            .x_desc("loss per packet, each direction (%)")
            .y_desc("runtime (s)")
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, t) in w.transports.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, super::parse::Spread)> = w
                .losses
                .iter()
                .filter_map(|&p| Some((p, w.spread(d, p, t)?)))
                .collect();
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|(p, s)| (*p, s.median)),
                    color.stroke_width(2),
                ))?
                .label(t.replace('/', " / "))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|(p, s)| {
                ErrorBar::new_vertical(*p, s.p5, s.median, s.p95, color.stroke_width(2), 10)
            }))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
