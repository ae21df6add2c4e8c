//! The verdict: the first line of a capture's report, naming the likely
//! culprit with its evidence. Pure functions of the gathered
//! [`Evidence`], tested without a server.

use crate::evidence::{pl_summary, Evidence};

pub use crate::evidence::root_blockers;

/// A pthread mutex that two or more threads wait on, with its holder.
fn mutex_holder(ev: &Evidence) -> Option<String> {
    let l = ev.profile.as_ref()?.locks.iter().find(|l| l.owner_tid.is_some() && l.most_at_once >= 2)?;
    let o = l.owner_tid?;
    let who = l.holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default();
    let waits = if l.most_at_once == 1 { "waits" } else { "wait" };
    let threads = pileup_output::plural(l.most_at_once, "thread", "threads");
    Some(format!("{threads} {waits} on {} 0x{:x} held by tid {o}{who}", l.kind.describe(), l.addr))
}

/// A row-lock convoy behind a transaction at work and younger than this
/// gives way to a stall class.
const MINOR_CONVOY_AGE_S: i64 = 2;

/// The first line of the report: the likely culprit, with its evidence.
pub fn verdict(ev: &Evidence) -> String {
    // 0. A memory trigger: what grew the server leads, whatever else the
    // capture shows follows.
    if crate::capture::is_memory_trigger(&ev.trigger) {
        let line = match (&ev.growth, &ev.growth_error) {
            (Some(g), _) => g.headline().unwrap_or_else(|| {
                format!("memory: the server did not grow in the {:.1} s traced after the trigger", g.elapsed_s)
            }),
            (None, Some(e)) => format!("memory: {e}"),
            // The capture had begun for another trigger (an early capture
            // kept for this one), or had no server process to trace.
            (None, None) => "memory: growth not traced in this capture (it was taken for another trigger, or without the server's process)".into(),
        };
        let rest = verdict_of_locks_and_stacks(ev);
        return if rest.starts_with("no culprit found") || rest.starts_with("no lock culprit found") {
            line
        } else {
            format!("{line}; also {rest}")
        };
    }
    verdict_of_locks_and_stacks(ev)
}

/// Every class [`class_of`] gives for the verdicts pileup writes: the
/// exposition counts each from 0, so a first stall of a class shows as an
/// increase.
pub const CLASSES: &[&str] = &[
    "table-open storm",
    "connection storm",
    "DROP or TRUNCATE of a table",
    "data file extension",
    "statistics recalculation",
    "flushing storm",
    "redo log writes",
    "slow or saturated disk",
    "row lock convoy",
    "global read lock",
    "backup lock",
    "global read or backup lock",
    "metadata lock",
    "table flush",
    "table-level lock",
    "memory",
    "not answering",
    "unclassified",
];

/// The class a verdict leads with, for metrics and alerts, always one of
/// [`CLASSES`]: the words before its first `:` when they are a class
/// ("flushing storm", "row lock convoy", "global read lock", "memory"),
/// "not answering" for a server that did not answer SQL, and "unclassified"
/// otherwise (no culprit found, or a lead that is not a class).
pub fn class_of(verdict: &str) -> &'static str {
    let first = verdict.lines().next().unwrap_or("");
    if first.starts_with("the server does not answer SQL") {
        return "not answering";
    }
    let lead = first.split_once(':').map(|(lead, _)| lead);
    CLASSES.iter().copied().find(|c| lead == Some(*c)).unwrap_or("unclassified")
}

