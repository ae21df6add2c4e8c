//! Who holds the lock a pile-up waits for: the global read or backup lock,
//! a metadata lock, a table flush or a table-level lock.
//!
//! Exact when the server lists its metadata locks (the metadata_lock_info
//! plugin, or performance_schema with the mdl instrument on). On a default
//! MariaDB neither is there, and the holder of a lock that is held by an
//! idle connection appears nowhere: it is inferred from when each
//! connection's current state began (`TIME_MS`) against when the first
//! waiter's statement began, and from InnoDB's open transactions, and the
//! result says how sure it is and why. Pure functions of the gathered
//! [`Evidence`], tested without a server.

use crate::evidence::{pl_summary, stamp_tenths, Evidence, MdlLock};
use crate::last_statement::LastStatement;

/// Most idle connections whose last statement a capture reads.
pub const MAX_IDLE_READ: usize = 32;

/// Idle client connections that may hold a lock others wait for
/// (connection id, OS thread id): the idle holders of the row locks others
/// wait for, first; then, when connections wait for a global, metadata,
/// flush or table-level lock, those idle since before the oldest waiter's
/// statement began, longest idle last; at most [`MAX_IDLE_READ`].
pub fn idle_candidates(ev: &Evidence) -> Vec<(u64, i32)> {
    let all = conns(ev);
    let tid = |id: u64| -> Option<i32> {
        ev.processlist.iter().find(|r| r.get("id").and_then(|v| v.parse().ok()) == Some(id))?.get("tid")?.parse().ok()
    };
    let mut out: Vec<(u64, i32)> = crate::evidence::root_blockers(&ev.row_lock_waits)
        .into_iter()
        .filter_map(|(b, _)| all.iter().find(|c| c.id == b && c.command == "Sleep" && !is_server_thread(c)))
        .filter_map(|c| Some((c.id, tid(c.id)?)))
        .collect();
    let Some(oldest) = all.iter().filter(|c| c.class.is_some()).map(|c| c.secs).max_by(f64::total_cmp) else {
        return out;
    };
    let mut idle: Vec<(&Conn, i32)> = all
        .iter()
        .filter(|c| c.command == "Sleep" && !is_server_thread(c) && c.secs + 0.05 >= oldest)
        .filter_map(|c| {
            Some((
                c,
                ev.processlist
                    .iter()
                    .find(|r| r.get("id").and_then(|v| v.parse().ok()) == Some(c.id))?
                    .get("tid")?
                    .parse()
                    .ok()?,
            ))
        })
        .collect();
    // The holder went idle just before the first waiter: nearest first.
    idle.sort_by(|a, b| a.0.secs.total_cmp(&b.0.secs));
    out.extend(
        idle.into_iter()
            .map(|(c, tid)| (c.id, tid))
            .filter(|(id, _)| !out.iter().any(|o| o.0 == *id))
            .collect::<Vec<_>>(),
    );
    out.truncate(MAX_IDLE_READ);
    out
}

/// What a waiting connection waits for, from its processlist state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockClass {
    /// `Waiting for backup lock` (FLUSH TABLES WITH READ LOCK and BACKUP
    /// STAGE take the backup lock in MariaDB), `… global read lock`, `… commit lock`.
    Backup,
    /// `Waiting for table metadata lock`, `… schema metadata lock`, …
    Metadata,
    /// `Waiting for table flush`.
    Flush,
    /// `Waiting for table level lock` (LOCK TABLES, non-transactional engines).
    TableLevel,
}

impl LockClass {
    pub fn of_state(state: &str) -> Option<LockClass> {
        let s = state.to_ascii_lowercase();
        if !s.starts_with("waiting for") {
            return None;
        }
        if s.contains("backup lock") || s.contains("global read lock") || s.contains("commit lock") {
            Some(LockClass::Backup)
        } else if s.contains("metadata lock") {
            Some(LockClass::Metadata)
        } else if s.contains("table flush") {
            Some(LockClass::Flush)
        } else if s.contains("table level lock") {
            Some(LockClass::TableLevel)
        } else {
            None
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            LockClass::Backup => "global read or backup lock",
            LockClass::Metadata => "metadata lock",
            LockClass::Flush => "table flush",
            LockClass::TableLevel => "table-level lock",
        }
    }
}

/// How the holder was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sureness {
    /// Read from the server's list of metadata locks.
    Exact,
    /// Inferred, and only one connection fits.
    Likely,
    /// Inferred, and several connections fit: listed best first.
    Possible,
}

