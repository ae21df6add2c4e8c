//! pt-pmp compatible text, then annotations as `#` comment lines
//! (`grep -v '^#'` leaves exactly what pt-pmp would print).

use pileup_output::plural;
use std::io::Write;

use pileup_engine::analysis::group;
use pileup_engine::Profile;
use pileup_output::Options;

pub fn pmp(p: &Profile, o: &Options, w: &mut dyn Write) -> std::io::Result<()> {
    let groups = group(p);
    for g in &groups {
        writeln!(w, "{:>7} {}", g.count, g.frames.join(","))?;
    }
    if o.plain {
        return Ok(());
    }
    writeln!(w)?;
    for line in annotations(p, &groups) {
        writeln!(w, "# {line}")?;
    }
    Ok(())
}

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

/// The human part: who the process is, what the capture cost, how complete
/// the symbols are, lock owners, and the SQL behind the biggest groups.
pub(crate) fn annotations(p: &Profile, groups: &[pileup_engine::analysis::StackGroup]) -> Vec<String> {
    let mut out = vec![];
    out.push(format!(
        "pileup stacks: pid {} {}{}, {}, {}, {} mode",
        p.pid,
        p.exe,
        p.server_version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default(),
        plural(p.stops.samples, "sample", "samples"),
        plural(p.thread_stacks, "thread stack", "thread stacks"),
        p.mode.name()
    ));
    if p.stops.samples > 0 {
        let st = &p.stops;
        let spread = if st.samples > 1 {
            format!(" (median {}, 99th percentile {})", ms(st.median_window_us), ms(st.p99_window_us))
        } else {
            String::new()
        };
        out.push(format!(
            "stopped: window {} (worst sample){spread}, longest single thread {} (held {} once stopped); capture {}, unwind {}, symbolize {}",
            ms(st.worst_window_us),
            ms(st.longest_thread_us),
            ms(st.longest_held_us),
            ms(p.timing.capture_us),
            ms(p.timing.unwind_us),
            ms(p.timing.symbolize_us)
        ));
    }
    let mut cost = format!("cost: pileup's CPU {}", ms(p.timing.cpu_us));
    if let Some(s) = p.timing.server_sql_cpu_us {
        cost.push_str(&format!(", the server's CPU for pileup's SQL {}", ms(s)));
    }
    if p.stops.sampled_by_thread_event > 0 {
        cost.push_str(&format!(
            "; {} sampled by perf events attached to them (CPU events and the eBPF iterator could not be had): while one is open, and for about a second after, the kernel runs its perf hooks on every context switch of the machine{}",
            plural(p.stops.sampled_by_thread_event, "runnable thread", "runnable threads"),
            p.timing.machine_context_switches_per_s.map_or(String::new(), |n| format!(" ({n} a second over this run)"))
        ));
    }
    out.push(cost);
    let mut sym = format!("symbols: {:.0}% of distinct frames named", p.named_pct);
    for m in p.modules.iter().take(4) {
        sym.push_str(&format!("; {}: {} ({}/{} named)", m.name, m.symbols, m.named, m.frames));
    }
    out.push(sym);
    if p.modules.iter().any(|m| m.symbols.starts_with("stripped") && m.frames > 0 && m.named < m.frames) {
        out.push(
            "symbols: unnamed frames show as module+0xFUNCSTART; install the server's debug symbols (Debian: the -dbgsym package) or name a debuginfod server (DEBUGINFOD_URLS or --debuginfod URL) for full names and inlined frames"
                .into(),
        );
    }
    if p.locks.len() > 20 {
        out.push(format!(
            "locks: the 20 most waited-on of {} lock groups follow; --format json has them all",
            p.locks.len()
        ));
    }
    for l in p.locks.iter().take(20) {
        out.extend(lock_lines(p, l));
    }
    for (i, g) in groups.iter().enumerate().take(20) {
        out.push(group_line(i, g));
    }
    let missed: usize = p.stops.missed.values().sum();
    if missed > 0 {
        let r: Vec<String> = p.stops.missed.iter().map(|(k, v)| format!("{v} {k}")).collect();
        out.push(format!("missed: {}: {}", plural(missed, "thread", "threads"), r.join("; ")));
    }
    let truncated = p.partial_stacks();
    if truncated > 0 {
        out.push(format!(
            "partial: {} ended early (unwind error); see --format json for details",
            plural(truncated, "stack", "stacks")
        ));
    }
    for n in &p.notes {
        out.push(format!("note: {n}"));
    }
    out
}