/// The verdict from locks, stall classes, SQL and stacks.
fn verdict_of_locks_and_stacks(ev: &Evidence) -> String {
    // 1. Row locks: the transaction most others wait for, unless it is
    // itself waiting for a global or metadata lock (a commit blocked by
    // BACKUP STAGE BLOCK_COMMIT or FTWRL keeps its row locks): then that
    // lock's holder is the root.
    let pileup = crate::holder::analyse(ev);
    let roots = root_blockers(&ev.row_lock_waits);
    let found = crate::classes::findings(ev);
    let also = |v: String| match found.is_empty() {
        true => v,
        false => format!(
            "{v}; stall classes seen: {}",
            found.iter().map(|f| f.class.name()).collect::<Vec<_>>().join(", then ")
        ),
    };
    if let Some(&(b, n)) = roots.first() {
        let waiting_itself = ev.processlist.iter().any(|r| {
            r.get("id").and_then(|v| v.parse::<u64>().ok()) == Some(b)
                && r.get("state").is_some_and(|s| crate::holder::LockClass::of_state(s).is_some())
        });
        if !waiting_itself || pileup.is_none() {
            let w = ev.row_lock_waits.iter().find(|w| w.blocking_conn == b).unwrap();
            let age = w.blocking_trx_age_s.map(|a| format!(", its transaction open {a}s")).unwrap_or_default();
            let waiting = pileup_output::plural(n, "waiting transaction", "waiting transactions");
            // An idle holder's last statement, from its memory: the one
            // that took the row.
            let last = match ev.last_statements.get(&b) {
                Some(crate::last_statement::LastStatement::Found(t)) => {
                    format!("; it last ran `{}` (read from its memory)", pileup_engine::one_line(t, 120))
                }
                _ => String::new(),
            };
            let convoy = format!("row lock convoy: {waiting} blocked by {}{age}{last}", pl_summary(ev, b));
            // Waits behind a young transaction that is itself at work are
            // what a busy write load shows, and when a stall class is there
            // too, the class is why that transaction is slow: the class
            // leads and the row locks follow it. An idle holder, or an old
            // transaction, is a culprit of its own. A client asleep for less
            // than a second is between the statements of its transaction,
            // at work.
            let working = ev.processlist.iter().any(|r| {
                let secs = r
                    .get("time_ms")
                    .and_then(|v| v.parse::<f64>().ok())
                    .map(|ms| ms / 1000.0)
                    .or_else(|| r.get("time").and_then(|v| v.parse::<f64>().ok()));
                r.get("id").and_then(|v| v.parse::<u64>().ok()) == Some(b)
                    && r.get("command").is_some_and(|c| c != "Sleep" || secs.is_some_and(|s| s < 1.0))
            });
            let minor = working && w.blocking_trx_age_s.is_some_and(|a| a < MINOR_CONVOY_AGE_S);
            match crate::classes::describe(&found).filter(|_| minor && pileup.is_none()) {
                Some(class) => return format!("{class}; also {convoy}"),
                None => return also(convoy),
            }
        }
    }
    // 2. Global read, backup, metadata, flush or table-level lock waits.
    if let Some(p) = pileup {
        let mut v = crate::holder::verdict_line(&p);
        if let Some(&(b, n)) = roots.first() {
            v += &format!(
                "; {} also {} for row locks held by connection {b}, which waits in this queue",
                pileup_output::plural(n, "transaction", "transactions"),
                if n == 1 { "waits" } else { "wait" }
            );
        }
        return also(v);
    }
    // 3. A stall class (table-open storm, slow disk…), with a contended
    // mutex's holder when the stacks name one.
    if let Some(mut v) = crate::classes::describe(&found) {
        if let Some(m) = mutex_holder(ev) {
            v += &format!("; {m}");
        }
        if let Some(e) = &ev.sql_error {
            v += &format!("; the server did not answer SQL ({})", e.lines().next().unwrap_or(""));
        }
        return v;
    }
    // 4. A pthread mutex with a known holder.
    if let Some(m) = mutex_holder(ev) {
        return m;
    }
    // 5. The server does not answer SQL.
    if let Some(e) = &ev.sql_error {
        // Where the working threads are; the most common stack when none
        // works (idle connections in poll() would lead it otherwise).
        let working = ev.profile.as_ref().and_then(|p| pileup_engine::analysis::where_time_went_line(&p.stacks, 3));
        let top = ev.profile.as_ref().and_then(|p| pileup_engine::analysis::group(p).into_iter().next());
        let stack = match (working, top) {
            (Some(w), _) => format!("; {w}"),
            (None, Some(g)) => format!(
                "; most common stack ({} thread-samples): {}",
                g.count,
                g.frames.iter().take(6).cloned().collect::<Vec<_>>().join(",")
            ),
            (None, None) => String::new(),
        };
        return format!("the server does not answer SQL ({}){stack}", e.lines().next().unwrap_or(""));
    }
    // 6. Otherwise: where the working threads' time went (idle threads, in
    // poll() for their client or waiting on a condition, are left out: on a
    // busy server they are the most common stack and explain nothing).
    if let Some(p) = &ev.profile {
        if let Some(line) = pileup_engine::analysis::where_time_went_line(&p.stacks, 3) {
            return format!("no lock culprit found; {line}");
        }
        if let Some(g) = pileup_engine::analysis::group(p).into_iter().find(|g| g.statements.iter().any(|_| true)) {
            return format!(
                "no lock culprit found; busiest stack with SQL ({} thread-samples): {}",
                g.count,
                g.frames.iter().take(6).cloned().collect::<Vec<_>>().join(",")
            );
        }
    }
    "no culprit found in locks, SQL or stacks; see the files of this capture".into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_verdict_s_class_is_the_words_it_leads_with() {
        use super::class_of;
        assert_eq!(class_of("flushing storm: checkpoint age at 100%; also row lock convoy: 1"), "flushing storm");
        assert_eq!(class_of("table-open storm: 2400 tables opened/s"), "table-open storm");
        assert_eq!(class_of("global read lock: 4 connections wait"), "global read lock");
        assert_eq!(class_of("memory: statement 12 grew 121 MB"), "memory");
        assert_eq!(class_of("the server does not answer SQL (timeout); most common stack"), "not answering");
        assert_eq!(class_of("no lock culprit found; busiest stack with SQL (3 thread-samples): a,b"), "unclassified");
        assert_eq!(class_of("no culprit found in locks, SQL or stacks; see the files of this capture"), "unclassified");
        assert_eq!(class_of("DROP or TRUNCATE of a table: `t`"), "DROP or TRUNCATE of a table");
        assert_eq!(class_of("a pile-up of 40 threads, 3 in x: y"), "unclassified");
        assert_eq!(class_of(""), "unclassified");
        // Only a known class: other leads, however they look, are not one.
        assert_eq!(class_of("disk full: /var/lib/mysql"), "unclassified");
        assert_eq!(class_of("Flushing storm: upper case"), "unclassified");
        assert_eq!(class_of("flushing storm, then: x"), "unclassified");
        for c in super::CLASSES {
            assert_eq!(class_of(&format!("{c}: evidence")), *c);
        }
        use crate::classes::StallClass as C;
        for c in [
            C::TableOpenStorm,
            C::ConnectionStorm,
            C::DropTable,
            C::FileExtension,
            C::StatsRecalc,
            C::FlushStorm,
            C::RedoLog,
            C::SlowDisk,
        ] {
            assert!(super::CLASSES.contains(&c.name()), "{}", c.name());
        }
        for l in [
            crate::holder::LockClass::Backup,
            crate::holder::LockClass::Metadata,
            crate::holder::LockClass::Flush,
            crate::holder::LockClass::TableLevel,
        ] {
            assert!(super::CLASSES.contains(&l.describe()), "{}", l.describe());
        }
    }

    use super::*;
    use crate::evidence::RowLockWait;
    use std::collections::BTreeMap;

    #[test]
    fn verdict_prefers_row_lock_blocker() {
        let mut ev = Evidence::default();
        ev.processlist.push(
            [
                ("id".to_string(), "7".to_string()),
                ("user".into(), "app".into()),
                ("command".into(), "Sleep".into()),
                ("time".into(), "12".into()),
            ]
            .into(),
        );
        for w in [10, 11, 12] {
            ev.row_lock_waits.push(RowLockWait {
                waiting_conn: w,
                waiting_query: Some("UPDATE t SET a=a+1 WHERE id=1".into()),
                blocking_conn: 7,
                blocking_query: None,
                blocking_trx_age_s: Some(12),
            });
        }
        let v = verdict(&ev);
        assert!(
            v.starts_with(
                "row lock convoy: 3 waiting transactions blocked by connection 7 (app@, Sleep for 12s) (idle)"
            ),
            "{v}"
        );
        assert!(v.contains("open 12s"));
        // Waiters queued behind waiters do not hide the root.
        ev.row_lock_waits.push(RowLockWait { waiting_conn: 11, blocking_conn: 10, ..Default::default() });
        ev.row_lock_waits.push(RowLockWait { waiting_conn: 12, blocking_conn: 10, ..Default::default() });
        ev.row_lock_waits.push(RowLockWait { waiting_conn: 12, blocking_conn: 11, ..Default::default() });
        assert_eq!(root_blockers(&ev.row_lock_waits), vec![(7, 3)]);
        assert!(verdict(&ev).contains("blocked by connection 7 "));
        let ev2 = Evidence { sql_error: Some("timed out".into()), ..Default::default() };
        assert!(verdict(&ev2).starts_with("the server does not answer SQL (timed out)"));
    }

    #[test]
    fn a_stall_class_leads_a_minor_convoy_and_follows_a_real_one() {
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        ev.history = (0..60)
            .map(|i| crate::store::Row {
                unix: 1000.0 + i as f64,
                ok: true,
                cost_ms: 1.0,
                error: None,
                derived: [("checkpoint_age_pct".to_string(), if i >= 57 { 99.0 } else { 20.0 })].into(),
            })
            .collect();
        let wait = |w, b, age| RowLockWait {
            waiting_conn: w,
            blocking_conn: b,
            blocking_trx_age_s: Some(age),
            ..Default::default()
        };
        let conn = |command: &str| -> BTreeMap<String, String> {
            [("id", "7"), ("user", "app"), ("command", command), ("time", "0")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        ev.processlist.push(conn("Execute"));
        ev.row_lock_waits = (10..14).map(|w| wait(w, 7, 0)).collect();
        let v = verdict(&ev);
        assert!(v.starts_with("flushing storm: checkpoint age at 99%"), "{v}");
        assert!(
            v.contains("; also row lock convoy: 4 waiting transactions blocked by connection 7 (app@, Execute for 0s)"),
            "{v}"
        );
        // A client between its transaction's statements is at work.
        ev.processlist[0] = conn("Sleep");
        assert!(verdict(&ev).starts_with("flushing storm: "));
        // An idle holder is a culprit of its own.
        ev.processlist[0].insert("time".into(), "1".into());
        ev.processlist[0].insert("time_ms".into(), "1500".into());
        for w in &mut ev.row_lock_waits {
            w.blocking_trx_age_s = Some(1);
        }
        assert!(verdict(&ev).starts_with("row lock convoy: 4 waiting transactions"));
        ev.processlist[0] = conn("Execute");
        ev.row_lock_waits.truncate(1);
        // An old transaction holding rows is a culprit of its own.
        ev.row_lock_waits[0].blocking_trx_age_s = Some(30);
        let v = verdict(&ev);
        assert!(v.starts_with("row lock convoy: 1 waiting transaction blocked by connection 7"), "{v}");
        assert!(v.ends_with("; stall classes seen: flushing storm"), "{v}");
    }

    #[test]
    fn a_row_lock_root_that_waits_for_the_backup_lock_is_not_the_culprit() {
        let mut ev = Evidence::default();
        let row = |id: &str, cmd: &str, ms: &str, state: &str| -> BTreeMap<String, String> {
            [("id", id), ("user", "app"), ("command", cmd), ("time", "1"), ("time_ms", ms), ("state", state)]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        ev.processlist.push(row("7", "Query", "1500", "Waiting for backup lock"));
        ev.processlist.push(row("8", "Query", "1200", "Waiting for backup lock"));
        ev.processlist.push(row("9", "Query", "1000", "Updating"));
        ev.processlist.push(row("66", "Sleep", "1550", ""));
        ev.row_lock_waits.push(RowLockWait { waiting_conn: 9, blocking_conn: 7, ..Default::default() });
        let v = verdict(&ev);
        assert!(v.starts_with("global read or backup lock: 2 connections wait, likely held by connection 66 "), "{v}");
        assert!(
            v.ends_with("; 1 transaction also waits for row locks held by connection 7, which waits in this queue"),
            "{v}"
        );
    }
}
