//! Aggregate: recorded waits summed per lock as they arrive (counts per
//! distinct stack, statement and holder, never every event kept, so a
//! trace of hours costs the memory of what is distinct), then joined with
//! the kernel's exact per-word counts into one entry per lock.

use std::collections::{BTreeMap, HashMap, HashSet};

use pileup_engine::LockKind;
use serde::Serialize;

use crate::event::{WordStats, HIST_BUCKETS};

/// One recorded wait, annotated.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// The futex word waited on.
    pub word: u64,
    pub kind: LockKind,
    /// The lock's address (a rwlock's waiters sleep on words inside it).
    pub lock: u64,
    pub wait_ns: u64,
    pub tid: i32,
    /// Lookup addresses, innermost first, and their labels.
    pub addrs: Vec<u64>,
    pub labels: Vec<String>,
    pub truncated: bool,
    pub statement: Option<String>,
    /// The owner read from the lock when the wait began, with a summary of
    /// who it is (connection and statement, or thread name).
    pub holder: Option<(i32, String)>,
    pub taken_in: Option<String>,
}

#[derive(Default)]
struct StackAgg {
    labels: Vec<String>,
    events: u64,
    wait_ns: u64,
    truncated: bool,
}

#[derive(Default)]
struct LockAgg {
    kinds: BTreeMap<LockKind, u64>,
    words: HashSet<u64>,
    events: u64,
    wait_ns: u64,
    stacks: HashMap<Vec<u64>, StackAgg>,
    statements: HashMap<String, (u64, u64)>,
    holders: HashMap<i32, (u64, String)>,
    waiters: HashSet<i32>,
    taken_in: BTreeMap<String, u64>,
}

/// Per-lock sums of recorded waits.
#[derive(Default)]
pub struct Aggregator {
    locks: HashMap<u64, LockAgg>,
    word_lock: HashMap<u64, u64>,
    pub recorded: u64,
}

impl Aggregator {
    pub fn add(&mut self, s: Sampled) {
        self.recorded += 1;
        // A word keeps the lock it was first seen under.
        let lock = *self.word_lock.entry(s.word).or_insert(s.lock);
        let l = self.locks.entry(lock).or_default();
        *l.kinds.entry(s.kind).or_default() += 1;
        l.words.insert(s.word);
        l.events += 1;
        l.wait_ns += s.wait_ns;
        l.waiters.insert(s.tid);
        let st = l.stacks.entry(s.addrs).or_insert_with(|| StackAgg { labels: s.labels, ..Default::default() });
        st.events += 1;
        st.wait_ns += s.wait_ns;
        st.truncated |= s.truncated;
        if let Some(q) = s.statement {
            let e = l.statements.entry(q).or_default();
            e.0 += 1;
            e.1 += s.wait_ns;
        }
        if let Some((tid, who)) = s.holder {
            let e = l.holders.entry(tid).or_insert((0, who.clone()));
            e.0 += 1;
            e.1 = who;
        }
        if let Some(t) = s.taken_in {
            *l.taken_in.entry(t).or_default() += 1;
        }
    }

    /// Distinct locks recorded so far.
    pub fn locks(&self) -> usize {
        self.locks.len()
    }

