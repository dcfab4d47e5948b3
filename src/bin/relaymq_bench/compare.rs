//! `relaymq-bench compare URI URI…`: the same run (same flags, same checks) against each
//! URI in turn, then one table with a row per URI, or one JSON object, with throughput
//! ratios relative to the first URI.

use super::args::{Options, Target};
use super::report::{mib, Summary};
use super::run;
use std::io::Write;
use std::time::Duration;

/// Pause between two runs, so the previous server's clean-up does not weigh on the next.
pub const PAUSE_BETWEEN_RUNS: Duration = Duration::from_secs(1);

/// Microseconds per millisecond.
const US_PER_MS: f64 = 1_000.0;

/// Microseconds per second.
const US_PER_S: f64 = 1_000_000.0;

/// The outcome of one run of a comparison.
pub struct Outcome {
    /// The URI, as shown (no password).
    pub uri: String,
    /// The figures, when the run got far enough to have any.
    pub summary: Option<Summary>,
    /// Why the run failed; `None` when it passed.
    pub error: Option<String>,
}

/// Runs `opts` against each target in turn (printing a heading and the per-second lines
/// without `--json`).
pub fn run_all(opts: &Options, targets: &[Target]) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(targets.len());
    for (i, target) in targets.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(PAUSE_BETWEEN_RUNS);
        }
        let uri = target.display_uri();
        if !opts.json {
            let _ = writeln!(
                std::io::stdout(),
                "== run {}/{}: {uri}",
                i + 1,
                targets.len()
            );
        }
        let mut run_opts = opts.clone();
        run_opts.target = target.clone();
        let (summary, error) = match run::run(run_opts) {
            Ok(s) => (Some(s), None),
            Err((why, s)) => (s, Some(why)),
        };
        outcomes.push(Outcome {
            uri,
            summary,
            error,
        });
    }
    outcomes
}

/// Decimal places kept in a JSON ratio.
const RATIO_DECIMALS: i32 = 3;

/// `value / base`, `None` without a positive base.
fn ratio(value: f64, base: f64) -> Option<f64> {
    (base > 0.0).then(|| value / base)
}

/// `ratio`, rounded to [`RATIO_DECIMALS`] places for the JSON.
fn json_ratio(value: f64, base: f64) -> Option<f64> {
    let scale = 10f64.powi(RATIO_DECIMALS);
    ratio(value, base).map(|r| (r * scale).round() / scale)
}

/// The rate compared in the table's ratio column: delivered/s, or published/s when
/// nothing consumes.
fn compared_rate(opts: &Options, s: &Summary) -> f64 {
    if opts.consumers > 0 {
        s.delivered_per_s()
    } else {
        s.published_per_s()
    }
}

/// The comparison as one JSON object: `{"baseline_uri":…, "runs":[{"uri":…, <a single
/// run's fields>, "error":…, "ratio":{"published_per_s":…, "confirmed_per_s":…,
/// "delivered_per_s":…}}, …]}`; ratios are relative to the first run (`null` when it
/// has no such figure).
pub fn to_json(outcomes: &[Outcome]) -> serde_json::Value {
    let base = outcomes.first().and_then(|o| o.summary.as_ref());
    let runs: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| {
            let mut v = match &o.summary {
                Some(s) => s.to_json(),
                None => serde_json::json!({}),
            };
            let r = |f: fn(&Summary) -> f64| {
                o.summary
                    .as_ref()
                    .zip(base)
                    .and_then(|(s, b)| json_ratio(f(s), f(b)))
            };
            if let Some(map) = v.as_object_mut() {
                map.insert("uri".into(), o.uri.clone().into());
                map.insert("error".into(), o.error.clone().into());
                map.insert(
                    "ratio".into(),
                    serde_json::json!({
                        "published_per_s": r(Summary::published_per_s),
                        "confirmed_per_s": r(Summary::confirmed_per_s),
                        "delivered_per_s": r(Summary::delivered_per_s),
                    }),
                );
            }
            v
        })
        .collect();
    serde_json::json!({
        "baseline_uri": outcomes.first().map(|o| o.uri.clone()),
        "runs": runs,
    })
}

/// A rate with thousands separators, `-` for 0.
fn rate(v: f64) -> String {
    if v <= 0.0 {
        return "-".into();
    }
    let digits = format!("{:.0}", v);
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency in µs, in µs, ms or s.
fn latency(us: f64) -> String {
    if us < US_PER_MS {
        format!("{us:.0} µs")
    } else if us < US_PER_S {
        format!("{:.2} ms", us / US_PER_MS)
    } else {
        format!("{:.2} s", us / US_PER_S)
    }
}

/// A ratio as `1.00x`, `5.30x`, `12.5x`.
fn times(r: f64) -> String {
    if r < 10.0 {
        format!("{r:.2}x")
    } else {
        format!("{r:.1}x")
    }
}

/// The comparison as a table, then the failures, one a line.
pub fn to_table(opts: &Options, outcomes: &[Outcome]) -> String {
    let ratio_head = if opts.consumers > 0 {
        "delivered/s vs first"
    } else {
        "published/s vs first"
    };
    let head = [
        "uri",
        "published/s",
        "confirmed/s",
        "delivered/s",
        "p50",
        "p99",
        "p99.9",
        "max",
        "server RSS",
        ratio_head,
        "result",
    ];
    let base = outcomes
        .first()
        .and_then(|o| o.summary.as_ref())
        .map(|s| compared_rate(opts, s));
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    for o in outcomes {
        let mut row = vec![o.uri.clone()];
        match &o.summary {
            Some(s) => {
                row.push(rate(s.published_per_s()));
                row.push(rate(s.confirmed_per_s()));
                row.push(rate(s.delivered_per_s()));
                match s.latency {
                    Some(l) => row.extend([l.p50, l.p99, l.p999, l.max].map(latency)),
                    None => row.extend(std::iter::repeat_n("-".to_string(), 4)),
                }
                row.push(s.server_rss_bytes.map_or("-".into(), mib));
                row.push(
                    base.and_then(|b| ratio(compared_rate(opts, s), b))
                        .map_or("-".into(), times),
                );
            }
            None => row.extend(std::iter::repeat_n("-".to_string(), 9)),
        }
        row.push(if o.error.is_some() { "FAILED" } else { "ok" }.into());
        rows.push(row);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                let pad = w - cell.chars().count();
                // The URI left-aligned, the figures right-aligned.
                if c == 0 {
                    format!("{cell}{}", " ".repeat(pad))
                } else {
                    format!("{}{cell}", " ".repeat(pad))
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for o in outcomes {
        if let Some(e) = &o.error {
            out.push_str(&format!("{} failed: {e}\n", o.uri));
        }
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(rate(1_426_108.4), "1,426,108");
        assert_eq!(rate(999.0), "999");
        assert_eq!(rate(0.0), "-");
        assert_eq!(latency(348.0), "348 µs");
        assert_eq!(latency(8_900.0), "8.90 ms");
        assert_eq!(latency(6_650_000.0), "6.65 s");
        assert_eq!(times(1.0), "1.00x");
        assert_eq!(times(5.3), "5.30x");
        assert_eq!(times(12.46), "12.5x");
    }
}
