//! The profile at a curve's knee: while the load runs at that many
//! threads, the server's threads are sampled without being stopped (the
//! engine's passive mode) and its lock waits are traced by the caller's
//! [`LockProfiler`]. Both are reduced to shares a report can state: where
//! the connection threads were (innermost frame, innermost server
//! function), which locks they waited on, and where the accept thread's
//! time went.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use crate::syscalls::SyscallTally;
use pileup_annotate::SqlSource;
use pileup_engine::{Counted, Profile, Role, Sampler, SamplerOptions};
use serde::{Deserialize, Serialize};

/// Traces the server's lock waits for a while (pileup's `locks` tool,
/// wired by the caller: tools do not depend on each other).
pub trait LockProfiler: Send {
    fn profile(&mut self, pid: i32, duration: Duration) -> Result<LockSummary, String>;
}

/// A lock profile reduced for the report.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LockSummary {
    /// Contended waits counted, all locks.
    pub waits: u64,
    /// The locks most waited on, most time first.
    pub locks: Vec<LockShare>,
    pub notes: Vec<String>,
}

/// One lock's waits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LockShare {
    pub name: String,
    /// `pthread mutex`, `InnoDB latch`, `condition`, …
    pub kind: String,
    pub waits: u64,
    pub wait_ms: f64,
    /// Share of the traced threads' time spent waiting on it (0–1).
    pub share: f64,
    /// Where it was waited on: the innermost named frames of its most
    /// frequent stack.
    pub waited_in: Vec<String>,
    /// The statements its waiters were running (fingerprints, most waits
    /// first): none for threads that waited idle (a pool's workers, a
    /// cached thread waiting for a connection).
    #[serde(default)]
    pub statements: Vec<String>,
}

impl LockShare {
    /// A lock waited on by threads at work: a mutex, rwlock or latch, or a
    /// condition its waiters were running a statement on (a row lock).
    pub fn busy(&self) -> bool {
        !self.kind.contains("condition") || !self.statements.is_empty()
    }
}

/// A share of samples.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Share {
    pub name: String,
    pub share: f64,
}

/// What the profile at one point found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KneeProfile {
    /// The curve and the point profiled.
    pub series: String,
    pub threads: u32,
    /// Why this point: `knee` or `most threads`.
    pub at: String,
    pub seconds: f64,
    /// Connection-thread samples, and the share of them running on a CPU.
    pub connection_samples: usize,
    pub running_share: f64,
    /// Connection threads by innermost frame (a system call's wrapper, a
    /// futex wait, a server function).
    pub innermost: Vec<Share>,
    /// Connection threads by innermost frame of the server's own binary.
    pub server_function: Vec<Share>,
    /// Share of connection samples whose innermost server frame has no
    /// name (a stripped binary's static functions: module+offset).
    pub unnamed_share: f64,
    /// The accept thread's samples by innermost frame (its system calls).
    pub accept: Vec<Share>,
    pub accept_samples: usize,
    /// The accept thread's system calls, counted and timed exactly (the
    /// `accept` experiment on MariaDB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_syscalls: Option<AcceptSyscalls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_syscalls_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<LockSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks_error: Option<String>,
    pub notes: Vec<String>,
}

/// The accept thread's system calls over the profile's window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AcceptSyscalls {
    pub tally: SyscallTally,
    /// Connections made in the window (the load's rate times its length).
    pub connections: f64,
}

impl AcceptSyscalls {
    /// `calls` per connection accepted.
    pub fn per_connection(&self, calls: u64) -> f64 {
        calls as f64 / self.connections.max(1.0)
    }

