//! Statements to classes: the fingerprint of each statement finds its class,
//! up to a limit on the number of classes; past it, new fingerprints go to
//! one "other" class.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;

use crate::attr::A;
use crate::class::{Class, Event, Name};

/// The fingerprint of the class that holds statements past `max_classes`.
pub const OTHER: &[u8] = b"(other statements: past --max-classes)";

/// A problem met in the input: where, and what.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Index of the input in the list given.
    #[serde(skip)]
    pub input: usize,
    /// The block of the input it was found in; `line` counts from the
    /// block's start until the run ends and renumbers it.
    #[serde(skip)]
    pub block: u64,
    /// The input's name (filled in when the run ends).
    pub file: String,
    pub line: u64,
    pub what: String,
}

/// Problems kept word for word; the rest are counted.
pub const PROBLEMS_KEPT: usize = 50;

/// The one copy of a host, user or database name.
fn intern(names: &mut Names, v: &[u8]) -> Name {
    // Most statements of a log share their host, user and database: the
    // last few names looked up answer without hashing.
    if let Some(n) = names.recent.iter().find(|n| ***n == *v) {
        return n.clone();
    }
    let n = match names.set.get(v) {
        Some(n) => n.clone(),
        None => {
            let n = Name::from(v);
            names.set.insert(n.clone());
            n
        }
    };
    names.recent.rotate_right(1);
    names.recent[0] = n.clone();
    n
}

/// Host, user and database names, each kept once, and the last four used.
struct Names {
    set: HashSet<Name, foldhash::fast::FixedState>,
    recent: [Name; 4],
}

/// The statements of each minute, by class: what a fleet's stored
/// digests hold ([`crate::fleet`]).
#[derive(Default, Debug)]
pub struct Minutes {
    /// Keyed by the minute's start (Unix seconds), then by fingerprint.
    /// Statements past `max_classes` are in their minute's
    /// [`OTHER`] class.
    pub by_minute: BTreeMap<i64, HashMap<Box<[u8]>, Class>>,
    /// Statements with no time of their own (a log entry without one, or
    /// performance_schema's sums over a window): no minute holds them.
    pub untimed: u64,
}

impl Minutes {
    /// Fold every minute's classes whose fingerprint is not `kept` (one of
    /// the whole input's classes) into that minute's [`OTHER`] class, as
    /// the whole input's classes past `max_classes` were.
    pub fn fold_into_other(&mut self, kept: &HashSet<&[u8]>) {
        for classes in self.by_minute.values_mut() {
            let gone: Vec<Box<[u8]>> =
                classes.keys().filter(|fp| &***fp != OTHER && !kept.contains(&***fp)).cloned().collect();
            for fp in gone {
                let c = classes.remove(&fp).expect("listed");
                match classes.get_mut(OTHER) {
                    Some(o) => o.merge(&c),
                    None => {
                        let mut o = Class::new(OTHER.into());
                        o.merge(&c);
                        classes.insert(OTHER.into(), o);
                    }
                }
            }
        }
    }

    fn merge(&mut self, o: Minutes) {
        self.untimed += o.untimed;
        for (minute, classes) in o.by_minute {
            let mine = self.by_minute.entry(minute).or_default();
            for (fp, c) in classes {
                match mine.get_mut(&fp) {
                    Some(m) => m.merge(&c),
                    None => {
                        mine.insert(fp, c);
                    }
                }
            }
        }
    }
}

/// Classes being built.
pub struct Aggregate {
    /// Each minute's classes too, when kept ([`Aggregate::keep_minutes`]).
    pub minutes: Option<Minutes>,
    /// Class indices, found by their fingerprint's hash (the fingerprint
    /// itself is kept once, in its class).
    index: hashbrown::HashTable<(u64, u32)>,
    hasher: foldhash::fast::FixedState,
    /// Host, user and database names, each kept once.
    names: Names,
    pub classes: Vec<Class>,
    pub other: Option<Class>,
    pub max_classes: usize,
    pub events: u64,
    pub problems: Vec<Problem>,
    pub problem_count: u64,
    /// An input's last entry that had no statement yet at its end (a log
    /// still being written, or cut there): not counted, and not damage.
    pub unfinished: Vec<Problem>,
    fp: Vec<u8>,
    /// Skeletons of statements seen (see [`pileup_sql::skeleton`]), with
    /// their class's index ([`TO_OTHER`]: "other"): a statement whose
    /// skeleton is here needs no fingerprint.
    skels: hashbrown::HashTable<(u64, Box<[u8]>, u32)>,
    skel: Vec<u8>,
    /// Lookups and hits since the last check, and the event count before
    /// which skeletons are not tried (a log of statements each seen once
    /// gains nothing from them).
    skel_lookups: u32,
    skel_hits: u32,
    skel_off_until: u64,
}