/// A connection that holds, or may hold, the lock.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Holder {
    pub conn: u64,
    /// The connection as the processlist shows it.
    pub summary: String,
    /// Why it is named: the lock mode, or the timing that points at it.
    pub reason: String,
    /// An idle connection: when it went idle (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since_unix: Option<f64>,
    /// An idle connection: what it last ran, read from its memory, or why
    /// that could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_statement: Option<LastStatement>,
}

/// A pile-up of connections waiting for a lock, and its holder.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LockPileup {
    /// What the first connection in the queue waits for.
    pub class: LockClass,
    /// Connections waiting for any of these locks.
    pub waiting: usize,
    /// Seconds since the oldest waiting statement began.
    pub oldest_s: f64,
    /// A waiting statement that takes a lock itself (DDL, FLUSH, LOCK
    /// TABLES, BACKUP STAGE), the others queued behind it: (connection, statement).
    pub head: Option<(u64, String)>,
    /// Best first; empty when no connection fits.
    pub holders: Vec<Holder>,
    pub sureness: Option<Sureness>,
    /// Where the holders came from, or why none is named.
    pub why: String,
}

struct Conn<'a> {
    id: u64,
    command: &'a str,
    user: &'a str,
    /// Seconds since the current state began (TIME_MS, else TIME).
    secs: f64,
    class: Option<LockClass>,
    info: Option<&'a str>,
}

fn conns(ev: &Evidence) -> Vec<Conn<'_>> {
    ev.processlist
        .iter()
        .filter_map(|r| {
            let id = r.get("id")?.parse().ok()?;
            let secs = match r.get("time_ms").and_then(|t| t.parse::<f64>().ok()) {
                Some(ms) => ms / 1000.0,
                None => r.get("time").and_then(|t| t.parse().ok()).unwrap_or(0.0),
            };
            Some(Conn {
                id,
                command: r.get("command").map(String::as_str).unwrap_or(""),
                user: r.get("user").map(String::as_str).unwrap_or(""),
                secs,
                class: r.get("state").and_then(|s| LockClass::of_state(s)),
                info: r.get("info").map(String::as_str),
            })
        })
        .collect()
}

/// A statement that takes a lock others then queue behind.
fn takes_lock(info: &str) -> bool {
    let u = info.trim_start().to_ascii_uppercase();
    [
        "FLUSH",
        "ALTER",
        "CREATE INDEX",
        "CREATE UNIQUE",
        "DROP",
        "RENAME",
        "TRUNCATE",
        "OPTIMIZE",
        "REPAIR",
        "LOCK",
        "BACKUP",
    ]
    .iter()
    .any(|k| u.starts_with(k))
}

/// Server threads that are not clients (they hold no lock a client waits
/// for in these classes): the server's own, and replication's (a replica's
/// Binlog Dump on its source, the applier and I/O threads on a replica).
fn is_server_thread(c: &Conn) -> bool {
    c.command == "Daemon"
        || c.user == "system user"
        || c.user == "event_scheduler"
        || c.command.starts_with("Binlog Dump")
        || c.command.starts_with("Slave_")
        || c.command.starts_with("Replica_")
}

fn short(s: &str) -> String {
    pileup_engine::one_line(s, 80)
}

/// Modes that block others on a table, strongest first.
fn mode_rank(mode: &str) -> usize {
    const ORDER: &[&str] = &[
        "BACKUP_FTWRL2",
        "BACKUP_FTWRL1",
        "BACKUP_WAIT_COMMIT",
        "BACKUP_BLOCK_DDL",
        "BACKUP_WAIT_DDL",
        "BACKUP_WAIT_FLUSH",
        "BACKUP_FLUSH",
        "BACKUP_START",
        "EXCLUSIVE",
        "SHARED_NO_READ_WRITE",
        "SHARED_NO_WRITE",
        "SHARED_UPGRADABLE",
        "SHARED_WRITE",
        "SHARED_READ",
    ];
    ORDER.iter().position(|m| *m == mode).unwrap_or(ORDER.len())
}

