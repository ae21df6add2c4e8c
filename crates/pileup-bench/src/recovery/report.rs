//! The crash-recovery experiment's result: for each redo-log size, the
//! time until the killed server answers again against the dirty pages
//! and redo it left, killed under load and killed with the pages flushed
//! first; the recovering server's profile; JSON and text.

use std::collections::BTreeMap;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::target::Machine;

/// A crash-recovery run's result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecoveryReport {
    /// `recovery`.
    pub experiment: String,
    pub question: String,
    pub started_unix: f64,
    pub machine: Machine,
    pub version: String,
    /// The server's settings every point ran with (beside the redo-log
    /// size, which is the points' own).
    pub settings: BTreeMap<String, String>,
    /// The table the load writes: rows, and its pages.
    pub rows: u64,
    pub table_pages: u64,
    /// Clients of the write load.
    pub clients: u32,
    /// Killed under load, the load ran until the redo since the last
    /// checkpoint was this share of the log (percent).
    pub redo_fill_pct: u32,
    pub rounds: u32,
    pub points: Vec<RecoveryPoint>,
    /// What the recovering server spent its time on: for each redo-log
    /// size, one more crash under load at its most dirty pages, sampled.
    pub profiles: Vec<RecoveryProfile>,
    pub findings: Vec<String>,
    pub notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// One point: a redo-log size, a dirty-page target, killed under load or
/// flushed first; its crashes and their medians.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecoveryPoint {
    pub redo_log_bytes: u64,
    pub dirty_target: u64,
    /// The dirty pages were written and the checkpoint moved up before
    /// the kill (the load stopped for it).
    pub flushed: bool,
    pub crashes: Vec<Crash>,
    /// Medians over the crashes.
    pub median_seconds: f64,
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub median_dirty_at_kill: u64,
    pub median_checkpoint_age: u64,
}

/// One SIGKILL and the start after it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Crash {
    /// Dirty pages and checkpoint age (bytes of redo since the last
    /// checkpoint) read just before the kill.
    pub dirty_at_kill: u64,
    pub checkpoint_age: u64,
    /// How long the load ran to get there, and whether it reached the
    /// target (else the redo log's checkpoints held the pages below it).
    pub fill_seconds: f64,
    pub reached: bool,
    /// From SIGKILL until the process was gone.
    pub seconds_to_die: f64,
    /// From the new process's start until it answered a query.
    pub seconds_to_answer: f64,
    /// The server's log: redo it applied (LSN bytes) and pages it recovered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo_to_apply: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_to_recover: Option<u64>,
    /// The start's error-log lines, timed from the process's start.
    pub phases: Vec<Phase>,
}

/// An error-log line and when it appeared.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Phase {
    pub seconds: f64,
    pub line: String,
}

/// Where a recovering server's time went.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecoveryProfile {
    pub redo_log_bytes: u64,
    pub dirty_target: u64,
    /// The sampled start's time to answer (not one of the point's: sampling
    /// takes CPU the server would have had).
    pub seconds_to_answer: f64,
    /// Captures taken and thread-samples in them.
    pub captures: usize,
    pub thread_samples: usize,
    /// Thread-samples running on a CPU, and in uninterruptible sleep (the disk).
    pub running: usize,
    pub disk_state: usize,
    /// The busy samples (running, or in the disk) by innermost frame, and
    /// by innermost frame of the server's own binary.
    pub busy_innermost: Vec<Share>,
    pub busy_server_function: Vec<Share>,
    /// Share of busy samples whose innermost server frame has no name.
    pub unnamed_share: f64,
    /// The busy samples by what their frames say (file reads, writes,
    /// syncs, waits, or plain work on a CPU).
    pub busy_classes: Vec<Share>,
    pub notes: Vec<String>,
}

pub use crate::profile::Share;

