//! Tables of the report, computed from the records alone (so a report can
//! be regenerated from the raw log it keeps).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::parse::{Record, Spread};

/// Thousandths, so float settings (`p=0.5`) can be map keys.
fn milli(x: f64) -> i64 {
    (x * 1000.0).round() as i64
}

/// Transports in the order first seen.
fn transports<'a>(records: impl Iterator<Item = &'a Record>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in records {
        if let Some(t) = r.str("transport") {
            if !out.iter().any(|x| x == t) {
                out.push(t.to_owned());
            }
        }
    }
    out
}

/// One point of a W1/W2 curve: Plexus and baseline figures at one N.
#[derive(Debug, Clone, PartialEq)]
pub struct RatePoint {
    pub n: u64,
    pub rate: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// W1: round trips per second of the pong served least.
    pub slowest_pong: Option<f64>,
    pub vs_baseline: Option<f64>,
}

/// W1 or W2 figures: per transport, points sorted by N; and the baseline
/// (median over every baseline run at that N).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    pub by_transport: Vec<(String, Vec<RatePoint>)>,
    pub baseline: Vec<(u64, f64)>,
    /// W1: the baseline's slowest pong (median over the baseline runs).
    pub baseline_slowest: Vec<(u64, f64)>,
}

impl Rates {
    /// Collects workload `w` (`w1` or `w2`) with its rate field `key`.
    pub fn collect(records: &[&Record], w: &str, key: &str) -> Rates {
        let ours: Vec<&Record> = records
            .iter()
            .copied()
            .filter(|r| r.ok && r.workload() == w && r.system() == "plexus")
            .collect();
        let mut by_transport = Vec::new();
        for t in transports(ours.iter().copied()) {
            let mut pts: Vec<RatePoint> = ours
                .iter()
                .filter(|r| r.str("transport") == Some(&t))
                .filter_map(|r| {
                    Some(RatePoint {
                        n: r.num("n")? as u64,
                        rate: r.num(key)?,
                        p50_us: r.num("p50_us"),
                        p99_us: r.num("p99_us"),
                        slowest_pong: r.num(SLOWEST),
                        vs_baseline: r.num("vs_baseline"),
                    })
                })
                .collect();
            pts.sort_by_key(|p| p.n);
            by_transport.push((t, pts));
        }
        let baselines: Vec<&Record> = records
            .iter()
            .copied()
            .filter(|r| r.ok && r.workload() == w && r.system() == "baseline")
            .collect();
        Rates {
            by_transport,
            baseline: median_by_n(&baselines, key),
            baseline_slowest: median_by_n(&baselines, SLOWEST),
        }
    }

    /// The baseline figure at `n`.
    pub fn baseline_at(&self, n: u64) -> Option<f64> {
        at(&self.baseline, n)
    }

    /// The baseline's slowest pong at `n` (W1).
    pub fn baseline_slowest_at(&self, n: u64) -> Option<f64> {
        at(&self.baseline_slowest, n)
    }
}

/// The W1 field with the rate of the pong served least.
const SLOWEST: &str = "slowest_pong_rtt_per_s";

/// The median of field `key` of `records` at each N.
fn median_by_n(records: &[&Record], key: &str) -> Vec<(u64, f64)> {
    let mut by_n: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in records {
        if let (Some(n), Some(v)) = (r.num("n"), r.num(key)) {
            by_n.entry(n as u64).or_default().push(v);
        }
    }
    by_n.into_iter()
        .filter_map(|(n, v)| Some((n, Spread::of(&v)?.median)))
        .collect()
}

fn at(points: &[(u64, f64)], n: u64) -> Option<f64> {
    points.iter().find(|(m, _)| *m == n).map(|(_, v)| *v)
}

/// One W3 cell: the runtimes of its runs and how many failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct W3Cell {
    pub seconds: Vec<f64>,
    pub failed: usize,
}

/// W3 figures: cells by (delay, loss) and transport.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct W3 {
    /// Transports in the order first seen.
    pub transports: Vec<String>,
    /// Delays (ms), ascending.
    pub delays: Vec<f64>,
    /// Losses (%), ascending.
    pub losses: Vec<f64>,
    cells: BTreeMap<(i64, i64, String), W3Cell>,
}