/// The lock pile-up in this evidence, if connections wait for a global,
/// metadata, flush or table-level lock.
pub fn analyse(ev: &Evidence) -> Option<LockPileup> {
    let all = conns(ev);
    let waiters: Vec<&Conn> = all.iter().filter(|c| c.class.is_some()).collect();
    let oldest = waiters.iter().copied().max_by(|a, b| a.secs.total_cmp(&b.secs))?;
    // The queue's head: the oldest waiter that takes a lock itself.
    let head =
        waiters.iter().copied().filter(|c| c.info.is_some_and(takes_lock)).max_by(|a, b| a.secs.total_cmp(&b.secs));
    let subject = head.unwrap_or(oldest);
    let class = subject.class.unwrap();
    let mut p = LockPileup {
        class,
        waiting: waiters.len(),
        oldest_s: oldest.secs,
        head: head.map(|h| (h.id, h.info.unwrap_or_default().to_string())),
        holders: vec![],
        sureness: None,
        why: String::new(),
    };
    // Connections that are not waiting and could hold the lock.
    let others: Vec<&Conn> = all.iter().filter(|c| c.class.is_none() && !is_server_thread(c)).collect();
    if let Some(m) = &ev.mdl {
        let held = exact_holders(&m.locks, subject.id, class, head.is_some(), &others);
        if !held.is_empty() {
            p.holders = held
                .into_iter()
                .filter_map(|l| others.iter().find(|c| c.id == l.conn).map(|c| holder(ev, c, describe_lock(l))))
                .collect();
            p.sureness = Some(Sureness::Exact);
            p.why = format!("from {}", m.source);
            return Some(p);
        }
    }
    // Inference, from when each connection began.
    let what = match head {
        Some(h) => {
            let verb = h.info.unwrap_or_default().split_whitespace().next().unwrap_or("").to_ascii_uppercase();
            format!("the {verb}")
        }
        None => "the first waiter".to_string(),
    };
    let mut cands = candidates(ev, class, head.is_some(), subject, &others, &what);
    cands.sort_by(|a, b| a.1.total_cmp(&b.1));
    p.holders = cands.into_iter().map(|(h, _)| h).collect();
    judge(&mut p, &all, subject, head.is_some(), &what);
    Some(p)
}

/// A connection named as a holder, for `reason`: its summary, and when
/// idle, since when and what it last ran.
fn holder(ev: &Evidence, c: &Conn, reason: String) -> Holder {
    let idle = c.command == "Sleep";
    Holder {
        conn: c.id,
        summary: pl_summary(ev, c.id),
        reason,
        idle_since_unix: ev.processlist_unix.filter(|_| idle).map(|u| u - c.secs),
        last_statement: ev.last_statements.get(&c.id).cloned().filter(|_| idle).or_else(|| {
            // Read for none of the idle: say why.
            ev.last_statements_error
                .clone()
                .filter(|_| idle && ev.last_statements.is_empty())
                .map(LastStatement::Unknown)
        }),
    }
}

/// The connections that may hold the lock `subject` waits for, inferred
/// from when each began, with a rank (lowest first): for a queue of
/// writers (no `headed` queue), connections idle or running since before
/// it; for a metadata lock, statements and transactions older than it; for
/// a queue's head or a flush, statements running since before it.
fn candidates(
    ev: &Evidence,
    class: LockClass,
    headed: bool,
    subject: &Conn,
    others: &[&Conn],
    what: &str,
) -> Vec<(Holder, f64)> {
    // A statement's wait began no earlier than the statement, so the lock
    // was taken before that (give or take 50 ms of clock).
    let before = |c: &Conn| c.secs + 0.05 >= subject.secs && c.id != subject.id;
    let running = |c: &&&Conn| c.command == "Query" || c.command == "Execute";
    let mut cands: Vec<(Holder, f64)> = Vec::new();
    match (class, headed) {
        // Writers queue behind a held global read or backup lock: its holder
        // is usually idle (FTWRL or BACKUP STAGE done, the client copying),
        // its idle time beginning just before the first writer queued.
        (LockClass::Backup, false) | (LockClass::TableLevel, false) => {
            for c in others.iter().filter(|c| before(c)) {
                let gap = (c.secs - subject.secs).max(0.0);
                let reason = if running(&c) {
                    format!("running since {gap:.1} s before {what} began")
                } else {
                    match ev.processlist_unix {
                        Some(u) => {
                            format!("idle since {} UTC, {gap:.1} s before {what} began", stamp_tenths(u - c.secs))
                        }
                        None => format!("idle since {gap:.1} s before {what} began"),
                    }
                };
                // Idle connections first (a running statement that began
                // before the lock was taken is less often its holder).
                let rank = if running(&c) { gap + 1e6 } else { gap };
                cands.push((holder(ev, c, reason), rank));
            }
        }
        // A metadata-lock waiter waits for transactions or statements that
        // began before it and used the table.
        (LockClass::Metadata, _) | (LockClass::TableLevel, true) => {
            for c in others.iter().filter(|c| before(c) && running(c)) {
                cands.push((
                    holder(ev, c, format!("its statement began {:.1} s before {what}", c.secs - subject.secs)),
                    -c.secs,
                ));
            }
            for t in &ev.trx {
                // trx_started has whole seconds: "before" within a second.
                if (t.age_s as f64) + 1.0 < subject.secs || cands.iter().any(|(h, _)| h.conn == t.conn) {
                    continue;
                }
                if let Some(c) = others.iter().find(|c| c.id == t.conn) {
                    let reason = format!(
                        "its transaction has been open {} s, since before {what}{}",
                        t.age_s,
                        if t.tables_locked > 0 {
                            format!(", {} locked", pileup_output::plural(t.tables_locked, "table", "tables"))
                        } else {
                            String::new()
                        }
                    );
                    cands.push((holder(ev, c, reason), -(t.age_s as f64)));
                }
            }
        }
        // The first in the queue (FTWRL, FLUSH, DDL) waits for statements
        // running since before it; FLUSH for those using the flushed tables.
        (LockClass::Backup, true) | (LockClass::Flush, _) => {
            for c in others.iter().filter(|c| before(c) && running(c)) {
                cands.push((
                    holder(ev, c, format!("running since {:.1} s before {what}", c.secs - subject.secs)),
                    -c.secs,
                ));
            }
        }
    }
    cands
}

