//! `pileup bench recovery`: how long a MariaDB server killed with SIGKILL
//! takes to answer again, against the redo log's size and the dirty pages
//! it left, beside the same crash with the pages flushed first; with what
//! the recovering server spent that time on.
//!
//! Data flow:
//!
//! ```text
//! for each redo-log size: a sandbox started with it (load: its table)
//!   for each dirty-page target, killed under load and flushed first, rounds:
//!     load (writers until the target) → crash (SIGKILL, start, time it,
//!     sample its stacks, read its log) → report (a point: medians)
//!   → profile (the most dirty crashes' stacks, reduced)
//! → findings → report (text, JSON) · plot (SVG)
//! ```
//!
//! It runs only on sandboxes it starts itself: it kills their servers.

mod crash;
mod load;
pub mod plot;
mod profile;
pub mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql::prelude::Queryable;
use pileup_sandbox::Sandbox;

use crate::error::{ExperimentError, Result};
pub use report::{disagreements, Crash, Phase, RecoveryPoint, RecoveryProfile, RecoveryReport};

/// What a run reports as it goes.
#[derive(serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    /// A crash is about to be prepared (the load, the kill).
    Crash { label: &'a str, round: u32, rounds: u32 },
    /// A point is measured: the report so far (for keeping partial results).
    Point { report: &'a RecoveryReport },
}

/// How a run's progress line reads.
impl pileup_output::News for Event<'_> {
    fn progress(&self) -> pileup_output::Progress {
        match self {
            Event::Crash { label, round, rounds } => {
                pileup_output::Progress::doing(format!("recovery: {label}, crash {round} of {rounds}"))
            }
            Event::Point { .. } => pileup_output::Progress::none(),
        }
    }
}

/// Where a run reports (ripgrep's `Sink`).
pub trait Sink {
    fn event(&mut self, e: &Event);
}

impl<F: FnMut(&Event)> Sink for F {
    fn event(&mut self, e: &Event) {
        self(e)
    }
}

/// How the experiment runs.
#[derive(Debug, Clone)]
pub struct RecoveryOptions {
    /// Redo-log sizes (`innodb_log_file_size`), bytes: a sandbox each.
    pub redo_sizes: Vec<u64>,
    /// Dirty-page counts the load reaches before the kill.
    pub dirty: Vec<u64>,
    pub rounds: u32,
    /// Rows of the table (`None`: the largest target's pages and a fifth
    /// more, at least 100,000).
    pub rows: Option<u64>,
    /// Clients of the write load.
    pub clients: u32,
    /// Killed under load, the load runs until the redo since the last
    /// checkpoint is this share of the redo log (percent).
    pub redo_fill_pct: u32,
    /// How long the load may run to reach a target.
    pub fill_within: Duration,
    /// How long a start may take before the run gives up.
    pub recover_within: Duration,
    /// Sample the recovering server's stacks.
    pub profile: bool,
    /// Where the sandboxes are made (`None`: the sandboxes' own place).
    pub base_dir: Option<PathBuf>,
    /// Set by a signal: the run ends between crashes with what it measured.
    pub stop: Option<Arc<AtomicBool>>,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions {
            redo_sizes: vec![64 << 20, 256 << 20],
            dirty: vec![1000, 8000],
            rounds: 3,
            rows: None,
            clients: 4,
            redo_fill_pct: 50,
            fill_within: Duration::from_secs(120),
            recover_within: Duration::from_secs(600),
            profile: true,
            base_dir: None,
            stop: None,
        }
    }
}

/// The smallest redo log the experiment takes (MariaDB takes 1 MiB, but
/// a load of this size checkpoints it continuously).
const MIN_REDO: u64 = 4 << 20;
/// The page-flushing settings that let dirty pages pile up until the redo
/// log's own checkpoints force them out.
const FLUSHING: [(&str, &str); 6] = [
    ("innodb_max_dirty_pages_pct", "90"),
    ("innodb_max_dirty_pages_pct_lwm", "0"),
    ("innodb_adaptive_flushing", "OFF"),
    ("innodb_io_capacity", "100"),
    ("innodb_buffer_pool_load_at_startup", "OFF"),
    ("innodb_buffer_pool_dump_at_shutdown", "OFF"),
];