impl W3 {
    pub fn collect(records: &[&Record]) -> W3 {
        let w3: Vec<&Record> = records
            .iter()
            .copied()
            .filter(|r| r.workload() == "w3")
            .collect();
        let mut out = W3 {
            transports: transports(w3.iter().copied()),
            ..W3::default()
        };
        for r in w3 {
            let (Some(p), Some(d), Some(t)) = (r.num("p"), r.num("d_ms"), r.str("transport"))
            else {
                continue;
            };
            if !out.delays.iter().any(|x| milli(*x) == milli(d)) {
                out.delays.push(d);
            }
            if !out.losses.iter().any(|x| milli(*x) == milli(p)) {
                out.losses.push(p);
            }
            let cell = out
                .cells
                .entry((milli(d), milli(p), t.to_owned()))
                .or_default();
            match r.num("seconds") {
                Some(s) if r.ok => cell.seconds.push(s),
                _ => cell.failed += 1,
            }
        }
        out.delays.sort_by(f64::total_cmp);
        out.losses.sort_by(f64::total_cmp);
        out
    }

    pub fn cell(&self, d: f64, p: f64, t: &str) -> Option<&W3Cell> {
        self.cells.get(&(milli(d), milli(p), t.to_owned()))
    }

    pub fn spread(&self, d: f64, p: f64, t: &str) -> Option<Spread> {
        Spread::of(&self.cell(d, p, t)?.seconds)
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

fn fmt_rate(x: f64) -> String {
    if x >= 100.0 {
        // Thousands separators keep wide figures readable.
        let s = format!("{x:.0}");
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{x:.2}")
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "–".to_owned(), f)
}

/// The W1 table (markdown).
pub fn w1_table(r: &Rates) -> String {
    let mut s = String::from(
        "| transport | N | round trips/s | slowest pong | p50 µs | p99 µs | baseline round trips/s | baseline slowest pong | vs baseline |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (t, pts) in &r.by_transport {
        for p in pts {
            let _ = writeln!(
                s,
                "| `{t}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.n,
                fmt_rate(p.rate),
                opt(p.slowest_pong, fmt_rate),
                opt(p.p50_us, |x| format!("{x:.0}")),
                opt(p.p99_us, |x| format!("{x:.0}")),
                opt(r.baseline_at(p.n), fmt_rate),
                opt(r.baseline_slowest_at(p.n), fmt_rate),
                opt(p.vs_baseline, |x| format!("{x:.2}")),
            );
        }
    }
    s
}

/// The W2 table (markdown).
pub fn w2_table(r: &Rates) -> String {
    let mut s = String::from(
        "| transport | N | values/s | baseline values/s | vs baseline |\n\
         | --- | ---: | ---: | ---: | ---: |\n",
    );
    for (t, pts) in &r.by_transport {
        for p in pts {
            let _ = writeln!(
                s,
                "| `{t}` | {} | {} | {} | {} |",
                p.n,
                fmt_rate(p.rate),
                opt(r.baseline_at(p.n), fmt_rate),
                opt(p.vs_baseline, |x| format!("{x:.2}")),
            );
        }
    }
    s
}

/// The W3 table (markdown): one row per delay and loss, per transport the
/// median runtime with its 5th–95th percentile range, and for every other
/// transport its median over the first transport's (`tcp` in the default
/// set).
pub fn w3_table(w: &W3) -> String {
    let mut s = String::from("| d (ms) | loss (%) |");
    let mut rule = String::from("| ---: | ---: |");
    for t in &w.transports {
        let _ = write!(s, " `{t}`: s, median [p5–p95] |");
        rule.push_str(" ---: |");
    }
    let first = w.transports.first().cloned().unwrap_or_default();
    for t in w.transports.iter().skip(1) {
        let _ = write!(s, " `{t}` / `{first}` |");
        rule.push_str(" ---: |");
    }
    s.push('\n');
    s.push_str(&rule);
    s.push('\n');
    for &d in &w.delays {
        for &p in &w.losses {
            if w.transports.iter().all(|t| w.cell(d, p, t).is_none()) {
                continue;
            }
            let _ = write!(s, "| {d} | {p} |");
            for t in &w.transports {
                let cell = w.cell(d, p, t);
                let text = match (w.spread(d, p, t), cell) {
                    (Some(sp), Some(c)) => {
                        // Three decimals for sub-second runtimes.
                        let dp = if sp.median < 1.0 { 3 } else { 2 };
                        let mut x = format!(
                            "{:.dp$} [{:.dp$}–{:.dp$}] ({} runs)",
                            sp.median, sp.p5, sp.p95, sp.runs
                        );
                        if c.failed > 0 {
                            let _ = write!(x, ", {} failed", c.failed);
                        }
                        x
                    }
                    (None, Some(c)) => format!("all {} failed", c.failed),
                    _ => "–".to_owned(),
                };
                let _ = write!(s, " {text} |");
            }
            let base = w.spread(d, p, &first).map(|x| x.median);
            for t in w.transports.iter().skip(1) {
                let ratio = match (w.spread(d, p, t), base) {
                    (Some(x), Some(b)) if b > 0.0 => format!("{:.2}", x.median / b),
                    _ => "–".to_owned(),
                };
                let _ = write!(s, " {ratio} |");
            }
            s.push('\n');
        }
    }
    s
}

/// The W7 table (markdown): every field of every W7 record.
pub fn w7_table(records: &[&Record]) -> String {
    let mut s = String::from("| workload | system | figures |\n| --- | --- | --- |\n");
    for r in records.iter().filter(|r| r.group() == "w7") {
        let figures: Vec<String> = r
            .fields
            .iter()
            .filter(|(k, _)| *k != "workload" && *k != "system")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            r.workload(),
            if r.ok { r.system() } else { "FAILED" },
            figures.join(" ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(text: &str) -> Vec<Record> {
        text.lines().filter_map(Record::parse).collect()
    }

    #[test]
    fn w3_cells_collect_runs_and_failures_per_transport() {
        let rs = recs(
            "RESULT workload=w3 system=plexus transport=tcp p=2 d_ms=0 seconds=3
RESULT workload=w3 system=plexus transport=tcp p=2 d_ms=0 seconds=1
RESULT workload=w3 system=plexus transport=tcp p=2 d_ms=0 seconds=2
RESULT workload=w3 system=plexus transport=udp/slicing/delivery p=2 d_ms=0 seconds=1
FAILED workload=w3 system=plexus transport=udp/slicing/delivery p=2 d_ms=0 status=1
RESULT workload=w3 system=plexus transport=tcp p=0 d_ms=10 seconds=41",
        );
        let refs: Vec<&Record> = rs.iter().collect();
        let w = W3::collect(&refs);
        assert_eq!(w.transports, ["tcp", "udp/slicing/delivery"]);
        assert_eq!(w.delays, [0.0, 10.0]);
        assert_eq!(w.losses, [0.0, 2.0]);
        let tcp = w.spread(0.0, 2.0, "tcp").unwrap();
        assert_eq!((tcp.median, tcp.runs), (2.0, 3));
        assert!((tcp.p5 - 1.1).abs() < 1e-9 && (tcp.p95 - 2.9).abs() < 1e-9);
        let udp = w.cell(0.0, 2.0, "udp/slicing/delivery").unwrap();
        assert_eq!((udp.seconds.len(), udp.failed), (1, 1));

        let table = w3_table(&w);
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 2 + 2, "header, rule, two non-empty rows");
        assert!(rows[0].contains("`udp/slicing/delivery` / `tcp`"));
        assert!(
            rows[2].starts_with("| 0 | 2 | 2.00 [1.10–2.90] (3 runs) | 1.00 [1.00–1.00] (1 runs), 1 failed | 0.50 |"),
            "{}",
            rows[2]
        );
        assert!(rows[3].starts_with("| 10 | 0 | 41.00"), "{}", rows[3]);
        assert!(rows[3].ends_with("| – | – |"), "{}", rows[3]);
    }

    #[test]
    fn rates_pair_each_point_with_the_median_baseline() {
        let rs = recs(
            "RESULT workload=w1 system=baseline rtt_per_s=100 slowest_pong_rtt_per_s=10 n=4 transport=tcp
RESULT workload=w1 system=plexus rtt_per_s=80 p50_us=40 p99_us=90 slowest_pong_rtt_per_s=19 n=4 transport=tcp vs_baseline=0.80
RESULT workload=w1 system=baseline rtt_per_s=120 n=4 transport=udp
RESULT workload=w1 system=baseline rtt_per_s=110 n=4 transport=udp
RESULT workload=w1 system=plexus rtt_per_s=70 n=4 transport=udp vs_baseline=0.64
RESULT workload=w1 system=plexus rtt_per_s=20 n=1 transport=udp vs_baseline=0.5",
        );
        let refs: Vec<&Record> = rs.iter().collect();
        let r = Rates::collect(&refs, "w1", "rtt_per_s");
        assert_eq!(r.baseline, [(4, 110.0)]);
        assert_eq!(r.by_transport.len(), 2);
        let (t, pts) = &r.by_transport[1];
        assert_eq!(t, "udp");
        assert_eq!(pts.iter().map(|p| p.n).collect::<Vec<_>>(), [1, 4]);
        let table = w1_table(&r);
        assert!(
            table.contains("| `tcp` | 4 | 80.00 | 19.00 | 40 | 90 | 110 | 10.00 | 0.80 |"),
            "{table}"
        );
        assert!(
            table.contains("| `udp` | 1 | 20.00 | – | – | – | – | – | 0.50 |"),
            "{table}"
        );
    }

    #[test]
    fn large_rates_get_thousands_separators() {
        assert_eq!(fmt_rate(1234567.0), "1,234,567");
        assert_eq!(fmt_rate(123.4), "123");
        assert_eq!(fmt_rate(12.345), "12.35");
    }
}
