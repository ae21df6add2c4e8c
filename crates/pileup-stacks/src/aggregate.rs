//! Aggregation: identical stacks counted together, most frequent first — the
//! heart of the poor man's profiler — each group keeping who is behind it.
//!
//! Counting happens as samples arrive ([`Tally::add`]), so a run of hours
//! holds one entry per distinct stack and kind of thread, not every thread
//! of every sample: memory follows how varied the server's stacks are, not
//! how long it was watched.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::{Frame, Profile, Role, ThreadStack};

/// Label used for a thread whose stack could not be unwound at all.
pub const NO_STACK: &str = "<no stack>";

/// Thread ids kept per counted stack (the count of threads beyond is not
/// kept: a server with connection churn creates threads without end).
pub const TIDS_KEPT: usize = 1024;
/// Distinct SQL summaries and statements kept per counted stack.
const SQL_KEPT: usize = 50;
const STATEMENTS_KEPT: usize = 200;

/// One distinct stack as one kind of thread had it, with every sample of it
/// counted: the unit every renderer reads.
#[derive(Debug, Clone, Serialize)]
pub struct Counted {
    /// Frames, innermost first (inlined frames expanded).
    pub frames: Vec<Frame>,
    /// Raw lookup addresses, innermost first.
    pub addrs: Vec<u64>,
    /// Thread name, role and OS state letter of the threads counted here.
    pub thread: String,
    pub role: Option<Role>,
    pub state: char,
    pub state_label: &'static str,
    pub sql_command: Option<String>,
    pub sql_user: Option<String>,
    /// Thread-samples with this stack.
    pub count: usize,
    /// Distinct threads seen with it (the first [`TIDS_KEPT`]).
    pub tids: BTreeSet<i32>,
    /// More threads had it than `tids` holds.
    pub tids_capped: bool,
    /// Distinct SQL summaries of the threads behind it (capped).
    pub sql: BTreeSet<String>,
    /// Statements (normalised whitespace) with counts; statements beyond the
    /// kept ones are counted in `other_statements`.
    pub statements: BTreeMap<String, usize>,
    pub other_statements: usize,
    /// Thread-samples whose unwinding stopped early.
    pub partial: usize,
}

impl Counted {
    pub fn labels(&self) -> Vec<String> {
        if self.frames.is_empty() {
            vec![NO_STACK.to_string()]
        } else {
            self.frames.iter().map(|f| f.label.clone()).collect()
        }
    }

    /// The root a flame graph puts this stack under with `--thread-root`.
    pub fn root(&self) -> String {
        match (&self.role, self.thread.as_str()) {
            (Some(r), _) => r.as_str().to_string(),
            (None, "") => "thread".to_string(),
            (None, n) => n.to_string(),
        }
    }
}

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

pub fn labels(t: &ThreadStack) -> Vec<String> {
    if t.frames.is_empty() {
        vec![NO_STACK.to_string()]
    } else {
        t.frames.iter().map(|f| f.label.clone()).collect()
    }
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

/// Folded stacks (outermost first, `;`-separated) with counts, sorted.
/// With `thread_root`, each stack is rooted at its thread role or name so a
/// flame graph separates the accept thread, connections, InnoDB threads, ….
pub fn folded(p: &Profile, thread_root: bool) -> Vec<(String, usize)> {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for c in &p.stacks {
        let mut parts: Vec<String> = c.labels().into_iter().rev().map(|l| l.replace(';', ":")).collect();
        if thread_root {
            parts.insert(0, c.root().replace(';', ":"));
        }
        *m.entry(parts.join(";")).or_default() += c.count;
    }
    m.into_iter().collect()
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
