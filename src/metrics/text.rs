//! The Prometheus text exposition format, version 0.0.4 (prometheus.io, "Exposition
//! formats"): a `# HELP` and a `# TYPE` line per metric family, then one line per sample,
//! `name{label="value",...} value`. Label values are escaped (`\` → `\\`, `"` → `\"`,
//! newline → `\n`), HELP texts likewise but for `"`, so a queue named with quotes,
//! backslashes or newlines cannot break a line.

use crate::metrics::HistogramSnapshot;
use std::fmt::Write;

/// `Content-Type` of a page in this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type, as the `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (names end in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, `_sum`, `_count`.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A page being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

/// Appends `value` escaped as a label value.
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends a sample value: integers as integers, infinities as `+Inf`/`-Inf`.
fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

impl Exposition {
    /// An empty page with room for `bytes`.
    pub fn with_capacity(bytes: usize) -> Exposition {
        Exposition {
            out: String::with_capacity(bytes),
        }
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = write!(self.out, "# HELP {name} ");
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.as_str());
    }

    /// One sample with an integer value.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.start_sample(name, labels);
        let _ = writeln!(self.out, "{value}");
    }

    /// One sample with a floating-point value.
    pub fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.start_sample(name, labels);
        push_value(&mut self.out, value);
        self.out.push('\n');
    }

    fn start_sample(&mut self, name: &str, labels: &[(&str, &str)]) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
    }

    /// A whole histogram family (HELP, TYPE, `_bucket{le=..}`, `_sum`, `_count`), no
    /// other labels.
    pub fn histogram(&mut self, name: &str, help: &str, h: &HistogramSnapshot) {
        self.family(name, Kind::Histogram, help);
        let bucket = format!("{name}_bucket");
        for (le, n) in &h.buckets {
            let mut text = String::new();
            push_value(&mut text, *le);
            self.sample(&bucket, &[("le", &text)], *n);
        }
        self.sample_f64(&format!("{name}_sum"), &[], h.sum_seconds);
        self.sample(&format!("{name}_count"), &[], h.count);
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut e = Exposition::default();
        e.family("relaymq_x", Kind::Gauge, "a \\ help\nline");
        e.sample("relaymq_x", &[("queue", "a\"b\\c\nd"), ("vhost", "/")], 7);
        assert_eq!(
            e.finish(),
            "# HELP relaymq_x a \\\\ help\\nline\n# TYPE relaymq_x gauge\n\
             relaymq_x{queue=\"a\\\"b\\\\c\\nd\",vhost=\"/\"} 7\n"
        );
    }

    #[test]
    fn histograms_have_buckets_sum_and_count() {
        let h = crate::metrics::Histogram::new();
        h.observe(std::time::Duration::from_millis(2));
        let mut e = Exposition::default();
        e.histogram("relaymq_h_seconds", "h", &h.snapshot());
        let page = e.finish();
        assert!(page.contains("relaymq_h_seconds_bucket{le=\"0.001\"} 0\n"));
        assert!(page.contains("relaymq_h_seconds_bucket{le=\"0.0025\"} 1\n"));
        assert!(page.contains("relaymq_h_seconds_bucket{le=\"+Inf\"} 1\n"));
        assert!(page.contains("relaymq_h_seconds_sum 0.002\n"));
        assert!(page.contains("relaymq_h_seconds_count 1\n"));
    }
}