/// How sure the inferred holders are: the only one that fits, one idle
/// connection far closer to the onset than the rest, or several in order.
fn judge(p: &mut LockPileup, all: &[Conn], subject: &Conn, headed: bool, what: &str) {
    let class = p.class;
    match p.holders.len() {
        0 => p.why = format!("no connection was idle, running or in a transaction since before {what}"),
        1 => {
            p.sureness = Some(Sureness::Likely);
            p.why = format!("from the processlist's timing, the only connection that fits: none other was idle, running or in a transaction since before {what}");
        }
        n => {
            // One idle connection far closer to the onset than any other
            // (within a second, the next more than a second further) stands out.
            let idle_close = matches!((class, headed), (LockClass::Backup, false) | (LockClass::TableLevel, false))
                && {
                    let first = all.iter().find(|c| c.id == p.holders[0].conn).map(|c| c.secs - subject.secs);
                    let second = all.iter().find(|c| c.id == p.holders[1].conn).map(|c| c.secs - subject.secs);
                    let first_idle = all.iter().any(|c| c.id == p.holders[0].conn && c.command == "Sleep");
                    matches!((first, second), (Some(a), Some(b)) if first_idle && a <= 1.0 && b > a + 1.0)
                };
            if idle_close {
                p.sureness = Some(Sureness::Likely);
                p.why = format!(
                    "from the processlist's timing, the only connection that went idle within a second before {what}; {} idle or running longer",
                    pileup_output::plural(n - 1, "other", "others")
                );
            } else {
                p.sureness = Some(Sureness::Possible);
                p.why = format!("{n} connections fit, best first");
            }
        }
    }
}

fn describe_lock(l: &MdlLock) -> String {
    let what = match l.mode.as_str() {
        m if m.starts_with("BACKUP_FTWRL") => ": FLUSH TABLES WITH READ LOCK",
        m if is_backup_tool_mode(m) => ": BACKUP STAGE (a backup tool)",
        _ => "",
    };
    if l.object.is_empty() {
        format!("holds {}{what}", l.mode)
    } else {
        format!("holds {} on {}{what}", l.mode, l.object)
    }
}

/// Backup-lock modes taken by BACKUP STAGE (MariaDB's backup tools); the
/// FTWRL modes are told apart. Statements take the others (BACKUP_DML,
/// BACKUP_TRANS_DML, BACKUP_COMMIT…) for as long as they run.
fn is_backup_tool_mode(m: &str) -> bool {
    matches!(
        m,
        "BACKUP_START"
            | "BACKUP_FLUSH"
            | "BACKUP_WAIT_FLUSH"
            | "BACKUP_WAIT_DDL"
            | "BACKUP_WAIT_COMMIT"
            | "BACKUP_BLOCK_DDL"
            | "BACKUP_BLOCK_COMMIT"
    )
}