/// The median of a count the crashes state (pages, bytes), in whole units:
/// 0 without crashes (the median of none is NaN, which casts to 0).
fn median_count(crashes: &[Crash], f: impl Fn(&Crash) -> u64) -> u64 {
    pileup_stats::median(&crashes.iter().map(|c| f(c) as f64).collect::<Vec<_>>()) as u64
}

impl RecoveryPoint {
    /// A point from its crashes (its medians computed here, and only here).
    pub fn of(redo_log_bytes: u64, dirty_target: u64, flushed: bool, crashes: Vec<Crash>) -> RecoveryPoint {
        let secs: Vec<f64> = crashes.iter().map(|c| c.seconds_to_answer).collect();
        let (min_seconds, max_seconds) = pileup_stats::range(&secs).unwrap_or((0.0, 0.0));
        RecoveryPoint {
            redo_log_bytes,
            dirty_target,
            flushed,
            median_seconds: pileup_stats::median(&secs),
            min_seconds,
            max_seconds,
            median_dirty_at_kill: median_count(&crashes, |c| c.dirty_at_kill),
            median_checkpoint_age: median_count(&crashes, |c| c.checkpoint_age),
            crashes,
        }
    }

    /// The point's label: `redo 64 MiB, 5000 dirty pages, killed under load`.
    pub fn label(&self) -> String {
        format!("redo {}, {}", mib(self.redo_log_bytes), self.how())
    }

    fn how(&self) -> &'static str {
        if self.flushed {
            "flushed first"
        } else {
            "killed under load"
        }
    }
}

/// What in a report does not agree with itself: each point's medians
/// against its crashes, and each crash's figures against each other.
pub fn disagreements(r: &RecoveryReport) -> Vec<String> {
    let mut out = vec![];
    for p in &r.points {
        let again = RecoveryPoint::of(p.redo_log_bytes, p.dirty_target, p.flushed, p.crashes.clone());
        // (Seconds read back from JSON may differ in the last digit.)
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
        if !near(again.median_seconds, p.median_seconds)
            || !near(again.min_seconds, p.min_seconds)
            || !near(again.max_seconds, p.max_seconds)
            || again.median_dirty_at_kill != p.median_dirty_at_kill
            || again.median_checkpoint_age != p.median_checkpoint_age
        {
            out.push(format!("{}: its medians are not those of its crashes", p.label()));
        }
        for c in &p.crashes {
            // Flushed first, the pages were dirty before the flush, not at the kill.
            if c.reached && !p.flushed && c.dirty_at_kill < p.dirty_target {
                out.push(format!(
                    "{}: a crash marked reached has {} of {} pages",
                    p.label(),
                    c.dirty_at_kill,
                    p.dirty_target
                ));
            }
            if c.phases.windows(2).any(|w| w[1].seconds < w[0].seconds) {
                out.push(format!("{}: log lines out of time order", p.label()));
            }
        }
    }
    for (i, p) in r.profiles.iter().enumerate() {
        let sum: f64 = p.busy_classes.iter().map(|s| s.share).sum();
        if p.running + p.disk_state > 0 && (sum - 1.0).abs() > 1e-6 {
            out.push(format!("profile {i}: its busy classes add up to {sum:.3}, not 1"));
        }
        if p.running + p.disk_state > p.thread_samples {
            out.push(format!("profile {i}: more busy samples than samples"));
        }
    }
    out
}

