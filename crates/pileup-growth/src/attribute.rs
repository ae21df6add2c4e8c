//! Growth charged to what caused it: each sampled event, unwound and
//! named, is put under its stack, and under the connection and statement
//! its thread ran at that instant (the processlist read just before and
//! just after it); sampled pages are followed to their release, so what
//! each stack still holds is known beside what it grew. Pure: tested with
//! scripted events and processlists.

use std::collections::{BTreeMap, HashMap, VecDeque};

use pileup_engine::SqlThread;
use serde::Serialize;

use super::record::{ThreadCounts, What};

/// One event after unwinding: its stack's frames (leaf first, named), if
/// copied.
#[derive(Debug, Clone)]
pub struct Unwound {
    pub time_ns: u64,
    pub tid: i32,
    pub what: What,
    pub bytes: u64,
    pub addr: u64,
    pub release: bool,
    pub frames: Option<Vec<String>>,
    /// The stack ended before the thread's start.
    pub truncated: bool,
}

/// Whose work an event was: the connection and statement its thread ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Who {
    pub conn: Option<u64>,
    pub user: Option<String>,
    pub host: Option<String>,
    pub statement: Option<String>,
    /// The reads before and after the event named different statements:
    /// the one chosen is the likelier, and a statement shorter than the
    /// time between reads may have run unseen in between.
    pub between: bool,
}

/// How far a statement's start, as the processlist tells it (to the
/// millisecond, read in the middle of the query), may lie after an event
/// and the statement still be the event's.
const SLACK_NS: u64 = 5_000_000;

/// The processlist by thread, read over time: which statement a thread ran
/// at an instant.
#[derive(Default)]
pub struct SqlTimeline {
    reads: VecDeque<(u64, HashMap<i32, SqlThread>)>,
    /// Every thread's last row: roles at the end, for threads gone since.
    pub last_seen: HashMap<i32, SqlThread>,
}

impl SqlTimeline {
    /// A read of the processlist at `time_ns`.
    pub fn push(&mut self, time_ns: u64, rows: HashMap<i32, SqlThread>) {
        for (t, r) in &rows {
            self.last_seen.insert(*t, r.clone());
        }
        self.reads.push_back((time_ns, rows));
    }

    /// When the latest read was made.
    pub fn latest(&self) -> Option<u64> {
        self.reads.back().map(|r| r.0)
    }

    /// Forget reads no event before `time_ns` can need (one before it is
    /// kept).
    pub fn forget_before(&mut self, time_ns: u64) {
        while self.reads.len() > 1 && self.reads[1].0 <= time_ns {
            self.reads.pop_front();
        }
    }