/// Granted locks that `subject` waits behind, strongest first. With
/// performance_schema the subject's pending lock names the object; the
/// plugin lists granted locks only, so the objects are those the subject
/// already holds (DDL takes an upgradable lock first) or, failing that,
/// those held by connections not waiting.
fn exact_holders<'a>(
    locks: &'a [MdlLock],
    subject: u64,
    class: LockClass,
    head: bool,
    others: &[&Conn],
) -> Vec<&'a MdlLock> {
    let not_waiting = |l: &&MdlLock| l.conn != subject && others.iter().any(|c| c.id == l.conn) && l.granted;
    let mut held: Vec<&MdlLock> = match class {
        // Writers wait for FTWRL or BACKUP STAGE; FTWRL or BACKUP STAGE
        // waiting (the head) waits for running statements.
        LockClass::Backup => locks
            .iter()
            .filter(|l| l.namespace == "BACKUP")
            .filter(|l| head != (l.mode.starts_with("BACKUP_FTWRL") || is_backup_tool_mode(&l.mode)))
            .filter(not_waiting)
            .collect(),
        LockClass::Metadata => {
            let mut objects: Vec<&str> = locks
                .iter()
                .filter(|l| l.conn == subject && !l.granted && l.namespace != "BACKUP")
                .map(|l| l.object.as_str())
                .collect();
            if objects.is_empty() {
                objects = locks
                    .iter()
                    .filter(|l| l.conn == subject && l.namespace != "BACKUP")
                    .map(|l| l.object.as_str())
                    .collect();
            }
            locks
                .iter()
                .filter(|l| l.namespace != "BACKUP")
                .filter(|l| objects.is_empty() || objects.contains(&l.object.as_str()))
                .filter(not_waiting)
                .collect()
        }
        LockClass::Flush | LockClass::TableLevel => vec![],
    };
    held.sort_by_key(|l| mode_rank(&l.mode));
    // One row per connection: its strongest lock.
    let mut seen = std::collections::BTreeSet::new();
    held.retain(|l| seen.insert(l.conn));
    held
}

/// Where exact holders come from, for verdicts that had to infer.
pub const EXACT_HINT: &str =
    "exact with the metadata_lock_info plugin (pileup watch --install-plugins) or performance_schema";

/// What a named holder last ran, for the verdict: `; last ran `…` (read
/// from its memory)`, or why that is unknown.
fn last_ran(h: &Holder) -> String {
    match &h.last_statement {
        Some(LastStatement::Found(t)) => format!("; last ran `{}` (read from its memory)", short(t)),
        Some(LastStatement::Unknown(why)) => format!("; what it last ran is unknown ({why})"),
        None => String::new(),
    }
}

/// A statement's words, upper-cased and single-spaced, past leading
/// comments and without a trailing `;`.
fn statement_words(text: &str) -> String {
    let mut t = text.trim_start();
    while let Some(rest) = t.strip_prefix("/*") {
        t = rest.split_once("*/").map_or("", |r| r.1).trim_start();
    }
    t.trim_end().trim_end_matches(';').split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_uppercase()
}

