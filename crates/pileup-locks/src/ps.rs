//! performance_schema: the source when eBPF cannot be used (a kernel
//! without BTF, a server on another host). With the `wait/synch/%`
//! instruments enabled and timed at server start, MariaDB times every
//! acquisition of its mutexes, rwlocks and InnoDB's instrumented latches;
//! the summary by event name, read at the start and end of the window and
//! subtracted, gives per instrument how many acquisitions and how long
//! they took. Neither stacks nor holders: performance_schema keeps none.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use crate::aggregate::LockEntry;

/// Whether performance_schema times synchronisation waits on this server;
/// `Err` says why not, with the fix.
pub fn check(c: &mut mysql::Conn) -> Result<(), String> {
    let on: Option<i64> = c.query_first("SELECT @@performance_schema").map_err(|e| e.to_string())?;
    if on != Some(1) {
        return Err("performance_schema is off (it is turned on at server start: performance_schema=ON)".into());
    }
    let n: Option<i64> = c
        .query_first(
            "SELECT COUNT(*) FROM performance_schema.setup_instruments \
             WHERE NAME LIKE 'wait/synch/%' AND ENABLED = 'YES' AND TIMED = 'YES'",
        )
        .map_err(|e| e.to_string())?;
    if n.unwrap_or(0) == 0 {
        return Err("no wait/synch instrument is enabled and timed (start the server with performance_schema_instrument='wait/synch/%=ON')".into());
    }
    Ok(())
}

/// (count, total picoseconds, max picoseconds) per instrument.
type Summary = HashMap<String, (u64, u64, u64)>;

fn summary(c: &mut mysql::Conn) -> Result<Summary, String> {
    let rows: Vec<(String, u64, u64, u64)> = c
        .query(
            "SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT, MAX_TIMER_WAIT \
             FROM performance_schema.events_waits_summary_global_by_event_name \
             WHERE EVENT_NAME LIKE 'wait/synch/%' AND COUNT_STAR > 0",
        )
        .map_err(|e| e.to_string())?;
    Ok(rows.into_iter().map(|(n, c, s, m)| (n, (c, s, m))).collect())
}

/// Read the summary, wait `duration` (or until `stop`), read it again.
/// Returns one entry per instrument that was acquired meanwhile, by total
/// time, and the window's length.
pub fn trace(
    c: &mut mysql::Conn,
    duration: Duration,
    threads: usize,
    stop: &AtomicBool,
    mut tick: impl FnMut(Duration),
) -> Result<(Vec<LockEntry>, Duration), String> {
    let before = summary(c)?;
    let t = Instant::now();
    while t.elapsed() < duration && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(duration.saturating_sub(t.elapsed()).min(Duration::from_millis(100)));
        tick(t.elapsed());
    }
    let after = summary(c)?;
    let elapsed = t.elapsed();
    Ok((entries(&before, &after, elapsed, threads), elapsed))
}

/// The instrument class as a kind.
fn kind_of(event: &str) -> &'static str {
    match event.split('/').nth(2) {
        Some("mutex") => "mutex (instrumented)",
        Some("rwlock") | Some("prlock") => "rwlock (instrumented)",
        Some("sxlock") => "InnoDB latch (instrumented)",
        Some("cond") => "condition variable",
        _ => "synchronisation (instrumented)",
    }
}

fn entries(before: &Summary, after: &Summary, elapsed: Duration, threads: usize) -> Vec<LockEntry> {
    let thread_ps = elapsed.as_secs_f64() * 1e12 * threads.max(1) as f64;
    let mut out: Vec<LockEntry> = after
        .iter()
        .filter_map(|(name, &(c1, s1, m1))| {
            let (c0, s0, _) = before.get(name).copied().unwrap_or_default();
            let waits = c1.checked_sub(c0)?;
            let ps = s1.checked_sub(s0)?;
            (waits > 0).then(|| {
                let kind = kind_of(name);
                LockEntry {
                    addr: String::new(),
                    name: name.trim_start_matches("wait/synch/").to_string(),
                    name_source: "performance_schema".into(),
                    kind,
                    condition: kind == "condition variable",
                    waits,
                    in_progress: 0,
                    total_ms: ps as f64 / 1e9,
                    mean_us: ps as f64 / waits as f64 / 1e6,
                    // The summary's maximum is since the server started
                    // (or the table was truncated), not of the window.
                    max_us: m1 as f64 / 1e6,
                    share_pct: if thread_ps > 0.0 { 100.0 * ps as f64 / thread_ps } else { 0.0 },
                    histogram: vec![],
                    recorded: 0,
                    waiters: 0,
                    futex_words: 0,
                    taken_in: None,
                    holder_note: Some("performance_schema keeps no holders".into()),
                    holders: vec![],
                    stacks: vec![],
                    distinct_stacks: 0,
                    statements: vec![],
                }
            })
        })
        .collect();
    out.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then(a.name.cmp(&b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_difference_of_two_summaries() {
        let before: Summary = [
            ("wait/synch/mutex/sql/LOCK_open".to_string(), (100, 5_000_000, 9_000_000)),
            ("wait/synch/cond/sql/COND_thread_cache".to_string(), (7, 1, 1)),
        ]
        .into();
        let after: Summary = [
            ("wait/synch/mutex/sql/LOCK_open".to_string(), (300, 2_005_000_000, 9_000_000)),
            ("wait/synch/cond/sql/COND_thread_cache".to_string(), (7, 1, 1)),
            ("wait/synch/sxlock/innodb/index_tree_rw_lock".to_string(), (10, 1_000_000_000, 400_000_000)),
        ]
        .into();
        let e = entries(&before, &after, Duration::from_secs(1), 2);
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].name.as_str(), e[0].waits, e[0].kind), ("mutex/sql/LOCK_open", 200, "mutex (instrumented)"));
        assert_eq!(e[0].total_ms, 2.0);
        assert_eq!(e[0].mean_us, 10.0);
        assert_eq!(e[0].share_pct, 0.1);
        assert_eq!((e[1].kind, e[1].max_us), ("InnoDB latch (instrumented)", 400.0));
    }
}
