//! Aggregation: identical stacks counted together, most frequent first — the
//! heart of the poor man's profiler — each group keeping who is behind it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::{Profile, ThreadStack};

/// Label used for a thread whose stack could not be unwound at all.
pub const NO_STACK: &str = "<no stack>";

#[derive(Debug, Clone, Serialize)]
pub struct StackGroup {
    /// Frame labels, innermost first.
    pub frames: Vec<String>,
    /// Thread-samples with this stack.
    pub count: usize,
    /// Distinct threads seen with it.
    pub tids: Vec<i32>,
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
    states: BTreeMap<String, usize>,
    sql: BTreeSet<String>,
    stmts: BTreeMap<String, usize>,
}

/// Group every thread of every sample by its stack.
pub fn group(p: &Profile) -> Vec<StackGroup> {
    let mut m: HashMap<Vec<String>, Gathered> = HashMap::new();
    for t in p.threads() {
        let e = m.entry(labels(t)).or_default();
        e.count += 1;
        e.tids.insert(t.tid);
        *e.states.entry(t.state_label.to_string()).or_default() += 1;
        if let Some(s) = &t.sql {
            if e.sql.len() < 50 {
                e.sql.insert(s.summary(120));
            }
            if let Some(i) = s.info.as_ref().filter(|_| !s.is_pileup) {
                *e.stmts.entry(crate::annotate::one_line(i, 200)).or_default() += 1;
            }
        }
    }
    let mut v: Vec<StackGroup> = m
        .into_iter()
        .map(|(frames, Gathered { count, tids, states, sql, stmts })| {
            let mut statements: Vec<(String, usize)> = stmts.into_iter().collect();
            statements.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            StackGroup {
                frames,
                count,
                tids: tids.into_iter().collect(),
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
    for t in p.threads() {
        let mut parts: Vec<String> = labels(t).into_iter().rev().map(|l| l.replace(';', ":")).collect();
        if thread_root {
            let root = match (&t.role, t.name.as_str()) {
                (Some(r), _) => r.as_str().to_string(),
                (None, "") => "thread".to_string(),
                (None, n) => n.replace(';', ":"),
            };
            parts.insert(0, root);
        }
        *m.entry(parts.join(";")).or_default() += 1;
    }
    m.into_iter().collect()
}
