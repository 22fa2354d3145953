//! The report every scenario ends with: the common JSON object (`--json`) and
//! helpers for the human tables in each seed's own columns.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::latency::LatencySummary;
use crate::sampler::{CpuOver, ProcessStats};

/// What was counted inside a scenario's measured window — the one place every
/// scenario's three rates come from, so `rate` means the same everywhere.
///
/// Each scenario says what its window is (after the warm-up, the span of its
/// schedule) and what one event is; the rates are the counts divided by the
/// window's length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Window {
    /// Length of the measured window, seconds.
    pub seconds: f64,
    /// Events the schedule made due within the window (`None` when the load
    /// is not paced, e.g. `--rate 0`).
    pub due: Option<u64>,
    /// Events written to the server within the window.
    pub sent: u64,
    /// Events delivered within the window (accepted, acknowledged or
    /// answered by the server — each scenario says which).
    pub delivered: u64,
}

impl Window {
    /// `n` per second over the window; `None` for an empty window (a rate
    /// from no time at all is not a rate of 0).
    fn per_second(&self, n: u64) -> Option<f64> {
        (self.seconds > 0.0).then(|| n as f64 / self.seconds)
    }
}

/// The common result object; `--json` prints exactly one on stdout.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name (`echo`, `forward`, `s2s`, `conns`).
    pub scenario: String,
    /// The parameters the run used, by their command-line names.
    pub params: serde_json::Value,
    /// What one event is (`message`, `record`, `transaction`, `connection`).
    pub unit: String,
    /// Events sent over the whole run (warm-up included).
    pub sent: u64,
    /// Events answered over the whole run (replies, acknowledgements,
    /// completed transactions, opened connections).
    pub received: u64,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// The counts of the measured window the three rates come from.
    pub window: Window,
    /// Length of the measured window, seconds (`window.seconds`).
    pub duration_s: f64,
    /// Offered rate: events the schedule made due per second over the
    /// measured window (`null` when the load is not paced, or the window
    /// is empty).
    pub offered_rate: Option<f64>,
    /// Sent rate: events written per second over the measured window
    /// (`null` when the window is empty).
    pub sent_rate: Option<f64>,
    /// The rate: events delivered per second over the measured window
    /// (`null` when the window is empty).
    pub rate: Option<f64>,
    /// Latency percentiles, microseconds; `null` when nothing was measured
    /// (never a latency of 0).
    pub latency_us: Option<LatencySummary>,
    /// The server's CPU and memory (zero when driving an external `--target`).
    pub server: ProcessStats,
    /// The load generator's own CPU and memory.
    pub client: ProcessStats,
    /// Scenario-specific figures (per-phase timings, per-rate rows, …).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub extra: serde_json::Value,
    /// The scenario measures latency: a run that recorded none failed.
    #[serde(skip)]
    pub latency_expected: bool,
}

impl Report {
    /// An empty report for `scenario` with its parameters; `unit` names
    /// what one event is.
    pub fn new(scenario: &str, unit: &str, params: serde_json::Value) -> Self {
        Report {
            scenario: scenario.to_owned(),
            params,
            unit: unit.to_owned(),
            sent: 0,
            received: 0,
            errors: BTreeMap::new(),
            window: Window::default(),
            duration_s: 0.0,
            offered_rate: None,
            sent_rate: None,
            rate: None,
            latency_us: None,
            server: ProcessStats::default(),
            client: ProcessStats::default(),
            extra: serde_json::Value::Null,
            latency_expected: false,
        }
    }

    /// Sets the measured window and the three rates derived from it.
    pub fn set_window(&mut self, w: Window) {
        self.window = w;
        self.duration_s = w.seconds;
        self.offered_rate = w.due.and_then(|d| w.per_second(d));
        self.sent_rate = w.per_second(w.sent);
        self.rate = w.per_second(w.delivered);
    }

    /// Adds `n` errors of `kind`.
    pub fn error(&mut self, kind: &str, n: u64) {
        if n > 0 {
            *self.errors.entry(kind.to_owned()).or_default() += n;
        }
    }

