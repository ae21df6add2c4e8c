//! Aggregation: identical stacks counted together, most frequent first — the
//! heart of the poor man's profiler — each group keeping who is behind it.
//!
//! Counting happens as samples arrive ([`Tally::add`]), so a run of hours
//! holds one entry per distinct stack and kind of thread, not every thread
//! of every sample: memory follows how varied the server's stacks are, not
//! how long it was watched.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::annotate::Role;
use crate::frames::{self, FrameClass};
use crate::profile::{Counted, Profile, ThreadStack, NO_STACK};
use crate::symbolize::Frame;

/// Thread ids kept per counted stack (the count of threads beyond is not
/// kept: a server with connection churn creates threads without end).
pub const TIDS_KEPT: usize = 1024;
/// Distinct SQL summaries and statements kept per counted stack.
const SQL_KEPT: usize = 50;
const STATEMENTS_KEPT: usize = 200;

type Key = (Vec<u64>, String, Option<Role>, char, Option<String>, Option<String>);

/// Stacks counted as they arrive.
#[derive(Debug, Default)]
pub struct Tally {
    index: HashMap<Key, usize>,
    counted: Vec<Counted>,
    /// Thread stacks counted in all.
    pub thread_stacks: usize,
}

impl Tally {
    /// Count one thread's stack (its frames already symbolized).
    /// `leaf_start`, when given, stands for the innermost address: a running
    /// thread is caught at a different instruction every time, and counting
    /// by instruction would grow an entry per sample where the stack is
    /// the same function by function.
    pub fn add(&mut self, t: &ThreadStack, leaf_start: Option<u64>) {
        self.thread_stacks += 1;
        let cmd = t.sql.as_ref().and_then(|s| s.command.clone());
        let user = t.sql.as_ref().and_then(|s| s.user.clone());
        let mut addrs = t.addrs.clone();
        if let (Some(first), Some(start)) = (addrs.first_mut(), leaf_start) {
            *first = start;
        }
        let key: Key = (addrs, t.name.clone(), t.role, t.state, cmd, user);
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let (addrs, thread, role, state, sql_command, sql_user) = key.clone();
                self.counted.push(Counted {
                    frames: t.frames.clone(),
                    addrs,
                    thread,
                    role,
                    state,
                    state_label: t.state_label,
                    sql_command,
                    sql_user,
                    count: 0,
                    tids: BTreeSet::new(),
                    tids_capped: false,
                    sql: BTreeSet::new(),
                    statements: BTreeMap::new(),
                    other_statements: 0,
                    partial: 0,
                });
                self.index.insert(key, self.counted.len() - 1);
                self.counted.len() - 1
            }
        };
        let e = &mut self.counted[i];
        e.count += 1;
        if e.tids.len() < TIDS_KEPT || e.tids.contains(&t.tid) {
            e.tids.insert(t.tid);
        } else {
            e.tids_capped = true;
        }
        if t.unwind_error.is_some() {
            e.partial += 1;
        }
        if let Some(s) = &t.sql {
            if e.sql.len() < SQL_KEPT {
                e.sql.insert(s.summary(120));
            }
            if let Some(q) = s.info.as_ref().filter(|_| !s.is_pileup) {
                let q = crate::annotate::one_line(q, 200);
                if let Some(n) = e.statements.get_mut(&q) {
                    *n += 1;
                } else if e.statements.len() < STATEMENTS_KEPT {
                    e.statements.insert(q, 1);
                } else {
                    e.other_statements += 1;
                }
            }
        }
    }

    /// Name every counted stack's frames again (debug info arrived).
    pub fn refresh(&mut self, stack: impl Fn(&[u64]) -> Vec<Frame>) {
        for c in &mut self.counted {
            c.frames = stack(&c.addrs);
        }
    }

    /// Every address counted stacks hold.
    pub fn addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.counted.iter().flat_map(|c| c.addrs.iter().copied())
    }

    /// Distinct stacks counted so far.
    pub fn distinct(&self) -> usize {
        self.counted.len()
    }

    /// Everything counted, most frequent first.
    pub fn into_counted(self) -> Vec<Counted> {
        let mut v = self.counted;
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.addrs.cmp(&b.addrs)));
        v
    }
}

