//! `RESULT` lines, the raw log the report keeps, and percentiles.

use std::collections::BTreeMap;

/// One parsed `RESULT workload=.. system=.. key=value ...` line (or a
/// `FAILED ...` line the runner writes for a run that did not finish).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `false` for a `FAILED` line.
    pub ok: bool,
    /// The `key=value` fields, by key.
    pub fields: BTreeMap<String, String>,
}

impl Record {
    /// Parses a `RESULT ...` or `FAILED ...` line; `None` for any other
    /// line or a field without `=`.
    pub fn parse(line: &str) -> Option<Record> {
        let mut words = line.split_whitespace();
        let ok = match words.next()? {
            "RESULT" => true,
            "FAILED" => false,
            _ => return None,
        };
        let mut fields = BTreeMap::new();
        for w in words {
            let (k, v) = w.split_once('=')?;
            if k.is_empty() {
                return None;
            }
            fields.insert(k.to_owned(), v.to_owned());
        }
        fields
            .contains_key("workload")
            .then_some(Record { ok, fields })
    }

    /// A field as text.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// A field as a number.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.str(key)?.parse().ok()
    }

    /// `workload` (`w1`, `w3`, `w7-spawn`, ...).
    pub fn workload(&self) -> &str {
        self.str("workload").unwrap_or("")
    }

    /// `system` (`plexus`, `baseline`).
    pub fn system(&self) -> &str {
        self.str("system").unwrap_or("")
    }

    /// The group the record belongs to: `w7-spawn` → `w7`.
    pub fn group(&self) -> &str {
        let w = self.workload();
        w.split('-').next().unwrap_or(w)
    }

    /// The line again, as printed (fields in key order).
    pub fn to_line(&self) -> String {
        let mut s = String::from(if self.ok { "RESULT" } else { "FAILED" });
        for (k, v) in &self.fields {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s
    }
}

/// The raw log of a report: each command run, then its result lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Log {
    /// `(command, results)` in the order run.
    pub entries: Vec<(String, Vec<Record>)>,
}

/// Prefix of a command line in the raw log.
pub const COMMAND_PREFIX: &str = "$ plexus-bench ";

impl Log {
    /// Parses the raw log written by [`Log::render`]; other lines are
    /// ignored.
    pub fn parse(text: &str) -> Log {
        let mut log = Log::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(cmd) = line.strip_prefix(COMMAND_PREFIX) {
                log.entries.push((cmd.to_owned(), Vec::new()));
            } else if let Some(r) = Record::parse(line) {
                match log.entries.last_mut() {
                    Some((_, rs)) => rs.push(r),
                    None => log.entries.push((String::new(), vec![r])),
                }
            }
        }
        log
    }

    /// The log as lines: `$ plexus-bench <command>` then its results.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (cmd, rs) in &self.entries {
            if !cmd.is_empty() {
                s.push_str(COMMAND_PREFIX);
                s.push_str(cmd);
                s.push('\n');
            }
            for r in rs {
                s.push_str(&r.to_line());
                s.push('\n');
            }
        }
        s
    }

    /// The group (`w1`, `w3`, ...) of a command: its first word.
    pub fn command_group(cmd: &str) -> &str {
        cmd.split_whitespace().next().unwrap_or("")
    }

    /// Keeps only the entries whose command group is not in `groups`.
    pub fn without_groups(&self, groups: &[&str]) -> Log {
        Log {
            entries: self
                .entries
                .iter()
                .filter(|(c, _)| !groups.contains(&Log::command_group(c)))
                .cloned()
                .collect(),
        }
    }

    /// Keeps only the entries whose command is not in `commands`.
    pub fn without_commands(&self, commands: &[String]) -> Log {
        Log {
            entries: self
                .entries
                .iter()
                .filter(|(c, _)| !commands.contains(c))
                .cloned()
                .collect(),
        }
    }

    /// Every record, in order.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.entries.iter().flat_map(|(_, rs)| rs.iter())
    }
}

/// The `q`-th quantile (0..=1) of `values`, linearly interpolated between
/// the closest ranks (numpy's default, Hyndman & Fan type 7). `None` for no
/// values.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// Median, 5th and 95th percentile of a list of runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub p5: f64,
    pub p95: f64,
    pub runs: usize,
}

impl Spread {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        Some(Spread {
            median: quantile(values, 0.5)?,
            p5: quantile(values, 0.05)?,
            p95: quantile(values, 0.95)?,
            runs: values.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_line_parses_into_fields() {
        let r = Record::parse(
            "RESULT workload=w3 system=plexus transport=udp/slicing/delivery p=5 d_ms=10 seconds=41.250",
        )
        .expect("a RESULT line");
        assert!(r.ok);
        assert_eq!(r.workload(), "w3");
        assert_eq!(r.system(), "plexus");
        assert_eq!(r.str("transport"), Some("udp/slicing/delivery"));
        assert_eq!(r.num("p"), Some(5.0));
        assert_eq!(r.num("seconds"), Some(41.25));
        assert_eq!(r.num("transport"), None);
    }

    #[test]
    fn other_lines_are_not_results() {
        assert_eq!(Record::parse("READY tcp://127.0.0.1:4000/pong"), None);
        assert_eq!(Record::parse("RESULT"), None, "no workload");
        assert_eq!(Record::parse("RESULT workload=w1 junk"), None);
        assert_eq!(Record::parse("RESULT workload=w1 =3"), None);
        assert_eq!(Record::parse(""), None);
    }

    #[test]
    fn failed_line_is_a_record_that_is_not_ok() {
        let r = Record::parse("FAILED workload=w3 transport=tcp p=10 d_ms=0 status=1")
            .expect("a FAILED line");
        assert!(!r.ok);
        assert_eq!(r.group(), "w3");
    }

    #[test]
    fn w7_records_group_under_w7() {
        let r = Record::parse("RESULT workload=w7-spawn system=plexus seconds=1.2").unwrap();
        assert_eq!(r.group(), "w7");
    }

    #[test]
    fn log_round_trips_and_drops_regenerated_groups() {
        let text = "\
$ plexus-bench w1 --n 1 --transport tcp
RESULT workload=w1 system=baseline n=1 rtt_per_s=100
RESULT workload=w1 system=plexus n=1 rtt_per_s=90 vs_baseline=0.90
$ plexus-bench w3 --loss 0 --delay-ms 0 --transport tcp
FAILED workload=w3 transport=tcp p=0 d_ms=0 status=1
";
        let log = Log::parse(text);
        assert_eq!(log.entries.len(), 2);
        assert_eq!(log.records().count(), 3);
        assert_eq!(Log::parse(&log.render()), log);
        let kept = log.without_groups(&["w3"]);
        assert_eq!(kept.entries.len(), 1);
        assert_eq!(kept.entries[0].0, "w1 --n 1 --transport tcp");
        let kept = log.without_commands(&["w1 --n 1 --transport tcp".to_owned()]);
        assert_eq!(kept.entries.len(), 1);
        assert_eq!(Log::command_group(&kept.entries[0].0), "w3");
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(3.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(5.0));
        // Position 0.05 * 4 = 0.2: 1 + 0.2 * (2 - 1).
        assert!((quantile(&v, 0.05).unwrap() - 1.2).abs() < 1e-12);
        assert!((quantile(&v, 0.95).unwrap() - 4.8).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.05), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn spread_of_even_count_takes_the_mean_of_the_middle_two() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.runs, 4);
        assert!(s.p5 < s.median && s.median < s.p95);
    }
}