/// A size as users write it: whole GiB, else MiB (one decimal below
/// ten), else KiB.
pub(crate) fn mib(bytes: u64) -> String {
    let m = bytes as f64 / 1048576.0;
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if m >= 10.0 {
        format!("{m:.0} MiB")
    } else if bytes >= 1 << 20 {
        format!("{m:.1} MiB")
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The report as text.
pub fn text(r: &RecoveryReport, w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "recovery: {}", r.question)?;
    let m = &r.machine;
    writeln!(
        w,
        "server: MariaDB {}; machine: {} cores ({}), {} GiB, Linux {}",
        r.version, m.cores, m.cpu, m.memory_gib, m.kernel
    )?;
    let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(w, "settings: {}", settings.join(", "))?;
    writeln!(
        w,
        "load: {} clients updating random rows among the target's pages of a table of {} rows ({} pages); killed under load once the redo since the last checkpoint is {}% of the log, flushed first once the pages are dirty; {} round{} a point",
        r.clients,
        r.rows,
        r.table_pages,
        r.redo_fill_pct,
        r.rounds,
        if r.rounds == 1 { "" } else { "s" }
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "dirty: pages at the kill; redo: since the last checkpoint at the kill (status); log: redo and pages the server's log says it recovered; answers: from its start (medians)"
    )?;
    writeln!(
        w,
        "{:<9} {:>7} {:<18} {:>7} {:>9} {:>9} {:>7} {:>8}  (min–max)",
        "redo log", "target", "", "dirty", "redo", "log: redo", "pages", "answers"
    )?;
    for p in &r.points {
        let pages = median_count(&p.crashes, |c| c.pages_to_recover.unwrap_or(0));
        let log_redo = median_count(&p.crashes, |c| c.redo_to_apply.unwrap_or(0));
        let short = p.crashes.iter().filter(|c| !c.reached).count();
        writeln!(
            w,
            "{:<9} {:>7} {:<18} {:>7} {:>9} {:>9} {:>7} {:>7.2}s  ({:.2}–{:.2}){}",
            mib(p.redo_log_bytes),
            p.dirty_target,
            p.how(),
            p.median_dirty_at_kill,
            mib(p.median_checkpoint_age),
            mib(log_redo),
            pages,
            p.median_seconds,
            p.min_seconds,
            p.max_seconds,
            if short > 0 && !p.flushed { format!("  target not reached in {short}") } else { String::new() }
        )?;
    }
    for p in &r.profiles {
        profile_text(p, w)?;
    }
    if let Some(p) = r.points.iter().rev().find(|p| !p.flushed && !p.crashes.is_empty()) {
        if let Some(c) = p.crashes.last() {
            writeln!(
                w,
                "\nThe server's log of the last start of {} at {} pages (seconds from its start):",
                p.label(),
                p.dirty_target
            )?;
            for ph in c.phases.iter().filter(|ph| ph.line.contains("InnoDB") || ph.line.contains("ready for")) {
                writeln!(w, "  {:>6.2}  {}", ph.seconds, ph.line)?;
            }
        }
    }
    if !r.findings.is_empty() {
        writeln!(w)?;
        for f in &r.findings {
            writeln!(w, "{f}")?;
        }
    }
    for n in &r.notes {
        writeln!(w, "note: {n}")?;
    }
    if let Some(s) = &r.stopped {
        writeln!(w, "stopped: {s}")?;
    }
    Ok(())
}

fn profile_text(p: &RecoveryProfile, w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w)?;
    let busy = p.running + p.disk_state;
    writeln!(
        w,
        "Recovering server, redo {} at {} dirty pages (one more crash, sampled every 10 ms: {:.2} s to answer): {} captures, {} thread-samples; {} on a CPU, {} in the disk (state D)",
        mib(p.redo_log_bytes),
        p.dirty_target,
        p.seconds_to_answer,
        p.captures,
        p.thread_samples,
        p.running,
        p.disk_state
    )?;
    let list = |v: &[Share]| v.iter().map(|s| format!("{} {}", s.name, pct(s.share))).collect::<Vec<_>>().join(", ");
    if busy > 0 {
        writeln!(w, "  busy samples by what they do: {}", list(&p.busy_classes))?;
        writeln!(w, "  busy innermost frame: {}", list(&p.busy_innermost))?;
        if !p.busy_server_function.is_empty() {
            writeln!(w, "  busy innermost server function: {}", list(&p.busy_server_function))?;
        }
    }
    if p.unnamed_share > 0.0 {
        writeln!(
            w,
            "  {} of the busy samples stop in server code with no name (module+offset): the binary is stripped and InnoDB's recovery functions are not among its exported names",
            pct(p.unnamed_share)
        )?;
    }
    for n in &p.notes {
        writeln!(w, "  note: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn crash(seconds: f64, dirty: u64, reached: bool) -> Crash {
        Crash {
            dirty_at_kill: dirty,
            checkpoint_age: dirty * 8192,
            fill_seconds: 1.0,
            reached,
            seconds_to_die: 0.01,
            seconds_to_answer: seconds,
            redo_to_apply: Some(dirty * 8192),
            pages_to_recover: Some(dirty),
            phases: vec![Phase { seconds: 0.1, line: "a".into() }, Phase { seconds: 0.2, line: "b".into() }],
        }
    }

    pub(crate) fn report(points: Vec<RecoveryPoint>) -> RecoveryReport {
        RecoveryReport {
            experiment: "recovery".into(),
            question: String::new(),
            started_unix: 0.0,
            machine: Machine { cores: 2, memory_gib: 24.0, kernel: "6.1".into(), cpu: "x".into() },
            version: "10.11".into(),
            settings: BTreeMap::new(),
            rows: 1000,
            table_pages: 20,
            clients: 4,
            redo_fill_pct: 50,
            rounds: 3,
            points,
            profiles: vec![],
            findings: vec![],
            notes: vec![],
            stopped: None,
        }
    }

    #[test]
    fn a_points_medians_are_its_crashes() {
        let p = RecoveryPoint::of(
            64 << 20,
            1000,
            false,
            vec![crash(0.3, 1100, true), crash(0.1, 1000, true), crash(0.2, 1300, true)],
        );
        assert_eq!((p.median_seconds, p.min_seconds, p.max_seconds), (0.2, 0.1, 0.3));
        assert_eq!(p.median_dirty_at_kill, 1100);
        assert_eq!(p.median_checkpoint_age, 1100 * 8192);
        assert!(disagreements(&report(vec![p])).is_empty());
    }

    #[test]
    fn figures_that_do_not_agree_are_found() {
        let mut p = RecoveryPoint::of(64 << 20, 1000, false, vec![crash(0.3, 1100, true), crash(0.1, 900, true)]);
        assert_eq!(disagreements(&report(vec![p.clone()])).len(), 1, "a crash marked reached below its target");
        p.crashes[1].reached = false;
        assert!(disagreements(&report(vec![p.clone()])).is_empty());
        p.median_seconds = 9.0;
        assert_eq!(disagreements(&report(vec![p.clone()])).len(), 1, "a median not of its crashes");
        p.median_seconds = 0.2;
        p.crashes[0].phases.reverse();
        assert_eq!(disagreements(&report(vec![p])).len(), 1, "log lines out of time order");
        let mut r = report(vec![]);
        r.profiles.push(RecoveryProfile {
            redo_log_bytes: 1,
            dirty_target: 1,
            seconds_to_answer: 0.5,
            captures: 3,
            thread_samples: 10,
            running: 4,
            disk_state: 0,
            busy_innermost: vec![],
            busy_server_function: vec![],
            unnamed_share: 0.0,
            busy_classes: vec![Share { name: "working on a CPU".into(), share: 0.75 }],
            notes: vec![],
        });
        assert_eq!(disagreements(&r).len(), 1, "busy classes that do not add up");
    }

    #[test]
    fn sizes_read_as_users_write_them() {
        assert_eq!(mib(64 << 20), "64 MiB");
        assert_eq!(mib(1 << 30), "1 GiB");
        assert_eq!(mib(0), "0 KiB");
        assert_eq!(mib(3 << 19), "1.5 MiB");
        assert_eq!(mib(300 << 10), "300 KiB");
    }
}
