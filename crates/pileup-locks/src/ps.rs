//! performance_schema: the source when eBPF cannot be used (a kernel
//! without BTF, a server on another host). With the `wait/synch/%`
//! instruments enabled and timed at server start, MariaDB times every
//! acquisition of its mutexes, rwlocks and InnoDB's instrumented latches;
//! the summary by event name, read at the start and end of the window and
//! subtracted, gives per instrument how many acquisitions and how long
//! they took. The summary by thread, subtracted alike, says which client
//! connections waited on each, and the statements they were running. No
//! stacks and no holders: performance_schema keeps neither.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use crate::aggregate::{LockEntry, StatementEntry};

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

/// One client connection's thread's waits on one instrument: (count, total
/// picoseconds), and the statement the connection was running when read.
#[derive(Debug, Clone, Default, PartialEq)]
struct ThreadWaits {
    count: u64,
    ps: u64,
    info: Option<String>,
}

/// Per (performance_schema thread id, instrument), client connections only.
type ByThread = HashMap<(u64, String), ThreadWaits>;

fn by_thread(c: &mut mysql::Conn) -> Result<ByThread, String> {
    let rows: Vec<(u64, String, u64, u64, Option<String>)> = c
        .query(
            "SELECT w.THREAD_ID, w.EVENT_NAME, w.COUNT_STAR, w.SUM_TIMER_WAIT, t.PROCESSLIST_INFO \
             FROM performance_schema.events_waits_summary_by_thread_by_event_name w \
             JOIN performance_schema.threads t ON t.THREAD_ID = w.THREAD_ID \
             WHERE w.EVENT_NAME LIKE 'wait/synch/%' AND w.COUNT_STAR > 0 AND t.PROCESSLIST_ID IS NOT NULL",
        )
        .map_err(|e| e.to_string())?;
    Ok(rows.into_iter().map(|(t, n, count, ps, info)| ((t, n), ThreadWaits { count, ps, info })).collect())
}

/// The statements each connection was seen running during the window
/// (performance_schema thread id → fingerprint → times seen).
type Seen = HashMap<u64, HashMap<String, u32>>;

/// Add what the connections are running now to `seen`.
fn look(c: &mut mysql::Conn, fingerprint: &impl Fn(&str) -> String, seen: &mut Seen) {
    let rows: Vec<(u64, String)> = c
        .query(
            "SELECT THREAD_ID, PROCESSLIST_INFO FROM performance_schema.threads \
             WHERE PROCESSLIST_ID IS NOT NULL AND PROCESSLIST_INFO IS NOT NULL AND PROCESSLIST_ID <> CONNECTION_ID()",
        )
        .unwrap_or_default();
    for (t, info) in rows {
        *seen.entry(t).or_default().entry(fingerprint(&info)).or_default() += 1;
    }
}

/// Per instrument, the statements (by fingerprint) of the connections that
/// waited on it in the window, by time waited, and how many connections:
/// a connection's waits go to the statement it was seen running most
/// often during the window (looked at every 100 ms), or else the one it
/// ran when the window ended (or began); `(idle)` if it was never seen
/// running one. A connection that runs short statements back to back is
/// between two of them at many instants.
fn statements_by_event(
    before: &ByThread,
    after: &ByThread,
    seen: &Seen,
    fingerprint: impl Fn(&str) -> String,
) -> HashMap<String, (Vec<StatementEntry>, usize)> {
    let mut per: HashMap<String, HashMap<String, (u64, u64)>> = HashMap::new();
    let mut conns: HashMap<String, usize> = HashMap::new();
    for (key, a) in after {
        let b = before.get(key).cloned().unwrap_or_default();
        let (Some(n), Some(ps)) = (a.count.checked_sub(b.count), a.ps.checked_sub(b.ps)) else { continue };
        if n == 0 {
            continue;
        }
        *conns.entry(key.1.clone()).or_default() += 1;
        let most_seen = seen
            .get(&key.0)
            .and_then(|m| m.iter().max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(x.0))))
            .map(|(f, _)| f.clone());
        let stmt = most_seen
            .or_else(|| a.info.as_deref().or(b.info.as_deref()).map(&fingerprint))
            .unwrap_or_else(|| "(idle)".into());
        let e = per.entry(key.1.clone()).or_default().entry(stmt).or_default();
        e.0 += n;
        e.1 += ps;
    }
    per.into_iter()
        .map(|(event, stmts)| {
            let mut v: Vec<StatementEntry> = stmts
                .into_iter()
                .map(|(fingerprint, (events, ps))| StatementEntry { fingerprint, events, wait_ms: ps as f64 / 1e9 })
                .collect();
            v.sort_by(|a, b| b.wait_ms.total_cmp(&a.wait_ms).then(a.fingerprint.cmp(&b.fingerprint)));
            v.truncate(10);
            let n = conns.get(&event).copied().unwrap_or(0);
            (event, (v, n))
        })
        .collect()
}