/// The verdict's line for a lock pile-up.
pub fn verdict_line(p: &LockPileup) -> String {
    let exact_mode = |prefix: &str| {
        p.sureness == Some(Sureness::Exact) && p.holders.first().is_some_and(|h| h.reason.contains(prefix))
    };
    // What the likely holder last ran names the lock, as the exact mode does.
    let ran = |what: fn(&str) -> bool| {
        p.head.is_none()
            && matches!(p.sureness, Some(Sureness::Likely))
            && p.holders.first().is_some_and(
                |h| matches!(&h.last_statement, Some(LastStatement::Found(t)) if what(&statement_words(t))),
            )
    };
    let ftwrl = |w: &str| w.starts_with("FLUSH TABLE") && w.ends_with("WITH READ LOCK");
    let backup = |w: &str| w.starts_with("BACKUP STAGE");
    let lock = match p.class {
        LockClass::Backup if exact_mode("FLUSH TABLES WITH READ LOCK") || ran(ftwrl) => "global read lock",
        LockClass::Backup if exact_mode("BACKUP STAGE") || ran(backup) => "backup lock",
        c => c.describe(),
    };
    let waits = if p.waiting == 1 { "connection waits" } else { "connections wait" };
    let mut s = format!("{lock}: {} {waits}", p.waiting);
    let (held, likely) = match &p.head {
        Some((h, stmt)) => {
            s += &format!(", queued behind connection {h} (`{}`)", short(stmt));
            (", which waits for", ", which likely waits for")
        }
        None => (", held by", ", likely held by"),
    };
    match (p.sureness, p.holders.first()) {
        (Some(Sureness::Exact), Some(h)) => {
            s += &format!("{held} {}: {}{} ({})", h.summary, h.reason, last_ran(h), p.why);
            if p.holders.len() > 1 {
                s += &format!(
                    ", and {}",
                    pileup_output::plural(p.holders.len() - 1, "other connection", "other connections")
                );
            }
        }
        (Some(Sureness::Likely), Some(h)) => {
            s += &format!("{likely} {}: {}{} (inferred: {}; {EXACT_HINT})", h.summary, h.reason, last_ran(h), p.why);
        }
        (Some(Sureness::Possible), _) => {
            let list: Vec<String> =
                p.holders.iter().take(3).map(|h| format!("{}: {}{}", h.summary, h.reason, last_ran(h))).collect();
            s += &format!("; the holder is one of {} (inferred: {}; {EXACT_HINT})", list.join("; "), p.why);
        }
        _ => s += &format!("; holder not found ({}; {EXACT_HINT})", p.why),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{MetadataLocks, OpenTrx};

    fn conn(ev: &mut Evidence, id: u64, command: &str, secs: f64, state: &str, info: Option<&str>) {
        let mut m: std::collections::BTreeMap<String, String> = [
            ("id".to_string(), id.to_string()),
            ("user".into(), "app".into()),
            ("host".into(), "10.0.0.5:4000".into()),
            ("command".into(), command.into()),
            ("time".into(), (secs as u64).to_string()),
            ("time_ms".into(), format!("{:.3}", secs * 1000.0)),
            ("state".into(), state.into()),
        ]
        .into();
        if let Some(i) = info {
            m.insert("info".into(), i.into());
        }
        ev.processlist.push(m);
    }

    /// Writers queue behind FTWRL; its connection went idle just before
    /// the first writer queued; other idle connections idled far longer.
    fn ftwrl_idle_holder() -> Evidence {
        let mut ev = Evidence::default();
        for (i, secs) in [3.1, 2.8, 2.0, 0.4].iter().enumerate() {
            conn(
                &mut ev,
                20 + i as u64,
                "Query",
                *secs,
                "Waiting for backup lock",
                Some("UPDATE t SET v=v+1 WHERE id=1"),
            );
        }
        conn(&mut ev, 55, "Sleep", 3.2, "", None);
        conn(&mut ev, 56, "Sleep", 600.0, "", None);
        conn(&mut ev, 57, "Sleep", 9.5, "", None);
        conn(&mut ev, 58, "Sleep", 0.2, "", None);
        conn(&mut ev, 1, "Daemon", 3.15, "InnoDB purge worker", None);
        ev
    }

    #[test]
    fn a_replication_thread_is_never_offered_as_a_holder() {
        let mut ev = ftwrl_idle_holder();
        // A replica's Binlog Dump, connected before the stall, counts as a
        // client nowhere.
        conn(&mut ev, 81, "Binlog Dump", 3.15, "Master has sent all binlog to slave; waiting for more updates", None);
        conn(&mut ev, 82, "Slave_SQL", 3.15, "Slave has read all relay log", None);
        let p = analyse(&ev).unwrap();
        assert_eq!(p.holders[0].conn, 55);
        assert!(p.holders.iter().all(|h| h.conn != 81 && h.conn != 82), "{:?}", p.holders);
        assert!(!verdict_line(&p).contains("connection 81"), "{}", verdict_line(&p));
    }

    #[test]
    fn idle_holder_of_a_global_read_lock_is_inferred_from_timing() {
        let ev = ftwrl_idle_holder();
        let p = analyse(&ev).unwrap();
        assert_eq!(p.class, LockClass::Backup);
        assert_eq!(p.waiting, 4);
        assert_eq!(p.sureness, Some(Sureness::Likely));
        assert_eq!(p.holders[0].conn, 55);
        // Idle since after the first waiter: not a candidate; the daemon never is.
        assert!(p.holders.iter().all(|h| h.conn != 58 && h.conn != 1));
        let v = verdict_line(&p);
        assert!(
            v.starts_with("global read or backup lock: 4 connections wait, likely held by connection 55 (app@10.0.0.5, Sleep for 3s) (idle): idle since 0.1 s before the first waiter began"),
            "{v}"
        );
        assert!(v.contains("--install-plugins"), "{v}");
    }

    #[test]
    fn the_idle_holder_is_named_with_when_it_went_idle_and_what_it_last_ran() {
        let mut ev = ftwrl_idle_holder();
        for r in &mut ev.processlist {
            let id = r["id"].clone();
            r.insert("tid".into(), format!("{}00", id));
        }
        ev.processlist_unix = Some(1_800_000_000.0);
        // Idle since before the oldest waiter (3.1 s), nearest first; 58
        // went idle after it; the daemon never counts.
        assert_eq!(idle_candidates(&ev), vec![(55, 5500), (57, 5700), (56, 5600)]);
        ev.last_statements.insert(55, LastStatement::Found("FLUSH TABLES WITH READ LOCK".into()));
        let p = analyse(&ev).unwrap();
        let v = verdict_line(&p);
        assert!(
            v.starts_with("global read lock: 4 connections wait, likely held by connection 55 (app@10.0.0.5, Sleep for 3s) (idle): idle since 20270115-075956.7 UTC, 0.1 s before the first waiter began; last ran `FLUSH TABLES WITH READ LOCK` (read from its memory) (inferred: from the processlist's timing"),
            "{v}"
        );
        assert_eq!(p.holders[0].idle_since_unix, Some(1_800_000_000.0 - 3.2));
        // A FLUSH of another kind does not name the lock.
        ev.last_statements.insert(55, LastStatement::Found("/* rotate */ flush logs".into()));
        assert!(verdict_line(&analyse(&ev).unwrap()).starts_with("global read or backup lock: "));
        ev.last_statements.insert(55, LastStatement::Found("/* dump */ flush  tables   with read lock;".into()));
        assert!(verdict_line(&analyse(&ev).unwrap()).starts_with("global read lock: "));
        // Unreadable: said, with why.
        ev.last_statements.clear();
        ev.last_statements_error = Some("the server does not export _current_thd".into());
        let v = verdict_line(&analyse(&ev).unwrap());
        assert!(
            v.starts_with("global read or backup lock: ")
                && v.contains("what it last ran is unknown (the server does not export _current_thd)"),
            "{v}"
        );
        // No waiters: nothing to read.
        assert!(idle_candidates(&Evidence::default()).is_empty());
    }

    #[test]
    fn two_connections_idle_since_the_onset_are_both_named() {
        let mut ev = ftwrl_idle_holder();
        conn(&mut ev, 59, "Sleep", 3.4, "", None);
        let p = analyse(&ev).unwrap();
        assert_eq!(p.sureness, Some(Sureness::Possible));
        assert_eq!(p.holders.iter().map(|h| h.conn).take(2).collect::<Vec<_>>(), vec![55, 59]);
        assert!(verdict_line(&p).contains("the holder is one of connection 55"));
    }

    #[test]
    fn exact_holder_from_the_lock_list() {
        let mut ev = ftwrl_idle_holder();
        ev.mdl = Some(MetadataLocks {
            source: "metadata_lock_info".into(),
            locks: vec![
                MdlLock {
                    conn: 56,
                    mode: "BACKUP_FTWRL2".into(),
                    namespace: "BACKUP".into(),
                    granted: true,
                    ..Default::default()
                },
                MdlLock {
                    conn: 20,
                    mode: "SHARED_WRITE".into(),
                    namespace: "TABLE".into(),
                    object: "w.t".into(),
                    granted: true,
                },
            ],
        });
        let p = analyse(&ev).unwrap();
        assert_eq!((p.sureness, p.holders[0].conn), (Some(Sureness::Exact), 56));
        let v = verdict_line(&p);
        assert!(v.starts_with("global read lock: 4 connections wait, held by connection 56 "), "{v}");
        assert!(
            v.ends_with("(idle): holds BACKUP_FTWRL2: FLUSH TABLES WITH READ LOCK (from metadata_lock_info)"),
            "{v}"
        );
    }

    #[test]
    fn ddl_waiting_for_an_open_transaction() {
        let mut ev = Evidence::default();
        conn(&mut ev, 17, "Query", 1.5, "Waiting for table metadata lock", Some("ALTER TABLE w.t ADD COLUMN c INT"));
        conn(&mut ev, 18, "Query", 1.0, "Waiting for table metadata lock", Some("SELECT * FROM w.t"));
        conn(&mut ev, 19, "Query", 0.9, "Waiting for table metadata lock", Some("SELECT * FROM w.t WHERE id=2"));
        conn(&mut ev, 15, "Sleep", 3.0, "", None);
        conn(&mut ev, 16, "Sleep", 3.0, "", None);
        conn(&mut ev, 30, "Query", 0.2, "Sending data", Some("SELECT 1"));
        ev.trx.push(OpenTrx { conn: 16, age_s: 3, state: "RUNNING".into(), ..Default::default() });
        let p = analyse(&ev).unwrap();
        assert_eq!(p.class, LockClass::Metadata);
        assert_eq!(p.head.as_ref().unwrap().0, 17);
        assert_eq!(p.sureness, Some(Sureness::Likely));
        assert_eq!(p.holders.iter().map(|h| h.conn).collect::<Vec<_>>(), vec![16]);
        let v = verdict_line(&p);
        assert!(v.starts_with("metadata lock: 3 connections wait, queued behind connection 17 (`ALTER TABLE w.t ADD COLUMN c INT`), which likely waits for connection 16 "), "{v}");
        assert!(v.contains("its transaction has been open 3 s"), "{v}");
        // With performance_schema: the ALTER's pending lock names the table.
        ev.mdl = Some(MetadataLocks {
            source: "performance_schema".into(),
            locks: vec![
                MdlLock {
                    conn: 17,
                    mode: "EXCLUSIVE".into(),
                    namespace: "TABLE".into(),
                    object: "w.t".into(),
                    granted: false,
                },
                MdlLock {
                    conn: 17,
                    mode: "SHARED_UPGRADABLE".into(),
                    namespace: "TABLE".into(),
                    object: "w.t".into(),
                    granted: true,
                },
                MdlLock {
                    conn: 15,
                    mode: "SHARED_READ".into(),
                    namespace: "TABLE".into(),
                    object: "w.u".into(),
                    granted: true,
                },
                MdlLock {
                    conn: 16,
                    mode: "SHARED_READ".into(),
                    namespace: "TABLE".into(),
                    object: "w.t".into(),
                    granted: true,
                },
            ],
        });
        let p = analyse(&ev).unwrap();
        assert_eq!((p.sureness, p.holders.len(), p.holders[0].conn), (Some(Sureness::Exact), 1, 16));
        assert!(verdict_line(&p).contains("which waits for connection 16 (app@10.0.0.5, Sleep for 3s) (idle): holds SHARED_READ on w.t (from performance_schema)"), "{}", verdict_line(&p));
    }

    #[test]
    fn ftwrl_waiting_behind_a_long_select_names_the_select() {
        let mut ev = Evidence::default();
        conn(&mut ev, 40, "Query", 2.0, "Waiting for table flush", Some("FLUSH TABLES WITH READ LOCK"));
        conn(&mut ev, 41, "Query", 1.2, "Waiting for backup lock", Some("INSERT INTO t VALUES (1)"));
        conn(&mut ev, 42, "Query", 40.0, "Sending data", Some("SELECT COUNT(*) FROM big JOIN big b2"));
        conn(&mut ev, 43, "Sleep", 50.0, "", None);
        let p = analyse(&ev).unwrap();
        assert_eq!((p.class, p.head.as_ref().map(|h| h.0)), (LockClass::Flush, Some(40)));
        assert_eq!(p.holders.iter().map(|h| h.conn).collect::<Vec<_>>(), vec![42]);
        let v = verdict_line(&p);
        assert!(
            v.starts_with(
                "table flush: 2 connections wait, queued behind connection 40 (`FLUSH TABLES WITH READ LOCK`)"
            ),
            "{v}"
        );
        assert!(v.contains("which likely waits for connection 42"), "{v}");
    }

    #[test]
    fn no_waiters_no_pileup() {
        let mut ev = Evidence::default();
        conn(&mut ev, 5, "Query", 0.1, "Sending data", Some("SELECT 1"));
        conn(&mut ev, 6, "Query", 0.1, "Waiting for someone", Some("SELECT 1"));
        assert!(analyse(&ev).is_none());
        assert_eq!(LockClass::of_state("Waiting for table level lock"), Some(LockClass::TableLevel));
        assert_eq!(LockClass::of_state("Waiting for global read lock"), Some(LockClass::Backup));
    }
}