    /// What `tid` ran at `time_ns`: from the read before and the read after
    /// it. A statement in both is the one; in one only, that one (the
    /// other read found the thread idle, or between statements); two
    /// different statements, the one of the nearer read.
    pub fn who(&self, tid: i32, time_ns: u64) -> Who {
        let before = self.reads.iter().rev().find(|r| r.0 <= time_ns);
        let after = self.reads.iter().find(|r| r.0 >= time_ns);
        fn row(r: Option<&(u64, HashMap<i32, SqlThread>)>, tid: i32) -> Option<(u64, &SqlThread)> {
            r.and_then(|(t, m)| Some((*t, m.get(&tid)?)))
        }
        let (b, a) = (row(before, tid), row(after, tid));
        let stmt = |r: Option<(u64, &SqlThread)>| r.and_then(|(_, s)| s.info.clone().filter(|i| !i.is_empty()));
        // Whether the statement the read after names had begun by the
        // event (MariaDB says when it began, to the millisecond; unknown
        // elsewhere).
        let a_began = a.and_then(|(ta, s)| {
            s.time_ms.map(|ms| ta.saturating_sub(ms * 1_000_000) <= time_ns.saturating_add(SLACK_NS))
        });
        // Which read's row is the event's (its statement, and its
        // connection: a thread serves other connections over time).
        enum Pick {
            Before,
            After,
        }
        let (pick, between) = match (stmt(b), stmt(a)) {
            (Some(x), Some(y)) if x == y => (Some(Pick::After), false),
            // Begun before the event and running after it: the one.
            (_, Some(_)) if a_began == Some(true) => (Some(Pick::After), false),
            // Begun after the event: the one before, or one unseen between.
            (Some(_), Some(_)) if a_began == Some(false) => (Some(Pick::Before), true),
            (None, Some(_)) if a_began == Some(false) => (None, false),
            (Some(_), Some(_)) => {
                let (tb, ta) = (b.unwrap().0, a.unwrap().0);
                (Some(if time_ns - tb <= ta - time_ns { Pick::Before } else { Pick::After }), true)
            }
            (Some(_), None) => (Some(Pick::Before), false),
            (None, Some(_)) => (Some(Pick::After), false),
            (None, None) => (None, false),
        };
        let (row, statement) = match pick {
            Some(Pick::Before) => (b, stmt(b)),
            Some(Pick::After) => (a, stmt(a)),
            // No statement: the connection the thread served, if either
            // read agrees on one.
            None => (b.filter(|(_, s)| a.is_none_or(|(_, t)| t.id == s.id)).or(a), None),
        };
        let Some((_, s)) = row else { return Who::default() };
        if s.is_pileup {
            return Who::default();
        }
        Who { conn: Some(s.id), user: s.user.clone(), host: s.host.clone(), statement, between }
    }
}

/// Growth under one stack.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StackGrowth {
    /// Frames, leaf first.
    pub frames: Vec<String>,
    pub truncated: bool,
    /// Bytes first touched (sampled weights).
    pub grown: u64,
    /// Of those, bytes whose sampled page was not given back by the end.
    pub held: u64,
    pub samples: u64,
    /// The statement class that grew most through this stack.
    pub top_statement: Option<String>,
}

/// Growth under one statement class.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StatementGrowth {
    /// The statement class (literals replaced), and one statement of it.
    pub class: String,
    pub example: String,
    pub grown: u64,
    pub held: u64,
    /// The connections that ran it.
    pub connections: Vec<u64>,
    /// The stack it grew through, leaf first: the widest path of its flame
    /// graph (see [`widest_path`]).
    pub top_stack: Vec<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ConnectionGrowth {
    pub id: u64,
    pub user: String,
    pub host: String,
    pub grown: u64,
    pub held: u64,
}

/// Exact counts of one kind of thread.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RoleGrowth {
    pub role: String,
    pub threads: usize,
    #[serde(flatten)]
    pub counts: ThreadCounts,
}

/// Address space grown (mmap, brk, mremap, mprotect) under one stack.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct MappedGrowth {
    pub what: What,
    pub frames: Vec<String>,
    pub bytes: u64,
    pub calls: u64,
}

/// Everything charged over the trace.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Growth {
    /// Exact, from the kernel's per-thread counts: pages first touched
    /// (anonymous, file-backed), address space grown and given back.
    pub totals: ThreadCounts,
    /// Of the bytes first touched, those sampled with a stack, and those
    /// charged to a statement.
    pub with_stack: u64,
    pub with_statement: u64,
    /// Of those charged to a statement, bytes whose thread's reads before
    /// and after named different statements (see [`Who::between`]).
    #[serde(default)]
    pub between_statements: u64,
    /// Of the sampled bytes, those whose page was given back by the end
    /// (munmap, madvise, brk): growth that did not stay.
    pub given_back: u64,
    pub by_stack: Vec<StackGrowth>,
    pub by_statement: Vec<StatementGrowth>,
    pub by_connection: Vec<ConnectionGrowth>,
    pub by_role: Vec<RoleGrowth>,
    pub mapped_by_stack: Vec<MappedGrowth>,
    /// Bytes first touched per second of the trace (sampled weights).
    pub per_second: Vec<u64>,
    /// Address space given back per second of the trace (munmap, madvise,
    /// brk and mremap shrinks).
    pub released_per_second: Vec<u64>,
}

