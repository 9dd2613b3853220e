//! `w5-plot`: the W5 figures from the `RESULT workload=w5` lines of a log
//! (the output of `plexus-bench w5` runs): reports/s against devices (1
//! and 3 servers), drop %, device MTTF and server MTTF, each beside the
//! target (3 × Pekko's 29.6 k reports/s = 90 k).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::runner::plots::register_font;

/// Arguments of `w5-plot`.
#[derive(clap::Args)]
pub struct Args {
    /// A log holding `RESULT workload=w5 ...` lines.
    #[arg(long)]
    from: PathBuf,
    /// The PNG to write.
    #[arg(long, default_value = "docs/img/w5.png")]
    out: PathBuf,
    /// A TrueType font (default: a system one).
    #[arg(long)]
    font: Option<PathBuf>,
}

const BLUE: RGBColor = RGBColor(31, 119, 180);
const RED: RGBColor = RGBColor(214, 39, 40);
/// 3 × Pekko on this machine (29.6 k reports/s, 1 server, 32 devices).
const TARGET: f64 = 88_800.0;

type Row = HashMap<String, f64>;
/// A line of a panel: its points, colour and legend.
type Curve<'a> = (Vec<(f64, f64)>, RGBColor, &'a str);

/// Runs `w5-plot`.
pub fn run(args: &Args) {
    let text = match std::fs::read_to_string(&args.from) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("w5-plot: {}: {e}", args.from.display());
            std::process::exit(1);
        }
    };
    let rows: Vec<Row> = text
        .lines()
        .filter(|l| l.starts_with("RESULT workload=w5 "))
        .map(|l| {
            l.split(' ')
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_owned(), v.parse().ok()?))
                })
                .collect()
        })
        .collect();
    if let Err(e) = draw(&args.out, args.font.as_deref(), &rows) {
        eprintln!("w5-plot: {e}");
        std::process::exit(1);
    }
    println!("wrote {}", args.out.display());
}

/// `(x, reports/s)` of the rows matching `fixed`, sorted by x.
fn series(rows: &[Row], x: &str, fixed: &[(&str, f64)]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| fixed.iter().all(|(k, val)| r.get(*k) == Some(val)))
        .filter_map(|r| Some((*r.get(x)?, *r.get("reports_per_s")?)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

fn draw(path: &Path, font: Option<&Path>, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    register_font(font)?;
    let root = BitMapBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 2));
    let calm = [("drop", 0.0), ("mttf_s", 0.0), ("server_mttf_s", 0.0)];
    let with = |extra: &[(&'static str, f64)], skip: &str| -> Vec<(&'static str, f64)> {
        calm.iter()
            .copied()
            .filter(|(k, _)| *k != skip)
            .chain(extra.iter().copied())
            .collect()
    };
    panel(
        &panels[0],
        "reports/s against devices",
        "devices",
        &[
            (
                series(rows, "devices", &with(&[("servers", 1.0)], "")),
                BLUE,
                "1 server",
            ),
            (
                series(rows, "devices", &with(&[("servers", 3.0)], "")),
                RED,
                "3 servers",
            ),
        ],
    )?;
    panel(
        &panels[1],
        "reports/s against drop (1 server, 32 devices)",
        "% of messages dropped each way",
        &[(
            series(
                rows,
                "drop",
                &with(&[("servers", 1.0), ("devices", 32.0)], "drop"),
            ),
            BLUE,
            "1 server",
        )],
    )?;
    panel(
        &panels[2],
        "reports/s against device MTTF (32 devices)",
        "mean seconds between kills of each device process",
        &[
            (
                series(
                    rows,
                    "mttf_s",
                    &with(&[("servers", 1.0), ("devices", 32.0)], "mttf_s"),
                ),
                BLUE,
                "1 server",
            ),
            (
                series(
                    rows,
                    "mttf_s",
                    &with(&[("servers", 3.0), ("devices", 32.0)], "mttf_s"),
                ),
                RED,
                "3 servers",
            ),
        ],
    )?;
    panel(
        &panels[3],
        "reports/s against server MTTF (32 devices)",
        "mean seconds between kills of each server",
        &[
            (
                series(
                    rows,
                    "server_mttf_s",
                    &with(&[("servers", 1.0), ("devices", 32.0)], "server_mttf_s"),
                ),
                BLUE,
                "1 server",
            ),
            (
                series(
                    rows,
                    "server_mttf_s",
                    &with(&[("servers", 3.0), ("devices", 32.0)], "server_mttf_s"),
                ),
                RED,
                "3 servers",
            ),
        ],
    )?;
    root.present()?;
    Ok(())
}

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    x_desc: &str,
    lines: &[Curve<'_>],
) -> Result<(), Box<dyn std::error::Error>> {
    let xmax = lines
        .iter()
        .flat_map(|l| l.0.iter().map(|p| p.0))
        .fold(1.0f64, f64::max)
        * 1.1;
    let ymax = lines
        .iter()
        .flat_map(|l| l.0.iter().map(|p| p.1))
        .fold(TARGET, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("reports/s")
        .y_label_formatter(&|y| format!("{:.0}k", y / 1000.0))
        .label_style(("sans-serif", 13))
        .draw()?;
    for (points, color, label) in lines {
        let color = *color;
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, TARGET), (xmax, TARGET)],
            BLACK.stroke_width(1),
        ))?
        .label("target: 3 x Pekko (88.8 k)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(1)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    Ok(())
}