/// One group of [`group`]: every counted stack with the same frame labels,
/// whatever the thread or state behind it.
#[derive(Debug, Clone, Serialize)]
pub struct StackGroup {
    /// Frame labels, innermost first.
    pub frames: Vec<String>,
    /// Thread-samples with this stack.
    pub count: usize,
    /// Distinct threads seen with it.
    pub tids: Vec<i32>,
    /// More threads had it than `tids` lists.
    pub tids_capped: bool,
    /// OS states seen (label → count).
    pub states: BTreeMap<String, usize>,
    /// Distinct SQL summaries of the threads behind it (capped).
    pub sql: Vec<String>,
    /// Distinct statements (normalised whitespace), with counts.
    pub statements: Vec<(String, usize)>,
}

/// What [`group`] gathers for one stack while counting.
#[derive(Default)]
struct Gathered {
    count: usize,
    tids: BTreeSet<i32>,
    tids_capped: bool,
    states: BTreeMap<String, usize>,
    sql: BTreeSet<String>,
    stmts: BTreeMap<String, usize>,
}

/// Group every counted stack by its frame labels (pt-pmp's unit: the same
/// functions, whatever the thread or state).
pub fn group(p: &Profile) -> Vec<StackGroup> {
    let mut m: HashMap<Vec<String>, Gathered> = HashMap::new();
    for c in &p.stacks {
        let e = m.entry(c.labels()).or_default();
        e.count += c.count;
        e.tids.extend(c.tids.iter().copied());
        e.tids_capped |= c.tids_capped;
        *e.states.entry(c.state_label.to_string()).or_default() += c.count;
        for s in &c.sql {
            if e.sql.len() < SQL_KEPT {
                e.sql.insert(s.clone());
            }
        }
        for (q, n) in &c.statements {
            *e.stmts.entry(q.clone()).or_default() += n;
        }
    }
    let mut v: Vec<StackGroup> = m
        .into_iter()
        .map(|(frames, Gathered { count, tids, tids_capped, states, sql, stmts })| {
            let mut statements: Vec<(String, usize)> = stmts.into_iter().collect();
            statements.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            StackGroup {
                frames,
                count,
                tids: tids.into_iter().collect(),
                tids_capped,
                states,
                sql: sql.into_iter().collect(),
                statements,
            }
        })
        .collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.frames.cmp(&b.frames)));
    v
}

/// One line of [`where_time_went`]: thread-samples in one state, under one
/// named function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Share {
    /// "on CPU", "disk wait" or "lock wait".
    pub state: &'static str,
    /// The innermost frame with a function name (module+offset frames and
    /// the C library's wait primitives are looked through).
    pub function: String,
    /// The most frequent innermost frame under it, when it is another one
    /// (an unnamed frame of a stripped binary, or the wait primitive).
    pub innermost: Option<String>,
    /// Thread-samples in this state under this function.
    pub count: usize,
    /// Share of the working thread-samples (every line's count summed).
    pub pct: f64,
}

/// Whether a frame is one of the C library's lock or futex primitives, or
/// the raw `syscall` InnoDB's own latches wait through (the latch's own
/// function, named, says which code waited).
fn lock_primitive(label: &str) -> bool {
    frames::is(label, |c| matches!(c, FrameClass::MutexWait | FrameClass::RwlockWait | FrameClass::FutexWait))
}

/// A condition-variable wait: threads waiting for work or a timer.
fn condition_wait(labels: &[&str]) -> bool {
    frames::first_class(labels.iter().take(4).copied(), |c| c == FrameClass::CondWait).is_some()
}

/// Waiting for the client's next packet, or asleep for an event or a time
/// (a listener's `poll`, a timer's `nanosleep`): idle, whatever the
/// thread's /proc state said a moment before its stack was read.
fn idle_wait(labels: &[&str]) -> bool {
    frames::first_class(labels.iter().take(4).copied(), |c| matches!(c, FrameClass::ClientWait | FrameClass::EventWait))
        .is_some()
}

/// Asleep in a wait that enters the kernel (a futex for a mutex, rwlock,
/// condition or semaphore, or an event): a stack read there is no time on
/// a CPU, whatever /proc's state said before it was read. Only the
/// innermost frame decides: a latch's own code may be spinning on a CPU.
fn in_wait(labels: &[&str]) -> bool {
    labels
        .first()
        .is_some_and(|l| frames::is(l, |c| (c.is_wait() && c != FrameClass::Latch) || c == FrameClass::EventWait))
}

fn unnamed(label: &str) -> bool {
    label == "??" || label.contains("+0x")
}