/// A sampled first touch, kept until the end.
struct Sample {
    time_ns: u64,
    bytes: u64,
    stack: Option<usize>,
    statement: Option<usize>,
    conn: Option<u64>,
    released: bool,
    between: bool,
}

/// Builds [`Growth`] from events as they are charged.
pub struct Charger {
    start_ns: u64,
    stacks: Vec<(Vec<String>, bool)>,
    stack_ids: HashMap<Vec<String>, usize>,
    statements: Vec<(String, String)>,
    statement_ids: HashMap<String, usize>,
    conns: HashMap<u64, (String, String)>,
    samples: Vec<Sample>,
    /// Sampled pages not given back yet: page address → samples.
    live: BTreeMap<u64, Vec<usize>>,
    mapped: HashMap<(What, usize), (u64, u64)>,
    per_second: Vec<u64>,
    released_per_second: Vec<u64>,
    class_of: Box<dyn Fn(&str) -> String>,
}

const PAGE: u64 = 4096;

fn add_at(v: &mut Vec<u64>, i: usize, n: u64) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] += n;
}

impl Charger {
    /// `class_of` turns a statement into its class (literals replaced).
    pub fn new(start_ns: u64, class_of: Box<dyn Fn(&str) -> String>) -> Charger {
        Charger {
            start_ns,
            stacks: vec![],
            stack_ids: HashMap::new(),
            statements: vec![],
            statement_ids: HashMap::new(),
            conns: HashMap::new(),
            samples: vec![],
            live: BTreeMap::new(),
            mapped: HashMap::new(),
            per_second: vec![],
            released_per_second: vec![],
            class_of,
        }
    }

    fn stack_id(&mut self, frames: Vec<String>, truncated: bool) -> usize {
        if let Some(&i) = self.stack_ids.get(&frames) {
            return i;
        }
        let i = self.stacks.len();
        self.stack_ids.insert(frames.clone(), i);
        self.stacks.push((frames, truncated));
        i
    }

    fn second(&self, time_ns: u64) -> usize {
        (time_ns.saturating_sub(self.start_ns) / 1_000_000_000) as usize
    }

    /// Charge one event (in time order) to `who`.
    pub fn charge(&mut self, e: Unwound, who: &Who) {
        if e.release {
            self.release(e.time_ns, e.addr, e.bytes);
            return;
        }
        let stack = e.frames.map(|f| self.stack_id(f, e.truncated));
        if !e.what.is_fault() {
            if let Some(s) = stack {
                let m = self.mapped.entry((e.what, s)).or_default();
                m.0 += e.bytes;
                m.1 += 1;
            }
            return;
        }
        let statement = who.statement.as_deref().map(|text| {
            let class = (self.class_of)(text);
            match self.statement_ids.get(&class) {
                Some(&i) => i,
                None => {
                    let i = self.statements.len();
                    self.statement_ids.insert(class.clone(), i);
                    self.statements.push((class, pileup_engine::one_line(text, 200)));
                    i
                }
            }
        });
        if let Some(c) = who.conn {
            self.conns
                .entry(c)
                .or_insert_with(|| (who.user.clone().unwrap_or_default(), who.host.clone().unwrap_or_default()));
        }
        let sec = self.second(e.time_ns);
        add_at(&mut self.per_second, sec, e.bytes);
        let i = self.samples.len();
        self.samples.push(Sample {
            time_ns: e.time_ns,
            bytes: e.bytes,
            stack,
            statement,
            conn: who.conn,
            released: false,
            between: who.between && statement.is_some(),
        });
        self.live.entry(e.addr & !(PAGE - 1)).or_default().push(i);
    }

    /// A range given back at `time_ns`: the sampled pages in it, touched
    /// before, no longer hold what they grew.
    fn release(&mut self, time_ns: u64, addr: u64, bytes: u64) {
        let sec = self.second(time_ns);
        add_at(&mut self.released_per_second, sec, bytes);
        let end = addr.saturating_add(bytes);
        let pages: Vec<u64> = self.live.range(addr..end).map(|(p, _)| *p).collect();
        for p in pages {
            let v = self.live.get_mut(&p).unwrap();
            v.retain(|&i| {
                let s = &mut self.samples[i];
                if s.time_ns <= time_ns {
                    s.released = true;
                    false
                } else {
                    true
                }
            });
            if v.is_empty() {
                self.live.remove(&p);
            }
        }
    }