/// Read the summary, wait `duration` (or until `stop`), read it again.
/// Returns one entry per instrument that was acquired meanwhile, by total
/// time, and the window's length.
pub fn trace(
    c: &mut mysql::Conn,
    duration: Duration,
    threads: usize,
    stop: &AtomicBool,
    fingerprint: impl Fn(&str) -> String,
    mut tick: impl FnMut(Duration),
) -> Result<(Vec<LockEntry>, Duration), String> {
    // The per-thread summary only adds who waited: a server that refuses
    // it (a privilege on that table alone) still gets the totals.
    let threads_before = by_thread(c).unwrap_or_default();
    let before = summary(c)?;
    let t = Instant::now();
    let mut seen = Seen::new();
    while t.elapsed() < duration && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(duration.saturating_sub(t.elapsed()).min(Duration::from_millis(100)));
        look(c, &fingerprint, &mut seen);
        tick(t.elapsed());
    }
    let after = summary(c)?;
    let elapsed = t.elapsed();
    let threads_after = by_thread(c).unwrap_or_default();
    let mut out = entries(&before, &after, elapsed, threads);
    let mut who = statements_by_event(&threads_before, &threads_after, &seen, fingerprint);
    for e in &mut out {
        if let Some((statements, conns)) = who.remove(&format!("wait/synch/{}", e.name)) {
            e.statements = statements;
            e.waiters = conns;
        }
    }
    Ok((out, elapsed))
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

    #[test]
    fn connections_waits_go_to_the_statements_they_ran() {
        let ev = "wait/synch/mutex/sql/LOCK_open".to_string();
        let tw = |count, ps, info: Option<&str>| ThreadWaits { count, ps, info: info.map(String::from) };
        let before: ByThread = [
            ((1, ev.clone()), tw(10, 1_000_000_000, Some("SELECT 1"))),
            ((2, ev.clone()), tw(5, 0, None)),
            ((3, ev.clone()), tw(7, 7, Some("SELECT 3"))),
        ]
        .into();
        let after: ByThread = [
            // Ran SELECT 1 throughout: 3 ms more.
            ((1, ev.clone()), tw(20, 4_000_000_000, Some("SELECT 2"))),
            // Idle at the end: its waits go to what it ran at the start.
            ((2, ev.clone()), tw(6, 1_000_000_000, None)),
            // No wait in the window.
            ((3, ev.clone()), tw(7, 7, Some("SELECT 3"))),
            // A connection that came during the window.
            ((4, ev.clone()), tw(1, 2_000_000_000, Some("SELECT 4"))),
        ]
        .into();
        let fp = |q: &str| q.replace(|c: char| c.is_ascii_digit(), "?");
        let who = statements_by_event(&before, &after, &Seen::new(), fp);
        let (stmts, conns) = &who[&ev];
        assert_eq!(*conns, 3);
        assert_eq!(stmts.len(), 2, "{stmts:?}");
        assert_eq!((stmts[0].fingerprint.as_str(), stmts[0].events, stmts[0].wait_ms), ("SELECT ?", 11, 5.0));
        assert_eq!((stmts[1].fingerprint.as_str(), stmts[1].events, stmts[1].wait_ms), ("(idle)", 1, 1.0));
        // Seen running SHOW GLOBAL VARIABLES during the window, between
        // two statements at both ends: its waits go there.
        let seen: Seen = [(2, [("SHOW GLOBAL VARIABLES".to_string(), 3), ("SELECT ?".to_string(), 1)].into())].into();
        let who = statements_by_event(&before, &after, &seen, fp);
        let (stmts, _) = &who[&ev];
        assert!(stmts.iter().any(|s| (s.fingerprint.as_str(), s.events) == ("SHOW GLOBAL VARIABLES", 1)), "{stmts:?}");
        assert!(!stmts.iter().any(|s| s.fingerprint == "(idle)"), "{stmts:?}");
    }
}
