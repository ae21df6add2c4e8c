//! Render: the report as lockstat-style text, JSON, folded stacks or a
//! flame graph weighted by wait time.

use std::io::Write;

use anyhow::Result;

use crate::aggregate::LockEntry;
use crate::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Folded,
    Svg,
    Pprof,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "text" => Format::Text,
            "json" => Format::Json,
            "folded" | "collapsed" => Format::Folded,
            "svg" | "flamegraph" => Format::Svg,
            "pprof" => Format::Pprof,
            _ => return None,
        })
    }

    /// From an output file's extension.
    pub fn from_path(p: &std::path::Path) -> Option<Format> {
        match p.extension()?.to_str()? {
            "txt" => Some(Format::Text),
            "json" => Some(Format::Json),
            "folded" => Some(Format::Folded),
            "svg" => Some(Format::Svg),
            "gz" | "pb" => Some(Format::Pprof),
            _ => None,
        }
    }
}

pub fn render(r: &Report, f: Format, detail: usize, w: &mut dyn Write) -> Result<()> {
    match f {
        Format::Text => text(r, detail, w),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, r)?;
            writeln!(w)?;
            Ok(())
        }
        Format::Folded => {
            for line in folded(r) {
                writeln!(w, "{line}")?;
            }
            Ok(())
        }
        Format::Svg => svg(r, w),
        Format::Pprof => pprof(r, w),
    }
}