    /// The growth over the trace, `top` entries per list; `threads` are
    /// the kernel's exact counts and `role` names a thread's kind.
    pub fn finish(self, threads: &HashMap<i32, ThreadCounts>, role: impl Fn(i32) -> String, top: usize) -> Growth {
        let mut g = Growth::default();
        for c in threads.values() {
            g.totals.add(c);
        }
        let mut roles: BTreeMap<String, (usize, ThreadCounts)> = BTreeMap::new();
        for (t, c) in threads {
            let r = roles.entry(role(*t)).or_default();
            r.0 += 1;
            r.1.add(c);
        }
        g.by_role = roles.into_iter().map(|(role, (threads, counts))| RoleGrowth { role, threads, counts }).collect();
        g.by_role.sort_by_key(|r| std::cmp::Reverse(r.counts.anon_bytes + r.counts.file_bytes));

        let held = |s: &Sample| if s.released { 0 } else { s.bytes };
        let mut per_stack = vec![(0u64, 0u64, 0u64, HashMap::<usize, u64>::new()); self.stacks.len()];
        let mut per_stmt = vec![(0u64, 0u64, Vec::<u64>::new(), HashMap::<usize, u64>::new()); self.statements.len()];
        let mut per_conn: HashMap<u64, (u64, u64)> = HashMap::new();
        for s in &self.samples {
            g.given_back += if s.released { s.bytes } else { 0 };
            if let Some(k) = s.stack {
                g.with_stack += s.bytes;
                let e = &mut per_stack[k];
                e.0 += s.bytes;
                e.1 += held(s);
                e.2 += 1;
                if let Some(st) = s.statement {
                    *e.3.entry(st).or_default() += s.bytes;
                }
            }
            if let Some(st) = s.statement {
                g.with_statement += s.bytes;
                g.between_statements += if s.between { s.bytes } else { 0 };
                let e = &mut per_stmt[st];
                e.0 += s.bytes;
                e.1 += held(s);
                if let Some(c) = s.conn.filter(|c| !e.2.contains(c)) {
                    e.2.push(c);
                }
                if let Some(k) = s.stack {
                    *e.3.entry(k).or_default() += s.bytes;
                }
            }
            if let Some(c) = s.conn {
                let e = per_conn.entry(c).or_default();
                e.0 += s.bytes;
                e.1 += held(s);
            }
        }
        let most =
            |m: &HashMap<usize, u64>| m.iter().max_by_key(|(k, v)| (**v, std::cmp::Reverse(**k))).map(|(k, _)| *k);
        g.by_stack = per_stack
            .iter()
            .enumerate()
            .filter(|(_, e)| e.0 > 0)
            .map(|(k, e)| StackGrowth {
                frames: self.stacks[k].0.clone(),
                truncated: self.stacks[k].1,
                grown: e.0,
                held: e.1,
                samples: e.2,
                top_statement: most(&e.3).map(|st| self.statements[st].0.clone()),
            })
            .collect();
        g.by_stack.sort_by(|a, b| b.grown.cmp(&a.grown).then_with(|| a.frames.cmp(&b.frames)));
        g.by_stack.truncate(top);
        g.by_statement = per_stmt
            .into_iter()
            .enumerate()
            .filter(|(_, e)| e.0 > 0)
            .map(|(st, e)| StatementGrowth {
                class: self.statements[st].0.clone(),
                example: self.statements[st].1.clone(),
                grown: e.0,
                held: e.1,
                connections: e.2,
                top_stack: widest_path(&self.stacks, &e.3),
            })
            .collect();
        g.by_statement.sort_by(|a, b| b.grown.cmp(&a.grown).then_with(|| a.class.cmp(&b.class)));
        g.by_statement.truncate(top);
        g.by_connection = per_conn
            .into_iter()
            .map(|(id, (grown, held))| {
                let (user, host) = self.conns.get(&id).cloned().unwrap_or_default();
                ConnectionGrowth { id, user, host, grown, held }
            })
            .collect();
        g.by_connection.sort_by(|a, b| b.grown.cmp(&a.grown).then(a.id.cmp(&b.id)));
        g.by_connection.truncate(top);
        g.mapped_by_stack = self
            .mapped
            .into_iter()
            .map(|((what, k), (bytes, calls))| MappedGrowth { what, frames: self.stacks[k].0.clone(), bytes, calls })
            .collect();
        g.mapped_by_stack.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.frames.cmp(&b.frames)));
        g.mapped_by_stack.truncate(top);
        g.per_second = self.per_second;
        g.released_per_second = self.released_per_second;
        g
    }

    /// The sampled stacks with what they grew and still hold, for flame
    /// graphs and pprof: frames root first.
    pub fn stacks_of(g: &Growth) -> Vec<(Vec<String>, u64, u64, Option<String>)> {
        g.by_stack
            .iter()
            .map(|s| (s.frames.iter().rev().cloned().collect(), s.grown, s.held, s.top_statement.clone()))
            .collect()
    }
}