impl RecoveryOptions {
    /// Whether the options make a run; the reason if not.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.redo_sizes.is_empty() || self.redo_sizes.iter().any(|&r| r < MIN_REDO) {
            return Err("--redo-sizes takes sizes of 4M or more, comma-separated (64M,512M)".into());
        }
        if self.dirty.is_empty() || self.dirty.contains(&0) {
            return Err("--dirty takes page counts of 1 or more, comma-separated (1000,8000)".into());
        }
        if !(1..=90).contains(&self.redo_fill_pct) {
            return Err(
                "--redo-fill takes 1 to 90 (percent of the redo log): InnoDB forces a checkpoint near its end".into()
            );
        }
        if self.rounds == 0 || self.clients == 0 {
            return Err("--rounds and the load's clients must be at least 1".into());
        }
        if self.rows.is_some_and(|r| r < 1000 || r > u64::from(u32::MAX)) {
            return Err("--rows takes 1000 to 4294967295 rows for recovery".into());
        }
        Ok(())
    }

    fn rows(&self) -> u64 {
        let most = self.dirty.iter().copied().max().unwrap_or(0);
        // The largest target's pages, and a fifth more the load leaves alone.
        self.rows.unwrap_or_else(|| (most * load::ROWS_PER_PAGE * 6 / 5).max(100_000))
    }

    /// A buffer pool that holds the whole table twice over, in 128 MiB
    /// steps, at least 256 MiB.
    fn pool_bytes(&self) -> u64 {
        let table = self.rows() / load::ROWS_PER_PAGE * 16384;
        (table * 2).div_ceil(128 << 20).max(2) * (128 << 20)
    }

    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
    }
}

/// Run the experiment. A run that stops (a signal, a server that does not
/// come back) returns the points measured, with why in `stopped`.
pub fn run(o: &RecoveryOptions, sink: &mut dyn Sink) -> Result<RecoveryReport> {
    o.check().map_err(ExperimentError::Usage)?;
    let mut settings: BTreeMap<String, String> = FLUSHING.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    settings.insert("innodb_buffer_pool_size".into(), report::mib(o.pool_bytes()));
    settings.insert("innodb_flush_log_at_trx_commit".into(), "2".into());
    let mut r = RecoveryReport {
        experiment: "recovery".into(),
        question: "how long does a server killed with SIGKILL take to answer again, against its redo log and dirty pages, and with them flushed first?".into(),
        started_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        machine: crate::target::Machine::here(),
        version: String::new(),
        settings,
        rows: o.rows(),
        table_pages: 0,
        clients: o.clients,
        redo_fill_pct: o.redo_fill_pct,
        rounds: o.rounds,
        points: vec![],
        profiles: vec![],
        findings: vec![],
        notes: vec![],
        stopped: None,
    };
    for &redo in &o.redo_sizes {
        if let Err(e) = one_redo_size(o, redo, &mut r, sink) {
            r.stopped = Some(match e {
                ExperimentError::Stopped { why } => why,
                e => e.to_string(),
            });
            break;
        }
    }
    r.findings = findings(&r);
    r.notes.push(format!(
        "a SIGKILL is a process crash, not a host crash: the host's page cache keeps what the server wrote, and the table ({}) may be read back from memory rather than the device",
        report::mib(r.table_pages * 16384)
    ));
    Ok(r)
}

fn start_sandbox(o: &RecoveryOptions, redo: u64) -> Result<Sandbox> {
    let mut cnf: Vec<(String, String)> = FLUSHING.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    cnf.push(("innodb_log_file_size".into(), redo.to_string()));
    cnf.push(("innodb_buffer_pool_size".into(), o.pool_bytes().to_string()));
    Sandbox::start(pileup_sandbox::Options {
        name: Some(format!("recovery-{}-{}", std::process::id(), redo >> 20)),
        base_dir: o.base_dir.clone(),
        cnf,
        ..Default::default()
    })
    .map_err(|e| ExperimentError::Server(format!("starting a sandbox with a {} redo log: {e}", report::mib(redo))))
}