/// Skeletons kept at most (the first seen: in a log, the frequent
/// statements come early and often).
const SKELETONS: usize = 4096;
/// The class index that stands for "other".
const TO_OTHER: u32 = u32::MAX;

impl Aggregate {
    pub fn new(max_classes: usize) -> Aggregate {
        Aggregate {
            minutes: None,
            index: hashbrown::HashTable::new(),
            hasher: foldhash::fast::FixedState::with_seed(0x5eed),
            names: Names {
                set: HashSet::with_hasher(foldhash::fast::FixedState::with_seed(0x5eed)),
                recent: std::array::from_fn(|_| Name::from(&b""[..])),
            },
            classes: vec![],
            other: None,
            max_classes: max_classes.max(1),
            events: 0,
            problems: vec![],
            problem_count: 0,
            unfinished: vec![],
            fp: Vec::with_capacity(256),
            skels: hashbrown::HashTable::new(),
            skel: Vec::with_capacity(256),
            skel_lookups: 0,
            skel_hits: 0,
            skel_off_until: 0,
        }
    }

    /// Keep each minute's classes as well as the whole input's, when
    /// `keep`.
    pub fn keep_minutes(mut self, keep: bool) -> Aggregate {
        self.minutes = keep.then(Minutes::default);
        self
    }

    /// Once every thread's classes are in: fold each minute's classes that
    /// are not among the kept ones into that minute's [`OTHER`].
    pub fn fold_minutes(&mut self) {
        if let Some(m) = self.minutes.as_mut() {
            let kept: HashSet<&[u8]> = self.classes.iter().map(|c| &*c.fingerprint).collect();
            m.fold_into_other(&kept);
        }
    }

    /// The class of class `i` (or "other") in the minute of `ts`, made
    /// when new, and the names to intern into; `count` statements without
    /// a time (`ts` None) only counted. None when minutes are not kept.
    fn minute_class(&mut self, i: u32, ts: Option<i64>, count: u64) -> Option<(&mut Class, &mut Names)> {
        let m = self.minutes.as_mut()?;
        let Some(ts) = ts else {
            m.untimed += count;
            return None;
        };
        let fp: &[u8] = match i {
            TO_OTHER => OTHER,
            i => &self.classes[i as usize].fingerprint,
        };
        let per = m.by_minute.entry(ts - ts.rem_euclid(60)).or_default();
        if !per.contains_key(fp) {
            per.insert(fp.into(), Class::new(fp.into()));
        }
        Some((per.get_mut(fp).expect("just inserted"), &mut self.names))
    }

    /// Add `e` (of class `i`) to its minute's class, when minutes are kept.
    fn add_to_minute(&mut self, i: u32, e: &Event) {
        if let Some((c, names)) = self.minute_class(i, e.ts, 1) {
            c.add(e, &mut |v| intern(names, v));
        }
    }

    fn find(&self, fp: &[u8]) -> (u64, Option<u32>) {
        let h = self.hasher.hash_one(fp);
        (h, self.index.find(h, |&(eh, i)| eh == h && &*self.classes[i as usize].fingerprint == fp).map(|e| e.1))
    }

    /// Index class `i` under hash `h` of its fingerprint.
    fn index_class(&mut self, h: u64, i: u32) {
        // With its hash: growing the table rehashes no fingerprint.
        self.index.insert_unique(h, (h, i), |e| e.0);
    }

    fn insert(&mut self, h: u64, c: Class) {
        self.classes.push(c);
        self.index_class(h, self.classes.len() as u32 - 1);
    }

    /// The index of the class of the fingerprint in `self.fp` (made when
    /// new), or [`TO_OTHER`] past `max_classes`.
    fn class_index_of_fp(&mut self) -> u32 {
        let (h, found) = self.find(&self.fp);
        match found {
            Some(i) => i,
            None if self.classes.len() >= self.max_classes => TO_OTHER,
            None => {
                self.insert(h, Class::new(self.fp.as_slice().into()));
                self.classes.len() as u32 - 1
            }
        }
    }

    /// The class at `i` (or "other"), and the names to intern into.
    fn class_at(&mut self, i: u32) -> (&mut Class, &mut Names) {
        let class = match i {
            TO_OTHER => self.other.get_or_insert_with(|| Class::new(OTHER.into())),
            i => &mut self.classes[i as usize],
        };
        (class, &mut self.names)
    }