/// The widest path of the flame graph of `weights` (stack index → bytes)
/// over `stacks` (frames leaf first), leaf first: from the outermost frame
/// down, at each call the callee under which the most bytes grew, until
/// the stacks that end there outweigh every callee. Sampled weights vary
/// from sample to sample, and one path's bytes often spread over several
/// leaves (a sort's `memcpy`, `memset` and packing under one `filesort`);
/// the single heaviest stack could then name a path with a small share,
/// where the widest path follows the bulk of the growth to a real stack.
fn widest_path(stacks: &[(Vec<String>, bool)], weights: &HashMap<usize, u64>) -> Vec<String> {
    // A truncated stack (its unwinding stopped short of the thread's start)
    // has another outermost frame and would stand apart: left out while
    // complete stacks carry weight.
    let complete = weights.iter().any(|(k, w)| *w > 0 && !stacks[*k].1);
    let mut paths: Vec<(&[String], u64)> = weights
        .iter()
        .filter(|(k, w)| **w > 0 && !(complete && stacks[**k].1))
        .map(|(k, w)| (stacks[*k].0.as_slice(), *w))
        .collect();
    let mut path: Vec<String> = vec![];
    loop {
        let depth = path.len();
        let frame_at = |frames: &[String]| frames.len().checked_sub(depth + 1).map(|i| frames[i].clone());
        let (mut callees, mut ending) = (BTreeMap::<String, u64>::new(), 0u64);
        for (frames, w) in &paths {
            match frame_at(frames) {
                Some(f) => *callees.entry(f).or_default() += w,
                None => ending += w,
            }
        }
        // The heaviest callee; of equals, the first by name.
        let Some((next, w)) = callees.into_iter().fold(None::<(String, u64)>, |best, (f, w)| match best {
            Some((_, bw)) if bw >= w => best,
            _ => Some((f, w)),
        }) else {
            break;
        };
        if w < ending {
            break;
        }
        paths.retain(|(frames, _)| frame_at(frames).as_deref() == Some(next.as_str()));
        path.push(next);
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, info: Option<&str>) -> SqlThread {
        SqlThread {
            id,
            user: Some("app".into()),
            host: Some("localhost".into()),
            info: info.map(String::from),
            ..Default::default()
        }
    }

    fn fault(time_ns: u64, tid: i32, bytes: u64, addr: u64, frames: &[&str]) -> Unwound {
        Unwound {
            time_ns,
            tid,
            what: What::FaultAnon,
            bytes,
            addr,
            release: false,
            frames: Some(frames.iter().map(|s| s.to_string()).collect()),
            truncated: false,
        }
    }

    #[test]
    fn an_event_is_charged_to_the_statement_running_at_its_instant() {
        let mut tl = SqlTimeline::default();
        tl.push(100, HashMap::from([(7, row(12, Some("SELECT * FROM t ORDER BY b")))]));
        tl.push(300, HashMap::from([(7, row(12, Some("SELECT * FROM t ORDER BY b")))]));
        tl.push(500, HashMap::from([(7, row(12, None))]));
        tl.push(700, HashMap::from([(7, row(12, Some("PREPARE s FROM 'x'")))]));
        // Running in both reads.
        assert_eq!(tl.who(7, 200).statement.as_deref(), Some("SELECT * FROM t ORDER BY b"));
        // Ended by the read after: the one before says what ran.
        assert_eq!(tl.who(7, 400).statement.as_deref(), Some("SELECT * FROM t ORDER BY b"));
        // Idle before, running after: the one after.
        assert_eq!(tl.who(7, 600).statement.as_deref(), Some("PREPARE s FROM 'x'"));
        assert_eq!(tl.who(7, 600).conn, Some(12));
        // A thread in no read is nobody's.
        assert_eq!(tl.who(8, 200), Who::default());
        // Two statements: the nearer read's.
        let mut tl = SqlTimeline::default();
        tl.push(0, HashMap::from([(7, row(1, Some("A")))]));
        tl.push(100, HashMap::from([(7, row(1, Some("B")))]));
        assert_eq!(tl.who(7, 10).statement.as_deref(), Some("A"));
        assert_eq!(tl.who(7, 90).statement.as_deref(), Some("B"));
        tl.forget_before(100);
        assert_eq!(tl.latest(), Some(100));
        // A thread that served another connection by the read after: the
        // connection is the one whose statement was chosen.
        let mut tl = SqlTimeline::default();
        tl.push(0, HashMap::from([(7, row(12, None))]));
        tl.push(100, HashMap::from([(7, row(13, Some("INSERT …")))]));
        let w = tl.who(7, 50);
        assert_eq!((w.conn, w.statement.as_deref()), (Some(13), Some("INSERT …")));
        // The read after says its statement began after the event: the
        // statement before is the event's, however near the read after is.
        let ms = 1_000_000u64;
        let mut tl = SqlTimeline::default();
        tl.push(0, HashMap::from([(7, row(1, Some("CREATE TABLE g1 SELECT …")))]));
        tl.push(250 * ms, HashMap::from([(7, SqlThread { time_ms: Some(40), ..row(1, Some("DO SLEEP(0.2)")) })]));
        assert_eq!(tl.who(7, 200 * ms).statement.as_deref(), Some("CREATE TABLE g1 SELECT …"));
        assert_eq!(tl.who(7, 215 * ms).statement.as_deref(), Some("DO SLEEP(0.2)"));
    }

    #[test]
    fn a_statements_stack_is_the_widest_path_not_the_heaviest_single_stack() {
        let st = |f: &[&str]| (f.iter().map(|s| s.to_string()).collect::<Vec<_>>(), false);
        let stacks = vec![
            st(&["memcpy", "pack", "filesort", "sub_select", "start_thread"]),
            st(&["memcpy", "pack_sort_string", "filesort", "sub_select", "start_thread"]),
            st(&["memset", "filesort", "sub_select", "start_thread"]),
            st(&["memcpy", "my_net_write", "send_data", "sub_select", "start_thread"]),
            st(&["filesort", "sub_select", "start_thread"]),
        ];
        // The result's one heavy sample outweighs each of the sort's
        // stacks, not the sort.
        let w = HashMap::from([(0, 30), (1, 30), (2, 10), (3, 40), (4, 5)]);
        assert_eq!(widest_path(&stacks, &w), stacks[0].0);
        // Bytes in the function itself outweigh each callee: the path ends there.
        let w = HashMap::from([(0, 3), (1, 3), (4, 10), (3, 1)]);
        assert_eq!(widest_path(&stacks, &w), stacks[4].0);
        // Truncated stacks stand aside while complete ones carry weight.
        let mut cut = stacks.clone();
        cut.push((vec!["memcpy".into(), "my_net_write".into()], true));
        let w = HashMap::from([(0, 3), (5, 50)]);
        assert_eq!(widest_path(&cut, &w), stacks[0].0);
        assert_eq!(widest_path(&cut, &HashMap::from([(5, 50)])), cut[5].0);
        // Equal callees: the first by name; no bytes, no path.
        let w = HashMap::from([(0, 7), (1, 7)]);
        assert_eq!(widest_path(&stacks, &w), stacks[0].0);
        assert!(widest_path(&stacks, &HashMap::new()).is_empty());
    }

    #[test]
    fn growth_is_charged_by_stack_statement_and_connection_and_releases_are_followed() {
        let class: Box<dyn Fn(&str) -> String> = Box::new(|s: &str| s.replace(char::is_numeric, "?"));
        let mut c = Charger::new(0, class);
        let sort = Who {
            conn: Some(12),
            user: Some("app".into()),
            host: Some("h".into()),
            statement: Some("SELECT 1 ORDER BY 2".into()),
            between: false,
        };
        let prep = Who {
            conn: Some(13),
            user: Some("app".into()),
            host: Some("h".into()),
            statement: Some("PREPARE 7".into()),
            between: false,
        };
        let mib = 1u64 << 20;
        c.charge(fault(10, 7, 300 * mib, 0x1000_0000, &["memset", "filesort", "handle_one_connection"]), &sort);
        c.charge(fault(20, 7, 100 * mib, 0x2000_0000, &["memset", "filesort", "handle_one_connection"]), &sort);
        c.charge(fault(30, 8, 50 * mib, 0x3000_0000, &["malloc", "mysqld_stmt_prepare"]), &prep);
        // Without a stack (over the budget): still the statement's.
        c.charge(Unwound { frames: None, ..fault(40, 8, 10 * mib, 0x3100_0000, &[]) }, &prep);
        // The sort buffer is unmapped: its first page's growth is given back.
        c.charge(
            Unwound { release: true, what: What::Munmap, ..fault(50, 7, 64 * mib, 0x1000_0000, &[]) },
            &Who::default(),
        );
        // A release before a touch does not undo it.
        c.charge(
            Unwound { release: true, what: What::Madvise, time_ns: 5, ..fault(5, 8, mib, 0x3000_0000, &[]) },
            &Who::default(),
        );
        let threads = HashMap::from([
            (7, ThreadCounts { anon_bytes: 400 * mib, ..Default::default() }),
            (8, ThreadCounts { anon_bytes: 60 * mib, ..Default::default() }),
        ]);
        let g = c.finish(&threads, |_| "connection".into(), 10);
        assert_eq!(g.totals.anon_bytes, 460 * mib);
        assert_eq!(g.with_stack, 450 * mib);
        assert_eq!(g.with_statement, 460 * mib);
        assert_eq!(g.given_back, 300 * mib);
        assert_eq!(g.by_stack[0].frames[1], "filesort");
        assert_eq!((g.by_stack[0].grown, g.by_stack[0].held), (400 * mib, 100 * mib));
        assert_eq!(g.by_stack[0].top_statement.as_deref(), Some("SELECT ? ORDER BY ?"));
        assert_eq!(g.by_statement[0].class, "SELECT ? ORDER BY ?");
        assert_eq!(g.by_statement[0].top_stack[1], "filesort");
        assert_eq!(g.by_statement[1].top_stack, ["malloc", "mysqld_stmt_prepare"]);
        assert_eq!(g.by_statement[1].grown, 60 * mib);
        assert_eq!(g.by_statement[1].connections, vec![13]);
        assert_eq!((g.by_connection[0].id, g.by_connection[0].grown), (12, 400 * mib));
        assert_eq!((g.by_role[0].role.as_str(), g.by_role[0].threads), ("connection", 2));
        assert_eq!(g.per_second, vec![460 * mib]);
        assert_eq!(g.released_per_second, vec![65 * mib]);
    }
}