/// Where working threads spent a run: thread-samples on a CPU, waiting on
/// the disk, or waiting on a lock (asleep in a futex wait), grouped by
/// state and innermost named function, largest first (at most `top`
/// lines). Threads asleep otherwise (idle connections, timers, polls,
/// condition waits for work) are left out: they spend no time the user is
/// after.
pub fn where_time_went(stacks: &[Counted], top: usize) -> Vec<Share> {
    // (state, function) → (thread-samples, count per innermost frame)
    type Groups = HashMap<(&'static str, String), (usize, HashMap<String, usize>)>;
    let mut groups: Groups = HashMap::new();
    for c in stacks {
        let labels: Vec<&str> = c.frames.iter().map(|f| f.label.as_str()).collect();
        let inner = labels.first().copied().unwrap_or(NO_STACK);
        let state = match c.state {
            _ if idle_wait(&labels) => continue,
            'R' if !in_wait(&labels) => "on CPU",
            'D' => "disk wait",
            _ if lock_primitive(inner) && !condition_wait(&labels) => "lock wait",
            _ => continue,
        };
        let function = labels.iter().find(|l| !unnamed(l) && !lock_primitive(l)).copied().unwrap_or(inner).to_string();
        let g = groups.entry((state, function)).or_default();
        g.0 += c.count;
        *g.1.entry(inner.to_string()).or_default() += c.count;
    }
    let total: usize = groups.values().map(|g| g.0).sum();
    let mut out: Vec<Share> = groups
        .into_iter()
        .map(|((state, function), (count, inner))| {
            let top_inner = inner.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0))).map(|(l, _)| l);
            Share {
                state,
                innermost: top_inner.filter(|l| *l != function),
                function,
                count,
                pct: 100.0 * count as f64 / total.max(1) as f64,
            }
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.function.cmp(&b.function)));
    out.truncate(top);
    out
}

