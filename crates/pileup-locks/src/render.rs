//! Render: the report as lockstat-style text, JSON, folded stacks or a
//! flame graph weighted by wait time.

use pileup_output::plural;
use std::io::Write;

use pileup_output::{Stack, Stacks};

use crate::aggregate::LockEntry;
use crate::Report;

impl pileup_output::Report for Report {
    fn tool(&self) -> &'static str {
        "locks"
    }

    fn text(&self, o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        text(self, if o.plain { 0 } else { o.detail }, w)
    }

    /// One stack per recorded stack, its lock as the leaf frame, valued by
    /// the time its waits waited (µs) and their number, labelled with the
    /// lock and its kind.
    fn stacks(&self, _o: &pileup_output::Options) -> Option<Stacks> {
        let mut stacks = vec![];
        for l in &self.locks {
            for s in &l.stacks {
                let mut frames: Vec<String> = s.frames.iter().rev().cloned().collect();
                frames.push(format!("[{}: {}]", l.kind, l.name));
                stacks.push(Stack {
                    frames,
                    values: vec![(s.wait_ms * 1000.0).round() as i64, s.events as i64],
                    labels: vec![("lock".into(), l.name.clone()), ("kind".into(), l.kind.to_string())],
                    num_labels: vec![],
                });
            }
        }
        let at = self.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
        Some(Stacks {
            title: format!("pileup locks: {}{at}", self.exe),
            subtitle: format!(
                "time waited on locks over {:.1} s (recorded waits), {} in all",
                self.duration_s,
                plural(self.counters.waits, "contended wait", "contended waits")
            ),
            sample_types: vec![("wait".into(), "microseconds".into()), ("waits".into(), "count".into())],
            count_name: "µs waited".into(),
            stacks,
            start_unix_ms: self.started_unix_ms,
            duration_ms: (self.duration_s * 1e3) as u64,
            comment: format!("pileup locks {}{at}", self.exe),
        })
    }
}

const ROWS: usize = 20;

fn text(r: &Report, detail: usize, w: &mut dyn Write) -> std::io::Result<()> {
    let what = match r.source {
        "ebpf" => format!(
            "{}, {} recorded with their stack",
            plural(r.counters.waits, "contended wait", "contended waits"),
            r.counters.recorded
        ),
        _ => "instrumented acquisitions timed by performance_schema".to_string(),
    };
    writeln!(
        w,
        "pileup locks: {}{}{}, {:.1} s, {}{}: {what}",
        r.exe,
        r.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
        r.server_version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default(),
        r.duration_s,
        plural(r.threads, "thread", "threads"),
        r.thread_filter.as_deref().map(|f| format!(" (--focus {f})")).unwrap_or_default(),
    )?;
    let (conds, locks): (Vec<&LockEntry>, Vec<&LockEntry>) = r.locks.iter().partition(|l| l.condition);
    // A bare futex with no stack recorded says neither what kind of wait it
    // is nor who waited: listed after the locks that are known, not first.
    let (unknown, locks): (Vec<&LockEntry>, Vec<&LockEntry>) =
        locks.into_iter().partition(|l| l.kind == "futex" && l.recorded == 0);
    writeln!(w)?;
    if locks.is_empty() {
        writeln!(w, "No thread waited on a mutex, rwlock or InnoDB latch.")?;
    } else {
        writeln!(w, "Lock waits (mutexes, rwlocks, InnoDB latches), by total time waited:")?;
        table(&locks[..locks.len().min(ROWS)], w)?;
        if locks.len() > ROWS {
            let rest: f64 = locks[ROWS..].iter().map(|l| l.total_ms).sum();
            writeln!(w, "  … and {} more, {rest:.1} ms in all (--format json lists every one)", locks.len() - ROWS)?;
        }
    }
    if !conds.is_empty() {
        writeln!(w)?;
        writeln!(
            w,
            "Condition waits (they include idle waiting; metadata, table and row locks wait here: see the SQL lock views):"
        )?;
        table(&conds[..conds.len().min(ROWS / 2)], w)?;
        if conds.len() > ROWS / 2 {
            writeln!(w, "  … and {} more", conds.len() - ROWS / 2)?;
        }
    }
    if !unknown.is_empty() {
        writeln!(w)?;
        writeln!(w, "Futex waits whose kind is unknown (no stack was recorded for them; --format json has them):")?;
        table(&unknown[..unknown.len().min(ROWS / 4)], w)?;
        if unknown.len() > ROWS / 4 {
            writeln!(w, "  … and {} more", unknown.len() - ROWS / 4)?;
        }
    }
    for (i, l) in locks.iter().take(detail).enumerate() {
        writeln!(w)?;
        details(i + 1, l, w)?;
    }
    if !r.notes.is_empty() {
        writeln!(w)?;
        for n in &r.notes {
            writeln!(w, "note: {n}")?;
        }
    }
    writeln!(w)?;
    writeln!(w, "{}", cost_line(r))?;
    Ok(())
}