/// pprof (gzipped profile.proto, as `go tool pprof` reads it): one sample
/// per recorded stack, its lock as the leaf frame, valued by the time its
/// waits waited (µs) and their number, labelled with the lock and its kind.
fn pprof(r: &Report, w: &mut dyn Write) -> Result<()> {
    use pileup_stacks::render::pprof::{
        write_gz, Function, Label, Line, Location, PProfile, PSample, Strings, ValueType,
    };
    use std::collections::HashMap;
    let mut st = Strings::new();
    let mut out = PProfile {
        sample_type: vec![
            ValueType { r#type: st.id("wait"), unit: st.id("microseconds") },
            ValueType { r#type: st.id("waits"), unit: st.id("count") },
        ],
        period_type: Some(ValueType { r#type: st.id("wait"), unit: st.id("microseconds") }),
        period: 1,
        time_nanos: r.started_unix_ms as i64 * 1_000_000,
        duration_nanos: (r.duration_s * 1e9) as i64,
        ..Default::default()
    };
    // Stacks carry labels, not addresses: one function and one location
    // per distinct label.
    let mut locs: HashMap<String, u64> = HashMap::new();
    let mut loc = |label: &str, out: &mut PProfile, st: &mut Strings| -> u64 {
        if let Some(&id) = locs.get(label) {
            return id;
        }
        let id = out.location.len() as u64 + 1;
        let name = st.id(label);
        out.function.push(Function { id, name, system_name: name, filename: 0 });
        out.location.push(Location { id, mapping_id: 0, address: 0, line: vec![Line { function_id: id, line: 0 }] });
        locs.insert(label.to_string(), id);
        id
    };
    for l in &r.locks {
        for s in &l.stacks {
            let mut ids = vec![loc(&format!("[{}: {}]", l.kind, l.name), &mut out, &mut st)];
            for f in &s.frames {
                ids.push(loc(f, &mut out, &mut st));
            }
            let label = vec![
                Label { key: st.id("lock"), str: st.id(&l.name), num: 0 },
                Label { key: st.id("kind"), str: st.id(l.kind), num: 0 },
            ];
            out.sample.push(PSample {
                location_id: ids,
                value: vec![(s.wait_ms * 1000.0).round() as i64, s.events as i64],
                label,
            });
        }
    }
    out.comment.push(st.id(&format!(
        "pileup locks {}{}",
        r.exe,
        r.pid.map(|p| format!(" pid {p}")).unwrap_or_default()
    )));
    out.string_table = std::mem::take(&mut st.table);
    write_gz(&out, w)
}

/// One line per recorded stack: frames root first, the lock as the leaf,
/// and the recorded wait time in µs as the value.
pub fn folded(r: &Report) -> Vec<String> {
    let mut out = vec![];
    for l in &r.locks {
        for s in &l.stacks {
            let us = (s.wait_ms * 1000.0).round() as u64;
            if us == 0 {
                continue;
            }
            let mut frames: Vec<String> = s.frames.iter().rev().map(|f| f.replace([';', ' '], "_")).collect();
            frames.push(format!("[{}: {}]", l.kind, l.name).replace([';', ' '], "_"));
            out.push(format!("{} {us}", frames.join(";")));
        }
    }
    out
}

fn svg(r: &Report, w: &mut dyn Write) -> Result<()> {
    use inferno::flamegraph::{self, Options};
    let lines = folded(r);
    let mut opts = Options::default();
    opts.title = format!("pileup locks: {}{}", r.exe, r.pid.map(|p| format!(" pid {p}")).unwrap_or_default());
    opts.subtitle = Some(format!(
        "time waited on locks over {:.1} s (recorded waits), {} contended waits in all",
        r.duration_s, r.counters.waits
    ));
    opts.count_name = "µs waited".into();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)?;
    Ok(())
}

/// Locks listed in the text table.
const ROWS: usize = 20;

fn text(r: &Report, detail: usize, w: &mut dyn Write) -> Result<()> {
    let what = match r.source {
        "ebpf" => format!("{} contended waits, {} recorded with their stack", r.counters.waits, r.counters.recorded),
        _ => "instrumented acquisitions timed by performance_schema".to_string(),
    };
    writeln!(
        w,
        "pileup locks: {}{}{}, {:.1} s, {} threads{}: {what}",
        r.exe,
        r.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
        r.server_version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default(),
        r.duration_s,
        r.threads,
        r.thread_filter.as_deref().map(|f| format!(" (--threads {f})")).unwrap_or_default(),
    )?;
    let (conds, locks): (Vec<&LockEntry>, Vec<&LockEntry>) = r.locks.iter().partition(|l| l.condition);
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

fn table(ls: &[&LockEntry], w: &mut dyn Write) -> Result<()> {
    writeln!(
        w,
        "  {:>3} {:>9} {:>10} {:>9} {:>9} {:>6}  {:<24} lock",
        "#", "waits", "total ms", "mean µs", "max µs", "share", "kind"
    )?;
    for (i, l) in ls.iter().enumerate() {
        writeln!(
            w,
            "  {:>3} {:>9} {:>10.1} {:>9.1} {:>9.1} {:>5.1}%  {:<24} {}",
            i + 1,
            l.waits,
            l.total_ms,
            l.mean_us,
            l.max_us,
            l.share_pct,
            l.kind,
            l.name
        )?;
    }
    Ok(())
}

fn details(n: usize, l: &LockEntry, w: &mut dyn Write) -> Result<()> {
    if l.addr.is_empty() {
        writeln!(w, "[{n}] {} ({})", l.name, l.kind)?;
    } else {
        writeln!(w, "[{n}] {} ({} at {})", l.name, l.kind, l.addr)?;
    }
    writeln!(
        w,
        "    {} waits{}, {:.1} ms in all, mean {:.1} µs, max {:.1} µs, {:.2}% of the threads' time; {} waiting thread(s) recorded",
        l.waits,
        if l.in_progress > 0 { format!(" ({} still waiting when the window ended)", l.in_progress) } else { String::new() },
        l.total_ms,
        l.mean_us,
        l.max_us,
        l.share_pct,
        l.waiters
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
                writeln!(w, "      {} wait(s): {}", h.events, h.who)?;
            }
        }
    }
    if !l.statements.is_empty() {
        writeln!(w, "    statements of the waiting threads:")?;
        for s in &l.statements {
            writeln!(
                w,
                "      {:.1} ms, {} wait(s): {}",
                s.wait_ms,
                s.events,
                pileup_stacks::annotate::one_line(&s.fingerprint, 160)
            )?;
        }
    }
    if !l.stacks.is_empty() {
        writeln!(w, "    waiting stacks (top {} of {}):", l.stacks.len(), l.distinct_stacks)?;
        for s in &l.stacks {
            let frames: Vec<&str> = s.frames.iter().map(String::as_str).take(16).collect();
            writeln!(
                w,
                "      {:.1} ms, {} wait(s): {}{}",
                s.wait_ms,
                s.events,
                frames.join(" < "),
                if s.truncated || s.frames.len() > 16 { " < …" } else { "" }
            )?;
        }
    }
    Ok(())
}