    /// Every lock address recorded (for naming).
    pub fn lock_addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.locks.keys().copied()
    }

    /// Join with the kernel's per-word counts. `thread_ns` is the window's
    /// thread time (threads × duration), for each lock's share;
    /// `name(addr, taken_in)` names a lock. At most `top` stacks,
    /// statements and holders per lock.
    pub fn finish(
        mut self,
        words: Vec<(u64, WordStats)>,
        thread_ns: u64,
        top: usize,
        mut name: impl FnMut(u64, Option<&str>) -> (String, String),
    ) -> Vec<LockEntry> {
        let mut stats: HashMap<u64, WordStats> = HashMap::new();
        let mut unrecorded: Vec<(u64, WordStats)> = vec![];
        for (w, s) in words {
            match self.word_lock.get(&w) {
                Some(lock) => stats.entry(*lock).or_default().add(&s),
                None => unrecorded.push((w, s)),
            }
        }
        let mut out = vec![];
        for (addr, l) in self.locks.drain() {
            // A wait recorded after the table filled has no word counts:
            // the recorded sums stand in.
            let s = stats.remove(&addr).unwrap_or_else(|| WordStats {
                count: l.events,
                total_ns: l.wait_ns,
                ..Default::default()
            });
            let kind = l.kinds.iter().max_by_key(|(_, n)| **n).map(|(k, _)| *k).unwrap_or(LockKind::Futex);
            let taken_in = prevailing_site(&l.taken_in);
            let (label, name_source) = name(addr, taken_in.as_deref());
            let mut stacks: Vec<StackEntry> = l
                .stacks
                .into_values()
                .map(|st| StackEntry {
                    events: st.events,
                    wait_ms: ms(st.wait_ns),
                    frames: st.labels,
                    truncated: st.truncated,
                })
                .collect();
            stacks.sort_by(|a, b| b.wait_ms.total_cmp(&a.wait_ms).then(b.events.cmp(&a.events)));
            let distinct_stacks = stacks.len();
            stacks.truncate(top);
            let mut statements: Vec<StatementEntry> = l
                .statements
                .into_iter()
                .map(|(fingerprint, (events, ns))| StatementEntry { fingerprint, events, wait_ms: ms(ns) })
                .collect();
            statements.sort_by(|a, b| b.wait_ms.total_cmp(&a.wait_ms));
            statements.truncate(top);
            let mut holders: Vec<HolderEntry> =
                l.holders.into_iter().map(|(tid, (events, who))| HolderEntry { tid, who, events }).collect();
            holders.sort_by(|a, b| b.events.cmp(&a.events).then(a.tid.cmp(&b.tid)));
            holders.truncate(top);
            out.push(entry(
                addr,
                &s,
                thread_ns,
                kind,
                label,
                name_source,
                l.events,
                l.waiters.len(),
                taken_in,
                stacks,
                distinct_stacks,
                statements,
                holders,
                l.words.len(),
            ));
        }
        // Words no recorded wait named (every one was over the budget):
        // counted, kind and name unknown.
        for (w, s) in unrecorded {
            let (label, source) = name(w, None);
            out.push(entry(w, &s, thread_ns, LockKind::Futex, label, source, 0, 0, None, vec![], 0, vec![], vec![], 1));
        }
        let mut out = merge_classes(out, top);
        out.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then(a.addr.cmp(&b.addr)));
        out
    }
}

/// The place a lock is most often taken in, from each recorded stack's
/// `taken_in`. A stack cut short before any named frame gives the bare
/// site (`mariadbd+0xde2c20`) where a whole one gives
/// `mariadbd+0xde2c20 (in handler::ha_write_row)`: both count for the
/// site, and the site keeps the named caller its whole stacks show most.
fn prevailing_site(taken_in: &BTreeMap<String, u64>) -> Option<String> {
    fn site(t: &str) -> &str {
        match t.rfind(" (in ") {
            Some(i) if t.ends_with(')') => &t[..i],
            _ => t,
        }
    }
    let mut by_site: BTreeMap<&str, u64> = BTreeMap::new();
    for (t, n) in taken_in {
        *by_site.entry(site(t)).or_default() += n;
    }
    let best = by_site.iter().max_by_key(|(_, n)| **n).map(|(s, _)| *s)?;
    let named = taken_in.iter().filter(|(t, _)| t.as_str() != best && site(t) == best).max_by_key(|(_, n)| **n);
    Some(named.map_or(best, |(t, _)| t.as_str()).to_string())
}

