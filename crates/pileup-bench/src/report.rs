//! An experiment's result: its curves with their spread, the systems and
//! settings they ran with, the machine, the knee's profile and what it
//! says. JSON (the file `compare` reads) and text.

use std::collections::BTreeMap;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::knee::Shape;
use crate::profile::KneeProfile;
use crate::target::Machine;

/// One experiment's result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExperimentReport {
    pub experiment: String,
    /// What the experiment asks.
    pub question: String,
    /// What the curves count (`updates/s`, `connections/s`).
    pub unit: String,
    pub started_unix: f64,
    pub machine: Machine,
    /// Who generated the load.
    pub driver: String,
    pub systems: Vec<System>,
    pub series: Vec<Series>,
    /// The knee's profile, and the most threads' when they differ.
    pub profiles: Vec<KneeProfile>,
    /// What the curves and the profiles say.
    pub findings: Vec<String>,
    /// Why the run stopped before its end, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The options the run had: window, warm-up, rounds.
    pub window_s: f64,
    pub warmup_s: f64,
    pub rounds: u32,
}

/// A server the experiment ran on, with the settings that decide its cost.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct System {
    /// `MariaDB` or `PostgreSQL`.
    pub name: String,
    pub version: String,
    pub settings: BTreeMap<String, String>,
}

/// One curve: a system with some settings, over thread counts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Series {
    pub label: String,
    pub system: String,
    /// The settings this curve ran with beyond the system's.
    pub settings: BTreeMap<String, String>,
    pub points: Vec<Point>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knee_threads: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
}

/// One point of a curve: the rounds' medians and spread.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Point {
    pub threads: u32,
    /// Operations a second, per round.
    pub rounds: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Medians over rounds (none when no operation completed).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub errors: u64,
    /// CPU-seconds a second (cores busy): the driver's and the server's.
    pub driver_cores: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cores: Option<f64>,
    /// The machine's CPUs were the limit in most rounds.
    pub cpu_bound: bool,
    /// A server counter's rate over the window, where the experiment
    /// counts one (`Opened_tables` per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter_per_s: Option<f64>,
}

impl Series {
    pub fn medians(&self) -> Vec<(u32, f64)> {
        self.points.iter().map(|p| (p.threads, p.median)).collect()
    }
}

/// A rate for a table: 3 significant figures, thousands as k.
pub fn rate(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if v >= 10_000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v >= 1000.0 {
        format!("{:.2}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The report as text: the systems and settings, each curve as a table,
/// the knee's profile and the findings.
pub fn text(r: &ExperimentReport, w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "pileup bench {}: {}", r.experiment, r.question)?;
    let m = &r.machine;
    writeln!(w, "machine: {} cores ({}), {} GiB, Linux {}", m.cores, m.cpu, m.memory_gib, m.kernel)?;
    writeln!(w, "driver: {}", r.driver)?;
    writeln!(
        w,
        "each point: median of {} of {:.0} s after {:.0} s of warm-up; spread is min-max",
        pileup_output::plural(r.rounds, "round", "rounds"),
        r.window_s,
        r.warmup_s
    )?;
    for s in &r.systems {
        let set: Vec<String> = s.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(w, "{} {}: {}", s.name, s.version, set.join(", "))?;
    }
    if let Some(why) = &r.stopped {
        writeln!(w, "\nSTOPPED EARLY: {why}\nThe points below were measured before it stopped.")?;
    }
    for s in &r.series {
        writeln!(w)?;
        let set: Vec<String> = s.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let extra = if set.is_empty() { String::new() } else { format!(" ({})", set.join(", ")) };
        writeln!(w, "{} — {}{extra}", s.label, s.system)?;
        let counter = s.points.iter().any(|p| p.counter_per_s.is_some());
        write!(w, "  threads  {:>10}  {:>19}  p99 ms  driver cores  server cores", r.unit, "spread")?;
        writeln!(w, "{}", if counter { "  counter/s" } else { "" })?;
        for p in &s.points {
            let knee = if s.knee_threads == Some(p.threads) { " knee" } else { "" };
            let cpu = if p.cpu_bound { " CPU-bound" } else { "" };
            write!(
                w,
                "  {:>7}  {:>10}  {:>19}  {:>6}  {:>12.2}  {:>12}",
                p.threads,
                rate(p.median),
                format!("{}–{}", rate(p.min), rate(p.max)),
                p.p99_ms.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                p.driver_cores,
                p.server_cores.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into()),
            )?;
            if counter {
                write!(w, "  {:>9}", p.counter_per_s.map(rate).unwrap_or_else(|| "-".into()))?;
            }
            // Operations that failed and were counted (a deadlock, a reset
            // handshake): said where there were any.
            let failed = if p.errors > 0 { format!("  {} failed", p.errors) } else { String::new() };
            writeln!(w, "{knee}{cpu}{failed}")?;
        }
        if let Some(shape) = s.shape {
            writeln!(w, "  shape: {}", shape.describe())?;
        }
    }
    for p in &r.profiles {
        writeln!(w)?;
        crate::profile::text(p, w)?;
    }
    if !r.findings.is_empty() {
        writeln!(w, "\nWhat it shows:")?;
        for f in &r.findings {
            writeln!(w, "- {f}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_at_a_glance() {
        assert_eq!(rate(15432.0), "15.4k");
        assert_eq!(rate(1234.0), "1.23k");
        assert_eq!(rate(639.4), "639");
        assert_eq!(rate(13.46), "13.5");
        assert_eq!(rate(f64::NAN), "-");
    }
}