/// Every point of one redo-log size, on a sandbox of its own.
fn one_redo_size(o: &RecoveryOptions, redo: u64, r: &mut RecoveryReport, sink: &mut dyn Sink) -> Result<()> {
    let mut sb = start_sandbox(o, redo)?;
    let mut c = sb.connect().map_err(|e| ExperimentError::Server(e.to_string()))?;
    r.version = c.query_first::<String, _>("SELECT VERSION()").ok().flatten().unwrap_or_default();
    r.table_pages = load::fill(&mut c, r.rows)?;
    drop(c);
    let most = o.dirty.iter().copied().max().unwrap_or(0);
    for &target in &o.dirty {
        for flushed in [false, true] {
            let label = format!(
                "redo {}, {target} dirty pages, {}",
                report::mib(redo),
                if flushed { "flushed first" } else { "killed under load" }
            );
            let mut crashes = vec![];
            for round in 1..=o.rounds {
                if o.stopped() {
                    return Err(ExperimentError::Stopped { why: "stopped by a signal".into() });
                }
                sink.event(&Event::Crash { label: &label, round, rounds: o.rounds });
                crashes.push(one_crash(o, &mut sb, r.rows, redo, target, flushed, false)?.0);
            }
            r.points.push(RecoveryPoint::of(redo, target, flushed, crashes));
            if !flushed && target == most && o.profile {
                // The stacks come from one more crash, sampled and not
                // counted in the point: sampling takes a share of the CPU
                // the recovering server would have had.
                sink.event(&Event::Crash { label: &format!("{label}, sampled"), round: 1, rounds: 1 });
                let (crash, profile) = one_crash(o, &mut sb, r.rows, redo, target, flushed, true)?;
                match profile {
                    Ok(p) => r.profiles.push(profile::reduce(&[p], redo, target, crash.seconds_to_answer)),
                    Err(e) => r.notes.push(format!("{label}: stacks not sampled: {e}")),
                }
            }
            sink.event(&Event::Point { report: r });
        }
    }
    sb.stop().map_err(|e| ExperimentError::Server(format!("stopping the sandbox: {e}")))
}

/// One crash: load to the target (and flush, for a flushed point), kill,
/// time the start.
fn one_crash(
    o: &RecoveryOptions,
    sb: &mut Sandbox,
    rows: u64,
    redo_log: u64,
    target: u64,
    flushed: bool,
    sample: bool,
) -> Result<(Crash, std::result::Result<pileup_engine::Profile, String>)> {
    let spec = sb.conn_spec();
    let mut c = spec.connect().map_err(|e| ExperimentError::Server(pileup_conn::error_text(&e)))?;
    // Every crash starts from nothing unwritten: its dirty pages and redo
    // are its own load's (not the fill's, nor the last recovery's).
    load::flush_all(&mut c, Duration::from_secs(120))?;
    // The writers dirty the target's pages (its rows, from the first);
    // killed under load, they go on until the redo since the checkpoint is
    // the share of the log asked for; flushed first, until the pages.
    let hot = (target * load::ROWS_PER_PAGE).min(rows).max(1) as u32;
    let writers = load::Writers::start(&spec, o.clients, hot)?;
    let redo = if flushed { 0 } else { redo_log * u64::from(o.redo_fill_pct) / 100 };
    let goal = load::Goal { dirty_pages: target, checkpoint_age: redo };
    let filled = load::until(&mut c, &writers, goal, o.fill_within, &|| o.stopped());
    let filled = match filled {
        Ok(f) => f,
        Err(e) => {
            writers.stop();
            return Err(e);
        }
    };
    if o.stopped() {
        writers.stop();
        return Err(ExperimentError::Stopped { why: "stopped by a signal".into() });
    }
    let (at, running) = if flushed {
        writers.stop();
        (load::flush_all(&mut c, Duration::from_secs(120))?, None)
    } else {
        (filled.at, Some(writers))
    };
    drop(c);
    // Under load, the writers are running at the kill; they end with it.
    let rec = crash::crash_and_time(sb, o.recover_within, sample);
    if let Some(w) = running {
        w.stop();
    }
    let rec = rec?;
    let crash = Crash {
        dirty_at_kill: at.dirty_pages,
        checkpoint_age: at.checkpoint_age,
        fill_seconds: filled.seconds,
        reached: filled.reached,
        seconds_to_die: rec.seconds_to_die,
        seconds_to_answer: rec.seconds_to_answer,
        redo_to_apply: rec.redo_to_apply,
        pages_to_recover: rec.pages_to_recover,
        phases: rec.phases,
    };
    Ok((crash, rec.profile))
}