/// [`where_time_went`] in one line for a verdict: the `top` largest shares
/// of the working threads' time and how many thread-samples they are
/// shares of; `None` when no thread was working.
pub fn where_time_went_line(stacks: &[Counted], top: usize) -> Option<String> {
    let all = where_time_went(stacks, usize::MAX);
    let working: usize = all.iter().map(|s| s.count).sum();
    if working == 0 {
        return None;
    }
    // Shares under half a percent would read "0%".
    let parts: Vec<String> = all
        .iter()
        .take(top)
        .filter(|s| s.pct >= 0.5)
        .map(|s| format!("{:.0}% {} in {}", s.pct, s.state, s.function))
        .collect();
    Some(format!("where the working threads' time went ({working} thread-samples): {}", parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: i32, addrs: &[u64], label: &str, state: char) -> ThreadStack {
        let mut t = ThreadStack::test_thread(tid, state);
        t.addrs = addrs.to_vec();
        t.frames = addrs
            .iter()
            .map(|&a| Frame {
                function: None,
                label: format!("{label}{a}"),
                module: None,
                svma: Some(a),
                file: None,
                line: None,
                inlined: false,
            })
            .collect();
        t
    }

    fn labelled(labels: &[&str], state: char) -> ThreadStack {
        // Addresses told apart by label: stacks are counted by address.
        let addrs: Vec<u64> =
            labels.iter().map(|l| l.bytes().fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))).collect();
        let mut t = thread(1, &addrs, "x", state);
        for (f, l) in t.frames.iter_mut().zip(labels) {
            f.label = l.to_string();
        }
        t
    }

    #[test]
    fn time_goes_to_the_innermost_named_function_by_state() {
        let mut t = Tally::default();
        for _ in 0..6 {
            t.add(
                &labelled(&["mariadbd+0x1000", "mariadbd+0x2000", "handler::ha_write_row", "write_record"], 'R'),
                None,
            );
        }
        for _ in 0..3 {
            t.add(&labelled(&["syscall", "mariadbd+0x3000", "handler::ha_write_row"], 'S'), None);
        }
        t.add(&labelled(&["fdatasync", "mariadbd+0x4000"], 'D'), None);
        // Idle: asleep in poll or waiting on a condition, not counted; nor a
        // connection /proc saw running a moment before it went back to
        // waiting for its client.
        for _ in 0..50 {
            t.add(&labelled(&["__poll", "vio_io_wait"], 'S'), None);
            t.add(&labelled(&["__poll", "vio_io_wait", "vio_socket_io_wait", "vio_read"], 'R'), None);
            t.add(
                &labelled(&["__futex_abstimed_wait_common", "___pthread_cond_timedwait", "mariadbd+0x10"], 'S'),
                None,
            );
        }
        t.add(&labelled(&["__GI___lll_lock_wait", "___pthread_mutex_lock", "THD::awake"], 'S'), None);
        // Seen running by /proc, read asleep: a thread cache's condition
        // wait, the listener's poll, a mutex wait; none is on a CPU.
        for _ in 0..20 {
            t.add(&labelled(&["___pthread_cond_timedwait", "mariadbd+0x20", "do_handle_one_connection"], 'R'), None);
            t.add(&labelled(&["__poll", "mariadbd+0x30", "handle_connections_sockets"], 'R'), None);
        }
        t.add(&labelled(&["__GI___lll_lock_wait", "___pthread_mutex_lock", "THD::awake"], 'R'), None);
        let w = where_time_went(&t.into_counted(), 10);
        let line = |s: &str, f: &str| w.iter().find(|x| x.state == s && x.function == f).cloned();
        let cpu = line("on CPU", "handler::ha_write_row").unwrap();
        assert_eq!((cpu.count, cpu.innermost.as_deref()), (6, Some("mariadbd+0x1000")));
        assert!((cpu.pct - 600.0 / 12.0).abs() < 1e-9);
        let lock = line("lock wait", "handler::ha_write_row").unwrap();
        assert_eq!((lock.count, lock.innermost.as_deref()), (3, Some("syscall")));
        assert_eq!(line("disk wait", "fdatasync").unwrap().innermost, None);
        let awake = line("lock wait", "THD::awake").unwrap();
        assert_eq!((awake.count, awake.innermost.as_deref()), (2, Some("__GI___lll_lock_wait")));
        assert!(w.iter().all(|x| x.state != "on CPU" || x.function == "handler::ha_write_row"), "{w:?}");
        assert_eq!(w.len(), 4);
    }

    #[test]
    fn the_time_line_leaves_idle_threads_out() {
        let mut t = Tally::default();
        for _ in 0..3 {
            t.add(&labelled(&["mariadbd+0x1000", "handler::ha_write_row"], 'R'), None);
        }
        t.add(&labelled(&["__GI___lll_lock_wait", "___pthread_mutex_lock", "THD::awake"], 'S'), None);
        for _ in 0..50 {
            t.add(&labelled(&["__poll", "vio_io_wait"], 'S'), None);
        }
        let c = t.into_counted();
        assert_eq!(
            where_time_went_line(&c, 3).as_deref(),
            Some(
                "where the working threads' time went (4 thread-samples): 75% on CPU in handler::ha_write_row, \
                 25% lock wait in THD::awake"
            )
        );
        let idle: Vec<Counted> = c.into_iter().filter(|x| x.frames[0].label == "__poll").collect();
        assert_eq!(where_time_went_line(&idle, 3), None);
    }

    #[test]
    fn counts_as_it_goes_and_stays_small() {
        let mut t = Tally::default();
        for i in 0..10_000 {
            t.add(&thread(100 + (i % 3), &[1, 2, 3], "f", 'S'), None);
            t.add(&thread(200, &[4, 5], "g", if i % 2 == 0 { 'R' } else { 'S' }), None);
            // A running thread at another instruction of the same function each time.
            t.add(&thread(300, &[1000 + i as u64 % 50, 9], "h", 'R'), Some(1000));
        }
        assert_eq!(t.thread_stacks, 30_000);
        assert_eq!(t.distinct(), 4, "one entry per stack, thread kind and state");
        let v = t.into_counted();
        assert_eq!((v[0].count, v[1].count), (10_000, 10_000));
        let f = v.iter().find(|c| c.addrs == [1, 2, 3]).unwrap();
        assert_eq!(f.tids.iter().copied().collect::<Vec<_>>(), vec![100, 101, 102]);
        assert_eq!(v.iter().find(|c| c.addrs == [1000, 9]).map(|c| c.count), Some(10_000));
        assert_eq!((v[2].count, v[3].count), (5_000, 5_000));
    }

    #[test]
    fn thread_ids_are_capped_not_the_counts() {
        let mut t = Tally::default();
        for tid in 0..(TIDS_KEPT as i32 + 500) {
            t.add(&thread(tid, &[7], "h", 'S'), None);
        }
        let v = t.into_counted();
        assert_eq!((v[0].count, v[0].tids.len(), v[0].tids_capped), (TIDS_KEPT + 500, TIDS_KEPT, true));
    }
}