    /// The system calls, most time first: `name share (calls per
    /// connection)`, at most `n`.
    pub fn list(&self, n: usize) -> String {
        // Calls under half a percent of the time and a twentieth of a call
        // per connection say nothing here (a thread started, a mapping).
        self.tally
            .calls
            .iter()
            .map(|c| (c, self.tally.share(c.seconds), self.per_connection(c.calls)))
            .filter(|&(_, share, per)| share >= 0.005 || per >= 0.05)
            .take(n)
            .map(|(c, share, per)| format!("{} {} ({per:.1}/connection)", c.name, pct(share)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Samples a second while profiling.
const INTERVAL: Duration = Duration::from_millis(50);
/// Shares listed.
const TOP: usize = 8;

/// Sample `pid` for `duration` without stopping it.
pub fn sample(pid: i32, duration: Duration, sql: Option<SqlSource>) -> Result<Profile, String> {
    let opts = SamplerOptions::passive_profile(false, Duration::from_secs(1));
    let n = (duration.as_millis() / INTERVAL.as_millis()).max(1) as usize;
    let mut s =
        Sampler::new(pid, opts, sql.map(pileup_annotate::SqlSource::boxed)).map_err(|e| pileup_conn::error_text(&e))?;
    s.run_until(n, INTERVAL, Some(duration), None, |_| {}).map_err(|e| pileup_conn::error_text(&e))?;
    Ok(s.finish())
}

/// Whether a frame label is the server binary's unnamed code.
pub(crate) fn unnamed(label: &str) -> bool {
    label == "??" || label.contains("+0x")
}

/// Counts as shares of `total`, the largest first, at most [`TOP`].
pub(crate) fn shares(counts: BTreeMap<String, usize>, total: usize) -> Vec<Share> {
    let mut v: Vec<Share> =
        counts.into_iter().map(|(name, n)| Share { name, share: n as f64 / total.max(1) as f64 }).collect();
    v.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.name.cmp(&b.name)));
    v.truncate(TOP);
    v
}

/// The file name of the profiled process's executable.
pub(crate) fn exe_name(p: &Profile) -> String {
    std::path::Path::new(&p.exe).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The label of a stack's innermost frame in the server's binary (`exe`,
/// from [`exe_name`]), if it has one.
pub(crate) fn server_frame<'a>(c: &'a Counted, exe: &str) -> Option<&'a str> {
    c.frames.iter().find(|f| f.module.as_deref().is_some_and(|m| m.ends_with(exe))).map(|f| f.label.as_str())
}

/// Reduce a sampled profile.
pub fn reduce(p: &Profile, series: &str, threads: u32, at: &str, seconds: f64) -> KneeProfile {
    let exe = exe_name(p);
    let (mut innermost, mut server_fn, mut accept) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let (mut conn, mut running, mut unnamed_n, mut accept_n) = (0, 0, 0, 0);
    for c in &p.stacks {
        let leaf = c.frames.first().map(|f| f.label.clone()).unwrap_or_else(|| "??".into());
        match c.role {
            Some(Role::Connection) => {
                conn += c.count;
                if c.state == 'R' {
                    running += c.count;
                }
                *innermost.entry(leaf).or_insert(0) += c.count;
                if let Some(label) = server_frame(c, &exe) {
                    if unnamed(label) {
                        unnamed_n += c.count;
                    }
                    *server_fn.entry(label.to_string()).or_insert(0) += c.count;
                }
            }
            Some(Role::Accept) => {
                accept_n += c.count;
                *accept.entry(leaf).or_insert(0) += c.count;
            }
            _ => {}
        }
    }
    let mut notes = vec![];
    if conn == 0 {
        notes.push("no connection thread was seen in the samples".into());
    }
    KneeProfile {
        series: series.into(),
        threads,
        at: at.into(),
        seconds,
        connection_samples: conn,
        running_share: running as f64 / conn.max(1) as f64,
        innermost: shares(innermost, conn),
        server_function: shares(server_fn, conn),
        unnamed_share: unnamed_n as f64 / conn.max(1) as f64,
        accept: shares(accept, accept_n),
        accept_samples: accept_n,
        accept_syscalls: None,
        accept_syscalls_error: None,
        locks: None,
        locks_error: None,
        notes,
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The profile as text.
pub fn text(k: &KneeProfile, w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        w,
        "Profile at {} ({}) of {}, {:.0} s: {} connection-thread samples, {} of them on a CPU",
        crate::words::threads(k.threads),
        k.at,
        k.series,
        k.seconds,
        k.connection_samples,
        pct(k.running_share)
    )?;
    let list = |v: &[Share]| v.iter().map(|s| format!("{} {}", s.name, pct(s.share))).collect::<Vec<_>>().join(", ");
    if !k.innermost.is_empty() {
        writeln!(w, "  innermost frame: {}", list(&k.innermost))?;
    }
    if !k.server_function.is_empty() {
        writeln!(w, "  innermost server function: {}", list(&k.server_function))?;
    }
    if k.unnamed_share > 0.0 {
        writeln!(
            w,
            "  {} of the samples stop in server code with no name (module+offset: the binary's static functions are stripped; InnoDB's are among them)",
            pct(k.unnamed_share)
        )?;
    }
    if k.accept_samples > 0 {
        writeln!(w, "  accept thread ({} samples): {}", k.accept_samples, list(&k.accept))?;
    }
    if let Some(a) = &k.accept_syscalls {
        writeln!(
            w,
            "  accept thread's system calls (counted, {:.0} s, {:.0} connections): {} of its time in them; {}; on a CPU {}, waiting for one {}",
            a.tally.seconds,
            a.connections,
            pct(a.tally.in_syscalls()),
            a.list(TOP),
            pct(a.tally.share(a.tally.on_cpu)),
            pct(a.tally.share(a.tally.waiting_for_cpu))
        )?;
    }
    if let Some(e) = &k.accept_syscalls_error {
        writeln!(w, "  accept thread's system calls not counted: {e}")?;
    }
    if let Some(l) = &k.locks {
        writeln!(w, "  lock waits: {}", pileup_output::plural(l.waits, "contended wait", "contended waits"))?;
        for s in &l.locks {
            let at = if s.waited_in.is_empty() { String::new() } else { format!(" in {}", s.waited_in.join(" ← ")) };
            writeln!(
                w,
                "    {} ({}): {} waits, {:.0} ms, {} of the threads' time{at}",
                s.name,
                s.kind,
                s.waits,
                s.wait_ms,
                pct(s.share)
            )?;
        }
    }
    if let Some(e) = &k.locks_error {
        writeln!(w, "  lock waits not traced: {e}")?;
    }
    for n in &k.notes {
        writeln!(w, "  note: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_sorted_and_capped() {
        let m: BTreeMap<String, usize> = (0..12).map(|i| (format!("f{i}"), i)).collect();
        let s = shares(m, 66);
        assert_eq!(s.len(), TOP);
        assert_eq!(s[0].name, "f11");
        assert!((s[0].share - 11.0 / 66.0).abs() < 1e-9);
    }

    #[test]
    fn unnamed_frames_are_told_apart() {
        assert!(unnamed("mariadbd+0x8c5e10"));
        assert!(unnamed("??"));
        assert!(!unnamed("open_table"));
        assert!(!unnamed("handler::ha_write_row"));
    }
}