/// What the points say, in sentences: for each redo-log size and target,
/// killed under load against flushed first, said only where their
/// min–max ranges do not overlap.
fn findings(r: &RecoveryReport) -> Vec<String> {
    let mut out = vec![];
    for p in r.points.iter().filter(|p| !p.flushed) {
        let Some(f) = r
            .points
            .iter()
            .find(|q| q.flushed && q.redo_log_bytes == p.redo_log_bytes && q.dirty_target == p.dirty_target)
        else {
            continue;
        };
        let head = format!(
            "redo {}, {} dirty pages and {} of redo at the kill: {:.2} s to answer",
            report::mib(p.redo_log_bytes),
            p.median_dirty_at_kill,
            report::mib(p.median_checkpoint_age),
            p.median_seconds
        );
        if p.min_seconds > f.max_seconds {
            out.push(format!(
                "{head}, {:.1}× the {:.2} s with the pages flushed first (no overlap of {} crashes each)",
                p.median_seconds / f.median_seconds.max(1e-9),
                f.median_seconds,
                p.crashes.len()
            ));
        } else {
            out.push(format!(
                "{head}; {:.2} s with the pages flushed first: within noise (the ranges {:.2}–{:.2} and {:.2}–{:.2} s overlap)",
                f.median_seconds, p.min_seconds, p.max_seconds, f.min_seconds, f.max_seconds
            ));
        }
        let short = p.crashes.iter().filter(|c| !c.reached).count();
        if short > 0 {
            let most = p.crashes.iter().map(|c| c.dirty_at_kill).max().unwrap_or(0);
            let redo = p.crashes.iter().map(|c| c.checkpoint_age).max().unwrap_or(0);
            let secs = p.crashes.iter().map(|c| c.fill_seconds).fold(0.0, f64::max);
            out.push(format!(
                "  the load did not reach {} dirty pages and {}% of the {} redo log in {short} of {} crashes: at most {most} pages and {} after {secs:.0} s",
                p.dirty_target,
                r.redo_fill_pct,
                report::mib(p.redo_log_bytes),
                p.crashes.len(),
                report::mib(redo)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::report::tests::{crash, report};

    #[test]
    fn flushed_first_is_said_faster_only_when_the_ranges_part() {
        let killed = RecoveryPoint::of(64 << 20, 1000, false, vec![crash(0.5, 1000, true), crash(0.6, 1000, true)]);
        let flushed = RecoveryPoint::of(64 << 20, 1000, true, vec![crash(0.1, 0, true), crash(0.2, 0, true)]);
        let f = findings(&report(vec![killed.clone(), flushed]));
        assert_eq!(f.len(), 1);
        assert!(f[0].contains("0.55 s to answer, 3.7× the 0.15 s with the pages flushed first"), "{}", f[0]);
        let close = RecoveryPoint::of(64 << 20, 1000, true, vec![crash(0.45, 0, true), crash(0.52, 0, true)]);
        let f = findings(&report(vec![killed, close]));
        assert!(f[0].contains("within noise"), "{}", f[0]);
    }

    #[test]
    fn a_target_not_reached_is_said_with_what_was() {
        let killed = RecoveryPoint::of(16 << 20, 9000, false, vec![crash(0.5, 4000, false), crash(0.6, 4200, false)]);
        let flushed = RecoveryPoint::of(16 << 20, 9000, true, vec![crash(0.1, 0, false), crash(0.2, 0, false)]);
        let f = findings(&report(vec![killed, flushed]));
        assert!(
            f[1].contains(
                "did not reach 9000 dirty pages and 50% of the 16 MiB redo log in 2 of 2 crashes: at most 4200 pages"
            ),
            "{}",
            f[1]
        );
    }

    #[test]
    fn options_are_checked_and_sized() {
        let o = RecoveryOptions::default();
        assert!(o.check().is_ok());
        assert_eq!(o.rows(), 8000 * load::ROWS_PER_PAGE * 6 / 5);
        assert!(o.pool_bytes() >= 2 * o.rows() / load::ROWS_PER_PAGE * 16384);
        assert_eq!(o.pool_bytes() % (128 << 20), 0);
        let small = RecoveryOptions { redo_sizes: vec![1 << 20], ..Default::default() };
        assert!(small.check().unwrap_err().contains("4M or more"));
        let none = RecoveryOptions { dirty: vec![], ..Default::default() };
        assert!(none.check().is_err());
        let few = RecoveryOptions { dirty: vec![10], rows: None, ..Default::default() };
        assert_eq!(few.rows(), 100_000);
    }
}