/// What the run cost: pileup's CPU and, with `--probe-cost`, the probe's
/// time in the kernel, as a share of the host's CPU over the window.
fn cost_line(r: &Report) -> String {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as f64;
    let machine_ms = r.duration_s * 1e3 * cpus;
    let share = |ms: f64| if machine_ms > 0.0 { 100.0 * ms / machine_ms } else { 0.0 };
    let own = r.cpu_us as f64 / 1e3;
    let mut line = format!(
        "cost: pileup's CPU {own:.1} ms, start-up included ({:.2}% of {cpus} CPUs over the window)",
        share(own)
    );
    match r.probe_cost {
        Some(p) => {
            let ms = p.run_ns as f64 / 1e6;
            line.push_str(&format!(
                "; the probe ran {} times on context switches, {ms:.1} ms in all ({:.0} ns each, {:.2}% of the CPUs)",
                p.runs,
                if p.runs > 0 { p.run_ns as f64 / p.runs as f64 } else { 0.0 },
                share(ms)
            ));
        }
        None if r.source == "ebpf" => line.push_str("; add --probe-cost for the probe's own time in the kernel"),
        None => {}
    }
    line
}

fn table(ls: &[&LockEntry], w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        w,
        "  {:>3} {:>9} {:>10} {:>9} {:>9} {:>6}  {:<24} lock",
        "#", "waits", "total ms", "mean ms", "max ms", "share", "kind"
    )?;
    for (i, l) in ls.iter().enumerate() {
        writeln!(
            w,
            "  {:>3} {:>9} {:>10.1} {:>9.3} {:>9.3} {:>5.1}%  {:<24} {}",
            i + 1,
            l.waits,
            l.total_ms,
            l.mean_us / 1e3,
            l.max_us / 1e3,
            l.share_pct,
            l.kind,
            l.name
        )?;
    }
    Ok(())
}

fn details(n: usize, l: &LockEntry, w: &mut dyn Write) -> std::io::Result<()> {
    if l.addr.is_empty() {
        writeln!(w, "[{n}] {} ({})", l.name, l.kind)?;
    } else {
        writeln!(w, "[{n}] {} ({} at {})", l.name, l.kind, l.addr)?;
    }
    writeln!(
        w,
        "    {}{}, {:.1} ms in all, mean {:.3} ms, max {:.3} ms, {:.2}% of the threads' time; {} recorded",
        plural(l.waits, "wait", "waits"),
        if l.in_progress > 0 {
            format!(" ({} still waiting when the window ended)", l.in_progress)
        } else {
            String::new()
        },
        l.total_ms,
        l.mean_us / 1e3,
        l.max_us / 1e3,
        l.share_pct,
        plural(l.waiters, "waiting thread", "waiting threads")
    )?;
    if let Some(t) = &l.taken_in {
        writeln!(w, "    taken in: {t}")?;
    }
    if !l.histogram.is_empty() {
        let most = l.histogram.iter().map(|b| b.waits).max().unwrap_or(1).max(1);
        writeln!(w, "    {:>21}   waits", "wait (µs)")?;
        for b in &l.histogram {
            let bar = "@".repeat(((b.waits * 30).div_ceil(most)) as usize);
            writeln!(w, "    {:>9} - {:>9} |{bar:<30}| {}", b.from_us, b.to_us, b.waits)?;
        }
    }
    match (&l.holder_note, l.holders.is_empty()) {
        (Some(why), _) => writeln!(w, "    holder: unknown: {why}")?,
        (None, true) => {
            writeln!(w, "    holder: not seen (the lock was free or its owner had exited when the waits began)")?
        }
        (None, false) => {
            writeln!(w, "    holders seen when waits began:")?;
            for h in &l.holders {
                writeln!(w, "      {}: {}", plural(h.events, "wait", "waits"), h.who)?;
            }
        }
    }
    if !l.statements.is_empty() {
        writeln!(w, "    statements of the waiting threads:")?;
        for s in &l.statements {
            writeln!(
                w,
                "      {:.1} ms, {}: {}",
                s.wait_ms,
                plural(s.events, "wait", "waits"),
                pileup_engine::one_line(&s.fingerprint, 160)
            )?;
        }
    }
    if !l.stacks.is_empty() {
        writeln!(w, "    waiting stacks (top {} of {}):", l.stacks.len(), l.distinct_stacks)?;
        for s in &l.stacks {
            let frames: Vec<&str> = s.frames.iter().map(String::as_str).take(16).collect();
            writeln!(
                w,
                "      {:.1} ms, {}: {}{}",
                s.wait_ms,
                plural(s.events, "wait", "waits"),
                frames.join(" < "),
                if s.truncated || s.frames.len() > 16 { " < …" } else { "" }
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_locks_lead_and_a_bare_futex_comes_after_them() {
        let lock = |name: &str, kind: &'static str, total_ms: f64, recorded: u64| LockEntry {
            name: name.into(),
            kind,
            total_ms,
            waits: 4,
            recorded,
            ..Default::default()
        };
        let r = Report {
            source: "ebpf",
            exe: "mariadbd".into(),
            locks: vec![lock("heap 0x7f00", "futex", 900.0, 0), lock("LOCK_open", "pthread mutex", 12.0, 4)],
            ..Default::default()
        };
        let mut out = Vec::new();
        text(&r, 0, &mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        let (known, bare) = (t.find("LOCK_open").unwrap(), t.find("heap 0x7f00").unwrap());
        assert!(known < bare, "{t}");
        assert!(t.contains("Futex waits whose kind is unknown"), "{t}");
        assert!(t.contains("mean ms") && !t.contains("µs"), "one unit in the tables: {t}");
    }
}