    /// Total errors of every kind.
    pub fn total_errors(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Why this run measured nothing, if it did not: no event delivered in
    /// the window, or no latency where the scenario measures one.
    pub fn measured_nothing(&self) -> Option<String> {
        let unit = &self.unit;
        if self.window.seconds <= 0.0 {
            return Some("the measured window is empty".into());
        }
        if self.window.delivered == 0 {
            return Some(format!(
                "no {unit} was delivered within the {:.2} s measured window ({} sent)",
                self.window.seconds, self.window.sent
            ));
        }
        if self.latency_expected && self.latency_us.is_none() {
            return Some(format!("no {unit} latency was recorded"));
        }
        None
    }

    /// The JSON object on one line, with `failure`: why the run measured
    /// nothing ([`Report::measured_nothing`]; it then exits non-zero), else
    /// `null`.
    pub fn to_json(&self) -> String {
        let mut v = serde_json::to_value(self).expect("report serialises");
        v["failure"] = self.measured_nothing().into();
        v.to_string()
    }

    /// The lines common to every human report: the window's three rates,
    /// errors, server and client resources.
    pub fn summary_lines(&self) -> String {
        let unit = &self.unit;
        // "-" for a rate of an empty window: not measured, not 0.
        let per_s = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.0} {unit}/s"));
        let offered = match (self.offered_rate, self.window.due) {
            (None, None) => "unpaced".to_owned(),
            (r, _) => per_s(r),
        };
        let mut s = format!(
            "sent {}  received {}  (whole run)\n\
             measured window {:.2} s: offered rate {offered}  sent rate {}  rate (delivered) {}\n",
            self.sent,
            self.received,
            self.duration_s,
            per_s(self.sent_rate),
            per_s(self.rate)
        );
        if self.errors.is_empty() {
            s.push_str("errors: none\n");
        } else {
            let e: Vec<String> = self
                .errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            s.push_str(&format!("errors: {}\n", e.join(" ")));
        }
        let server = if self.server.measured() {
            let mut line = format!(
                "server: cpu {}  rss max {} KiB",
                cpu_text(&self.server, true),
                self.server.rss_kb_max
            );
            // CPU per delivered unit: what compares across runs on a
            // shared machine when rates do not. Only the window's CPU over
            // the window's rate: a whole run's CPU (start-up, warm-up,
            // drain) over the window's rate would be neither.
            if let Some(rate) = self.rate.filter(|r| *r > 0.0) {
                if let Some(cpu) = self.server.window_cpu_avg().filter(|c| *c > 0.0) {
                    let us = cpu / 100.0 * 1e6 / rate;
                    line.push_str(&format!("  ~{us:.1} µs cpu per {unit}"));
                }
            }
            line
        } else {
            "server: not measured (not started by this bench)".to_owned()
        };
        let client = if self.client.measured() {
            format!(
                "cpu {}  rss max {} KiB",
                cpu_text(&self.client, false),
                self.client.rss_kb_max
            )
        } else {
            "cpu avg -  rss max -".to_owned()
        };
        s.push_str(&format!("{server}   client: {client}\n"));
        s
    }

    /// Prints the JSON object when `json` is set, else `human` followed by the
    /// summary lines; then fails (a non-zero exit) if the run measured
    /// nothing, saying why.
    pub fn emit(&self, json: bool, human: &str) -> anyhow::Result<()> {
        if json {
            println!("{}", self.to_json());
        } else {
            print!("{human}");
            print!("{}", self.summary_lines());
        }
        match self.measured_nothing() {
            Some(why) => anyhow::bail!("{} measured nothing: {why}", self.scenario),
            None => Ok(()),
        }
    }
}

/// A process's CPU figures and the span they cover: "avg 40% max 55%
/// over the measured window (10.00 s)"; `-` when its CPU was not
/// measured. `with_max` adds the one-second maximum.
fn cpu_text(p: &ProcessStats, with_max: bool) -> String {
    let Some(over) = p.cpu_over else {
        return "avg - (no span of 0.1 s or more to time it over)".to_owned();
    };
    let max = if with_max {
        format!(" max {:.0}%", p.cpu_pct_max)
    } else {
        String::new()
    };
    let span = match over {
        CpuOver::MeasuredWindow => "over the measured window",
        CpuOver::WholeRun => "over the whole run: no window marked",
    };
    format!(
        "avg {:.0}%{max} ({span}, {:.2} s)",
        p.cpu_pct_avg, p.cpu_span_s
    )
}

/// Seed 002's latency table: "~one way" (RTT/2) and round trip, microseconds.
pub fn one_way_round_trip_table(rtt: &LatencySummary) -> String {
    let ow = rtt.halved();
    let rows = [
        ("mean", ow.mean, rtt.mean),
        ("99th percentile", ow.p99, rtt.p99),
        ("99.9th percentile", ow.p999, rtt.p999),
        ("99.99th percentile", ow.p9999, rtt.p9999),
        ("99.999th percentile", ow.p99999, rtt.p99999),
        ("worst", ow.max, rtt.max),
    ];
    let mut s = String::from(
        "Results:\n---------------------------------------------------------\nlatency (microseconds) |     ~ one way |     round trip |\n",
    );
    for (name, a, b) in rows {
        s.push_str(&format!("{name:<23}|{a:>14.0} |{b:>15.0} |\n"));
    }
    s
}