/// A lock group's lines: who waits on which lock, its holder and stack,
/// the waiters and where they wait.
fn lock_lines(p: &Profile, l: &pileup_engine::LockGroup) -> Vec<String> {
    let mut out = vec![];
    let mut s = if l.most_at_once == l.waiters.len() {
        let waits = if l.waiters.len() == 1 { "waits" } else { "wait" };
        format!(
            "lock: {} {waits} on {} 0x{:x}",
            plural(l.waiters.len(), "thread", "threads"),
            l.kind.describe(),
            l.addr
        )
    } else {
        format!(
            "lock: up to {} threads at once ({} in all) wait on {} 0x{:x}",
            l.most_at_once,
            l.waiters.len(),
            l.kind.describe(),
            l.addr
        )
    };
    if p.stops.samples > 1 {
        s.push_str(&format!(" (in {} of {} samples)", l.samples, p.stops.samples));
    }
    match l.owner_tid {
        Some(o) => {
            s.push_str(&format!(" held by tid {o}"));
            // The holder as it was when read, not in another sample.
            if let Some(h) = &l.holder {
                s.push_str(&format!(" ({h})"));
            }
            out.push(s);
            if let Some(stack) = &l.holder_stack {
                out.push(format!(
                    "  holder stack: {}",
                    if stack.is_empty() { "<no stack>".into() } else { stack.join(",") }
                ));
            }
        }
        None => {
            s.push_str(&format!(": owner unknown ({})", l.unresolved_reason.as_deref().unwrap_or("not recorded")));
            out.push(s);
        }
    }
    let w: Vec<String> = l.waiters.iter().take(12).map(|t| t.to_string()).collect();
    out.push(format!("  waiter tids: {}{}", w.join(" "), if l.waiters.len() > 12 { " …" } else { "" }));
    // A waiter's stack at its wait (in the sample it was seen waiting).
    if !l.waiting_in.is_empty() {
        let frames: Vec<&str> = l.waiting_in.iter().take(6).map(String::as_str).collect();
        out.push(format!("  waiting in: {}", frames.join(",")));
    }
    out
}

/// A stack group's line: how many threads, their states and what they run.
fn group_line(i: usize, g: &pileup_engine::analysis::StackGroup) -> String {
    let states: Vec<String> = g.states.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut s = format!(
        "stack {}: {} ({}{} {}: {})",
        i + 1,
        g.count,
        g.tids.len(),
        if g.tids_capped { "+" } else { "" },
        if g.tids.len() == 1 && !g.tids_capped { "thread" } else { "threads" },
        states.join(", ")
    );
    if !g.statements.is_empty() {
        let st: Vec<String> =
            g.statements.iter().take(3).map(|(q, n)| format!("{n}× `{}`", pileup_engine::one_line(q, 100))).collect();
        s.push_str(&format!(" running {}", st.join(", ")));
    } else if g.sql.len() == 1 {
        s.push_str(&format!(" {}", g.sql[0]));
    } else if !g.sql.is_empty() {
        s.push_str(&format!(" {} SQL connections", g.sql.len()));
    }
    if g.tids.len() <= 3 {
        s.push_str(&format!(" tids {}", g.tids.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(on_cpu: usize, by_thread: usize) -> Profile {
        Profile {
            pid: 1,
            exe: "mariadbd".into(),
            server_version: None,
            mode: pileup_engine::Mode::Passive,
            stacks: vec![],
            thread_stacks: 0,
            stops: pileup_engine::StopSummary {
                samples: 10,
                sampled_on_cpu: on_cpu + by_thread,
                sampled_by_thread_event: by_thread,
                ..Default::default()
            },
            samples: vec![],
            modules: vec![],
            named_pct: 100.0,
            locks: vec![],
            timing: pileup_engine::Timing {
                cpu_us: 1500,
                machine_context_switches_per_s: Some(215000),
                ..Default::default()
            },
            notes: vec![],
        }
    }

    fn cost_line(p: &Profile) -> String {
        annotations(p, &[]).into_iter().find(|l| l.starts_with("cost:")).expect("a cost line")
    }

    #[test]
    fn the_cost_line_names_the_kernels_perf_hooks_only_when_threads_own_events_sampled() {
        let with = cost_line(&profile(3, 7));
        assert!(
            with.starts_with("cost: pileup's CPU 1.5 ms; 7 runnable threads sampled by perf events attached to them"),
            "{with}"
        );
        assert!(with.ends_with("every context switch of the machine (215000 a second over this run)"), "{with}");
        assert_eq!(cost_line(&profile(7, 0)), "cost: pileup's CPU 1.5 ms");
        assert_eq!(cost_line(&profile(0, 0)), "cost: pileup's CPU 1.5 ms");
    }
}