/// Heap futex words that each only one thread waited on, of one kind and
/// taken at one place, are one lock class: a per-thread semaphore or event
/// (InnoDB's group commit waiters, a connection's own condition) has an
/// address per thread, and listed apart they would bury the locks threads
/// really queue on. They become one entry, whose `futex_words` says how
/// many addresses it covers.
fn merge_classes(entries: Vec<LockEntry>, top: usize) -> Vec<LockEntry> {
    let mut out = vec![];
    let mut classes: BTreeMap<(&'static str, String), Vec<LockEntry>> = BTreeMap::new();
    for e in entries {
        match (&e.taken_in, e.name_source.as_str(), e.waiters) {
            (Some(t), "heap", 0..=1) if e.recorded > 0 => classes.entry((e.kind, t.clone())).or_default().push(e),
            _ => out.push(e),
        }
    }
    for ((_, taken_in), mut members) in classes {
        if members.len() == 1 {
            out.extend(members);
            continue;
        }
        let n = members.len();
        let mut m = members.remove(0);
        let mut hist: BTreeMap<(u64, u64), u64> = m.histogram.iter().map(|b| ((b.from_us, b.to_us), b.waits)).collect();
        let mut stacks: HashMap<Vec<String>, StackEntry> = HashMap::new();
        let mut statements: HashMap<String, StatementEntry> = HashMap::new();
        let mut add_parts = |e: &mut LockEntry| {
            for s in e.stacks.drain(..) {
                match stacks.get_mut(&s.frames) {
                    Some(x) => {
                        x.events += s.events;
                        x.wait_ms += s.wait_ms;
                        x.truncated |= s.truncated;
                    }
                    None => {
                        stacks.insert(s.frames.clone(), s);
                    }
                }
            }
            for q in e.statements.drain(..) {
                match statements.get_mut(&q.fingerprint) {
                    Some(x) => {
                        x.events += q.events;
                        x.wait_ms += q.wait_ms;
                    }
                    None => {
                        statements.insert(q.fingerprint.clone(), q);
                    }
                }
            }
        };
        add_parts(&mut m);
        for mut e in members {
            add_parts(&mut e);
            for b in &e.histogram {
                *hist.entry((b.from_us, b.to_us)).or_default() += b.waits;
            }
            m.waits += e.waits;
            m.in_progress += e.in_progress;
            m.total_ms += e.total_ms;
            m.max_us = m.max_us.max(e.max_us);
            m.share_pct += e.share_pct;
            m.recorded += e.recorded;
            m.waiters += e.waiters;
            m.futex_words += e.futex_words;
            m.distinct_stacks += e.distinct_stacks;
            m.holders.extend(e.holders);
        }
        m.mean_us = if m.waits > 0 { m.total_ms * 1000.0 / m.waits as f64 } else { 0.0 };
        m.histogram = hist.into_iter().map(|((from_us, to_us), waits)| Bucket { from_us, to_us, waits }).collect();
        let mut stacks: Vec<StackEntry> = stacks.into_values().collect();
        stacks.sort_by(|a, b| b.wait_ms.total_cmp(&a.wait_ms));
        m.distinct_stacks = stacks.len();
        stacks.truncate(top);
        m.stacks = stacks;
        let mut statements: Vec<StatementEntry> = statements.into_values().collect();
        statements.sort_by(|a, b| b.wait_ms.total_cmp(&a.wait_ms));
        statements.truncate(top);
        m.statements = statements;
        m.holders.sort_by_key(|h| std::cmp::Reverse(h.events));
        m.holders.truncate(top);
        m.addr = format!("{n} addresses");
        m.name = format!("{} class: {n} addresses, one waiter each, taken in {taken_in}", m.kind);
        m.name_source = "class".into();
        out.push(m);
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn entry(
    addr: u64,
    s: &WordStats,
    thread_ns: u64,
    kind: LockKind,
    name: String,
    name_source: String,
    recorded: u64,
    waiters: usize,
    taken_in: Option<String>,
    stacks: Vec<StackEntry>,
    distinct_stacks: usize,
    statements: Vec<StatementEntry>,
    holders: Vec<HolderEntry>,
    words: usize,
) -> LockEntry {
    LockEntry {
        addr: format!("{addr:#x}"),
        name,
        name_source,
        kind: kind.describe(),
        condition: kind == LockKind::Condition,
        waits: s.count,
        in_progress: s.in_progress,
        total_ms: ms(s.total_ns),
        mean_us: if s.count > 0 { s.total_ns as f64 / s.count as f64 / 1e3 } else { 0.0 },
        max_us: s.max_ns as f64 / 1e3,
        share_pct: if thread_ns > 0 { 100.0 * s.total_ns as f64 / thread_ns as f64 } else { 0.0 },
        histogram: histogram(&s.hist),
        recorded,
        waiters,
        futex_words: words,
        taken_in,
        holder_note: crate::annotate::holder_note(kind).map(String::from),
        holders,
        stacks,
        distinct_stacks,
        statements,
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Non-empty log2 buckets, each with its upper bound in µs.
fn histogram(h: &[u64; HIST_BUCKETS]) -> Vec<Bucket> {
    h.iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| Bucket { from_us: if i == 0 { 0 } else { 1u64 << i }, to_us: 1u64 << (i + 1), waits: *n })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct Bucket {
    pub from_us: u64,
    pub to_us: u64,
    pub waits: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StackEntry {
    pub events: u64,
    pub wait_ms: f64,
    /// Innermost first.
    pub frames: Vec<String>,
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatementEntry {
    pub fingerprint: String,
    pub events: u64,
    pub wait_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HolderEntry {
    pub tid: i32,
    pub who: String,
    /// Recorded waits that began while this thread held the lock.
    pub events: u64,
}

/// One lock's contention over the window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LockEntry {
    pub addr: String,
    pub name: String,
    /// `symbol`, `section`, `heap` (named by the function taking it) or
    /// `class` (per-thread words taken at one place, merged).
    pub name_source: String,
    pub kind: &'static str,
    /// A condition wait: it includes idle waiting, not only contention.
    pub condition: bool,
    /// Every contended wait (exact, from the kernel).
    pub waits: u64,
    /// Of `waits`, those still in progress when the window ended, counted
    /// with the time waited so far.
    pub in_progress: u64,
    pub total_ms: f64,
    pub mean_us: f64,
    pub max_us: f64,
    /// Of the window's thread time.
    pub share_pct: f64,
    pub histogram: Vec<Bucket>,
    /// Waits recorded with their stack.
    pub recorded: u64,
    /// Distinct threads among the recorded waiters.
    pub waiters: usize,
    pub futex_words: usize,
    pub taken_in: Option<String>,
    pub holder_note: Option<String>,
    pub holders: Vec<HolderEntry>,
    pub stacks: Vec<StackEntry>,
    pub distinct_stacks: usize,
    pub statements: Vec<StatementEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(word: u64, lock: u64, ns: u64, tid: i32, stack: &[u64], holder: Option<i32>) -> Sampled {
        Sampled {
            word,
            kind: LockKind::PthreadMutex,
            lock,
            wait_ns: ns,
            tid,
            addrs: stack.to_vec(),
            labels: stack.iter().map(|a| format!("f{a}")).collect(),
            truncated: false,
            statement: Some("SHOW GLOBAL VARIABLES".into()),
            holder: holder.map(|t| (t, format!("thread {t}"))),
            taken_in: Some("fill_variables".into()),
        }
    }

    #[test]
    fn a_site_keeps_its_named_caller_when_most_stacks_were_cut_short() {
        let t = |v: &[(&str, u64)]| v.iter().map(|(s, n)| (s.to_string(), *n)).collect::<BTreeMap<_, _>>();
        let cut = "mariadbd+0xde2c20";
        let whole = "mariadbd+0xde2c20 (in handler::ha_write_row)";
        assert_eq!(prevailing_site(&t(&[(cut, 10), (whole, 2)])).as_deref(), Some(whole));
        // The site taken most wins, over another site's named caller.
        let other = "mariadbd+0x1111 (in row_ins_step)";
        assert_eq!(prevailing_site(&t(&[(cut, 5), (whole, 1), (other, 4)])).as_deref(), Some(whole));
        assert_eq!(prevailing_site(&t(&[(cut, 5), (other, 6)])).as_deref(), Some(other));
        assert_eq!(prevailing_site(&t(&[(cut, 5)])).as_deref(), Some(cut));
        assert_eq!(prevailing_site(&t(&[])), None);
        // A named site is its own.
        assert_eq!(prevailing_site(&t(&[("fill_variables", 3)])).as_deref(), Some("fill_variables"));
    }

    #[test]
    fn exact_counts_come_from_the_kernel_and_stacks_from_records() {
        let mut a = Aggregator::default();
        a.add(sampled(0x100, 0x100, 3_000_000, 1, &[1, 2], Some(5)));
        a.add(sampled(0x100, 0x100, 1_000_000, 2, &[1, 2], Some(5)));
        a.add(sampled(0x100, 0x100, 2_000_000, 3, &[1, 3], None));
        let mut hist = [0u64; HIST_BUCKETS];
        hist[10] = 9;
        hist[11] = 1;
        let words = vec![
            (0x100, WordStats { count: 10, in_progress: 0, total_ns: 20_000_000, max_ns: 3_000_000, op: 128, hist }),
            (0x900, WordStats { count: 4, in_progress: 0, total_ns: 40_000_000, max_ns: 10_000_000, op: 128, hist }),
        ];
        let out = a.finish(words, 1_000_000_000, 5, |addr, taken| {
            (taken.map(|t| format!("heap lock in {t}")).unwrap_or(format!("{addr:#x}")), "heap".into())
        });
        assert_eq!(out.len(), 2);
        // The unrecorded word waited longest in all and comes first.
        assert_eq!((out[0].addr.as_str(), out[0].waits, out[0].recorded), ("0x900", 4, 0));
        let l = &out[1];
        assert_eq!((l.waits, l.recorded, l.waiters), (10, 3, 3));
        assert_eq!(l.total_ms, 20.0);
        assert_eq!(l.mean_us, 2000.0);
        assert_eq!(l.share_pct, 2.0);
        assert_eq!(l.name, "heap lock in fill_variables");
        assert_eq!(l.stacks.len(), 2);
        assert_eq!((l.stacks[0].events, l.stacks[0].wait_ms), (2, 4.0));
        assert_eq!(l.holders.len(), 1);
        assert_eq!((l.holders[0].tid, l.holders[0].events), (5, 2));
        assert_eq!(l.statements[0].events, 3);
        assert_eq!(l.histogram.len(), 2);
        assert_eq!((l.histogram[0].from_us, l.histogram[0].to_us, l.histogram[0].waits), (1024, 2048, 9));
    }

    #[test]
    fn the_words_of_one_rwlock_are_one_lock() {
        let mut a = Aggregator::default();
        a.add(Sampled { kind: LockKind::PthreadRwlock, ..sampled(0x108, 0x100, 1_000, 1, &[1], None) });
        a.add(Sampled { kind: LockKind::PthreadRwlock, ..sampled(0x10c, 0x100, 1_000, 2, &[2], None) });
        let w = |n| WordStats { count: n, total_ns: n * 1000, ..Default::default() };
        let out = a.finish(vec![(0x108, w(3)), (0x10c, w(4))], 0, 5, |_, _| ("rw".into(), "heap".into()));
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].waits, out[0].futex_words, out[0].kind), (7, 2, "pthread rwlock"));
    }

    #[test]
    fn per_thread_words_taken_at_one_place_are_one_class() {
        let mut a = Aggregator::default();
        // Three threads, each on a word of its own, taken in one place.
        for (word, tid) in [(0x100, 1), (0x200, 2), (0x300, 3)] {
            a.add(Sampled { kind: LockKind::Futex, ..sampled(word, word, 1_000_000, tid, &[1, 2], None) });
        }
        // Two threads queueing on one word stay a lock of their own.
        a.add(sampled(0x900, 0x900, 1_000_000, 1, &[1, 2], None));
        a.add(sampled(0x900, 0x900, 1_000_000, 2, &[1, 2], None));
        let w = |n| WordStats { count: n, total_ns: n * 1_000_000, max_ns: 1_000_000, ..Default::default() };
        let words = vec![(0x100, w(1)), (0x200, w(2)), (0x300, w(3)), (0x900, w(2))];
        let out = a.finish(words, 0, 5, |_, t| (format!("heap lock taken in {}", t.unwrap()), "heap".into()));
        assert_eq!(out.len(), 2);
        let c = &out[0];
        assert_eq!((c.waits, c.futex_words, c.waiters, c.name_source.as_str()), (6, 3, 3, "class"));
        assert_eq!(c.name, "futex class: 3 addresses, one waiter each, taken in fill_variables");
        assert_eq!((c.stacks.len(), c.stacks[0].events), (1, 3));
        assert_eq!(c.mean_us, 1000.0);
        assert_eq!((out[1].waits, out[1].name_source.as_str()), (2, "heap"));
    }
}