/// A generic percentile table (p50 … max) for scenarios without a seed
/// table; says so when nothing was measured.
pub fn percentile_table(title: &str, l: Option<&LatencySummary>) -> String {
    match l {
        Some(l) => format!(
            "{title} (µs): mean {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  p99.99 {:.1}  max {:.1}\n",
            l.mean, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max
        ),
        None => format!("{title}: nothing measured\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_common_keys() {
        let mut r = Report::new("echo", "message", serde_json::json!({"rate": 1}));
        r.error("timeout", 2);
        r.latency_us = Some(LatencySummary::default());
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        for k in [
            "scenario",
            "params",
            "unit",
            "sent",
            "received",
            "errors",
            "window",
            "duration_s",
            "offered_rate",
            "sent_rate",
            "rate",
            "latency_us",
            "server",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        for k in [
            "mean", "p50", "p90", "p99", "p999", "p9999", "p99999", "max",
        ] {
            assert!(v["latency_us"].get(k).is_some(), "missing latency_us.{k}");
        }
        assert!(v["server"].get("cpu_pct_avg").is_some());
        assert!(v["server"].get("rss_kb_max").is_some());
        assert_eq!(v["errors"]["timeout"], 2);
    }

    #[test]
    fn the_three_rates_are_counts_of_one_window() {
        let mut r = Report::new("forward", "record", serde_json::Value::Null);
        r.set_window(Window {
            seconds: 2.0,
            due: Some(1000),
            sent: 900,
            delivered: 800,
        });
        assert_eq!(r.offered_rate, Some(500.0));
        assert_eq!(r.sent_rate, Some(450.0));
        assert_eq!(r.rate, Some(400.0));
        assert_eq!(r.duration_s, 2.0);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["offered_rate"], 500.0);
        assert_eq!(v["window"]["delivered"], 800);
        let human = r.summary_lines();
        assert!(human.contains("offered rate 500 record/s"), "{human}");
        assert!(human.contains("sent rate 450 record/s"), "{human}");
        assert!(human.contains("rate (delivered) 400 record/s"), "{human}");
        r.server.cpu_pct_avg = 50.0;
        r.server.cpu_pct_max = 70.0;
        r.server.cpu_over = Some(CpuOver::MeasuredWindow);
        r.server.cpu_span_s = 2.0;
        r.server.samples = 3;
        let human = r.summary_lines();
        // Half a core for 400 records/s: 1,250 µs each.
        assert!(human.contains("~1250.0 µs cpu per record"), "{human}");
        assert!(
            human.contains("server: cpu avg 50% max 70% (over the measured window, 2.00 s)"),
            "{human}"
        );
        // A whole run's CPU is said to be one, and not divided by the
        // window's rate.
        r.server.cpu_over = Some(CpuOver::WholeRun);
        let human = r.summary_lines();
        assert!(human.contains("over the whole run"), "{human}");
        assert!(!human.contains("cpu per record"), "{human}");
        // Sampled, but no CPU span (one reading): no CPU figure of 0.
        r.server.cpu_over = None;
        let human = r.summary_lines();
        assert!(human.contains("server: cpu avg - (no span"), "{human}");
        assert!(v["failure"].is_null(), "{v}");
    }

    #[test]
    fn an_empty_window_has_no_rates_and_says_why_it_failed() {
        let mut r = Report::new("echo", "message", serde_json::Value::Null);
        r.latency_expected = true;
        r.set_window(Window {
            seconds: 0.0,
            due: Some(0),
            sent: 0,
            delivered: 0,
        });
        assert_eq!((r.offered_rate, r.sent_rate, r.rate), (None, None, None));
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        for k in ["offered_rate", "sent_rate", "rate"] {
            assert!(v[k].is_null(), "{k} in {v}");
        }
        assert!(
            v["failure"]
                .as_str()
                .is_some_and(|f| f.contains("window is empty")),
            "{v}"
        );
        let human = r.summary_lines();
        assert!(
            human.contains("offered rate -  sent rate -  rate (delivered) -"),
            "{human}"
        );
        // Neither sampler took a sample: no figure of 0 for either.
        assert!(human.contains("server: not measured"), "{human}");
        assert!(human.contains("client: cpu avg -  rss max -"), "{human}");
        assert!(!human.contains(" 0%"), "{human}");
        assert!(r.emit(true, "").is_err());
        // Unpaced load still says so.
        r.set_window(Window {
            seconds: 1.0,
            due: None,
            sent: 5,
            delivered: 5,
        });
        assert!(r.summary_lines().contains("offered rate unpaced"));
    }

    #[test]
    fn a_run_that_delivered_nothing_or_recorded_no_latency_fails() {
        let mut r = Report::new("echo", "message", serde_json::Value::Null);
        r.latency_expected = true;
        r.set_window(Window {
            seconds: 1.0,
            due: Some(10),
            sent: 10,
            delivered: 0,
        });
        assert!(r
            .measured_nothing()
            .unwrap()
            .contains("no message was delivered"));
        r.set_window(Window {
            seconds: 1.0,
            due: Some(10),
            sent: 10,
            delivered: 10,
        });
        assert!(r.measured_nothing().unwrap().contains("latency"));
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert!(v["latency_us"].is_null(), "{v}");
        r.latency_us = Some(LatencySummary::default());
        assert_eq!(r.measured_nothing(), None);
        assert!(r.emit(true, "").is_ok());
    }

    #[test]
    fn the_seed_002_table_halves_round_trip() {
        let l = LatencySummary {
            mean: 80.0,
            p99: 148.0,
            max: 255.0,
            ..Default::default()
        };
        let t = one_way_round_trip_table(&l);
        assert!(
            t.contains("mean                   |            40 |             80 |"),
            "{t}"
        );
    }
}