    pub fn add(&mut self, e: &Event) {
        self.events += 1;
        let skel = self.events >= self.skel_off_until && pileup_sql::skeleton(e.query, &mut self.skel);
        let mut h = 0;
        if skel {
            h = self.hasher.hash_one(self.skel.as_slice());
            let found = self.skels.find(h, |(eh, k, _)| *eh == h && **k == *self.skel).map(|e| e.2);
            self.skel_lookups += 1;
            self.skel_hits += u32::from(found.is_some());
            if self.skel_lookups == 4096 {
                // Mostly misses with no room left: a log of statements each
                // seen once or twice. Tried again later.
                if self.skels.len() >= SKELETONS && self.skel_hits < 2048 {
                    self.skel_off_until = self.events + 65536;
                }
                (self.skel_lookups, self.skel_hits) = (0, 0);
            }
            if let Some(i) = found {
                self.add_to_minute(i, e);
                let (class, names) = self.class_at(i);
                class.add(e, &mut |v| intern(names, v));
                return;
            }
        }
        pileup_sql::fingerprint(e.query, &mut self.fp);
        let i = self.class_index_of_fp();
        if skel && self.skels.len() < SKELETONS {
            self.skels.insert_unique(h, (h, self.skel.as_slice().into(), i), |e| e.0);
        }
        self.add_to_minute(i, e);
        let (class, names) = self.class_at(i);
        class.add(e, &mut |v| intern(names, v));
    }

    /// A performance_schema digest's sums over a window; with `minute`
    /// (the window's start, Unix seconds) in that minute's class too.
    pub fn add_digest(&mut self, d: &crate::input::ps::Delta, input: usize, minute: Option<i64>) {
        use crate::attr::{F_ERROR, F_FULL_SCAN};
        self.events += d.sums.count;
        pileup_sql::fingerprint(d.text.as_bytes(), &mut self.fp);
        let ps = |v: u64| v as f64 / 1e12;
        let x = &d.sums;
        let sums = [
            (A::QueryTime, ps(x.timer_wait)),
            (A::LockTime, ps(x.lock_time)),
            (A::RowsSent, x.rows_sent as f64),
            (A::RowsExamined, x.rows_examined as f64),
            (A::RowsAffected, x.rows_affected as f64),
            (A::TmpTables, x.tmp_tables as f64),
            (A::TmpDiskTables, x.tmp_disk_tables as f64),
            (A::MergePasses, x.sort_merge_passes as f64),
            (A::SortRows, x.sort_rows as f64),
        ];
        let flags = [(F_FULL_SCAN, x.select_scan), (2, x.select_full_join), (F_ERROR, x.errors)];
        // MariaDB keeps no sample statement: the class's sample stays
        // empty (the advisor says so) rather than a digest with `?` in it.
        let sample = d.sample.as_deref().unwrap_or("").as_bytes();
        let sm = crate::class::Summary {
            n: x.count,
            sums: &sums,
            flags: &flags,
            db: d.schema.as_bytes(),
            last: d.last_seen,
            sample,
        };
        let i = self.class_index_of_fp();
        let (c, names) = self.class_at(i);
        c.add_summary(&sm, &mut |v| intern(names, v));
        if c.sample.at == (0, 0) {
            c.sample.at = (input, 0);
        }
        // Sums over a window with no minute are only counted.
        if let Some((c, names)) = self.minute_class(i, minute, x.count) {
            c.add_summary(&sm, &mut |v| intern(names, v));
        }
    }

    pub fn problem(&mut self, p: Problem) {
        self.problem_count += 1;
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(p);
        }
    }

    /// Fold another aggregate (another thread's) into this one: every class
    /// is kept (at most threads × `max_classes`) until [`Aggregate::cap`].
    pub fn merge(&mut self, o: Aggregate) {
        // Class indices may change below.
        self.skels.clear();
        self.events += o.events;
        // Kept whole here; the run keeps the input's first ones once every
        // thread's are in (each thread kept its own first ones).
        self.problem_count += o.problem_count;
        self.problems.extend(o.problems);
        self.unfinished.extend(o.unfinished);
        if let Some(om) = o.minutes {
            self.minutes.get_or_insert_with(Minutes::default).merge(om);
        }
        for c in o.classes {
            match self.find(&c.fingerprint) {
                (_, Some(i)) => self.classes[i as usize].merge(&c),
                (h, None) => self.insert(h, c),
            }
        }
        if let Some(oc) = o.other {
            match &mut self.other {
                Some(m) => m.merge(&oc),
                None => self.other = Some(oc),
            }
        }
    }

    /// Once every thread's classes are in: past `max_classes`, the classes
    /// with the least total time go to "other". Done once, not at each
    /// merge: a class sent to "other" by one merge would come back, with
    /// only the statements of the threads merged after it, in the next.
    pub fn cap(&mut self) {
        if self.classes.len() > self.max_classes {
            self.skels.clear();
            crate::rank::sort(&mut self.classes, crate::rank::Rank::Time);
            let rest = self.classes.split_off(self.max_classes);
            let other = self.other.get_or_insert_with(|| Class::new(OTHER.into()));
            for c in &rest {
                other.merge(c);
            }
            self.index.clear();
            for i in 0..self.classes.len() {
                let h = self.hasher.hash_one(&*self.classes[i].fingerprint);
                self.index_class(h, i as u32);
            }
        }
    }
}
