//! A fleet's stored rows merged into one digest, with the hosts as a
//! dimension: per class, the hosts it costs most on; per host, its top
//! classes.
//!
//! Rows are added as files arrive ([`Merge::add`]), on several threads
//! each with its own [`Merge`], joined at the end ([`Merge::join`]); only
//! rows of the question's minutes and hosts count ([`Question`]).

use std::collections::{BTreeMap, HashMap};

use arrow_array::RecordBatch;
use foldhash::fast::FixedState;

use super::rows::{Keep, View};
use crate::aggregate::OTHER;
use crate::attr::N_ATTRS;
use crate::class::{Class, Name};
use crate::{Digest, Error};

/// Which rows a question reads: minutes in `[since, until)` (Unix seconds)
/// of hosts whose name matches `hosts` (a glob: `*`, `?`, `[…]`, `{a,b}`).
#[derive(Clone, Debug)]
pub struct Question {
    pub since: i64,
    pub until: i64,
    pub hosts: Option<globset::GlobMatcher>,
}

impl Question {
    pub fn wants_host(&self, host: &str) -> bool {
        self.hosts.as_ref().is_none_or(|p| p.is_match(host))
    }

    /// The hours (their start, Unix seconds) whose partitions can hold
    /// the question's minutes.
    pub fn hours(&self) -> Vec<i64> {
        let first = self.since - self.since.rem_euclid(3600);
        (0..).map(|i| first + i * 3600).take_while(|h| *h < self.until).collect()
    }
}

/// The minutes with rows of each host in a batch, as a mask of each
/// hour's sixty: a batch holds many rows of a host's minute (one a class),
/// and a set of distinct minutes is made of them without sorting every
/// row's.
#[derive(Default)]
struct HostMinutes {
    /// (host, hour, the hour's minutes with rows as bits).
    hours: Vec<(usize, i64, u64)>,
    at: HashMap<(usize, i64), usize, FixedState>,
    /// Minutes not on a minute's start (not pileup's rows), as they are.
    odd: Vec<(usize, i64)>,
    last: Option<usize>,
}

impl HostMinutes {
    fn add(&mut self, h: usize, minute: i64) {
        if minute.rem_euclid(60) != 0 {
            self.odd.push((h, minute));
            return;
        }
        let hour = minute - minute.rem_euclid(3600);
        let slot = match self.last {
            Some(s) if self.hours[s].0 == h && self.hours[s].1 == hour => s,
            _ => *self.at.entry((h, hour)).or_insert_with(|| {
                self.hours.push((h, hour, 0));
                self.hours.len() - 1
            }),
        };
        self.last = Some(slot);
        self.hours[slot].2 |= 1 << ((minute - hour) / 60);
    }

    /// Each (host, minute) once.
    fn each(mut self) -> impl Iterator<Item = (usize, i64)> {
        self.odd.sort_unstable();
        self.odd.dedup();
        let bits = self
            .hours
            .into_iter()
            .flat_map(|(h, hour, mask)| (0..60).filter(move |b| mask & (1 << b) != 0).map(move |b| (h, hour + b * 60)));
        bits.chain(self.odd)
    }
}

/// A class's time and count on one host.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    pub count: u64,
    pub time: f64,
}

impl Cost {
    fn plus(&mut self, o: Cost) {
        self.count += o.count;
        self.time += o.time;
    }
}

/// One host's share.
#[derive(Clone, Debug, Default)]
pub struct Host {
    pub labels: Vec<(String, String)>,
    pub total: Cost,
    /// Its minutes with rows.
    pub minutes: std::collections::BTreeSet<i64>,
}

/// Rows merged so far: classes and hosts by their place of first sight,
/// found by name.
#[derive(Default, Debug)]
pub struct Merge {
    classes: Vec<Class>,
    class_at: HashMap<Box<[u8]>, usize, FixedState>,
    /// Per class, its cost per host (by the host's place).
    by_host: Vec<HashMap<usize, Cost, FixedState>>,
    hosts: Vec<(String, Host)>,
    /// Per host name seen: its place, or none when the question leaves it
    /// out.
    host_at: HashMap<String, Option<usize>, FixedState>,
    /// Database names, shared by the classes that name them.
    names: HashMap<String, Name, FixedState>,
    rows: u64,
    /// Minutes with rows (of any host), for the report's span.
    span: Option<(i64, i64)>,
    /// Each class's rows as (executions, time), when kept for a
    /// comparison ([`Merge::keeping_samples`]).
    samples: Option<Vec<Vec<(u64, f64)>>>,
    /// What rows keep beyond their attributes ([`Merge::keeping`]).
    keep: Keep,
}

/// The merged digest and the hosts dimension.
pub struct Merged {
    pub digest: Digest,
    pub hosts: Hosts,
    /// Each class's rows, when kept.
    pub samples: Option<super::compare::Samples>,
}

/// The hosts dimension of a merged digest.
#[derive(Debug, Default)]
pub struct Hosts {
    /// Every host with rows, by name.
    pub hosts: BTreeMap<String, Host>,
    /// Per class (by fingerprint), its hosts by time spent, most first.
    pub by_class: HashMap<Box<[u8]>, Vec<(String, Cost)>>,
    /// The first and last minute with rows.
    pub span: Option<(i64, i64)>,
    /// Whether the hosts' labels were read.
    pub labels: bool,
}

impl Hosts {
    /// A host's classes by time, most first: (fingerprint, cost).
    pub fn top_of(&self, host: &str, n: usize) -> Vec<(&[u8], Cost)> {
        let mut v: Vec<(&[u8], Cost)> = self
            .by_class
            .iter()
            .filter_map(|(fp, hs)| hs.iter().find(|(h, _)| h == host).map(|(_, c)| (&**fp, *c)))
            .collect();
        v.sort_by(|a, b| b.1.time.total_cmp(&a.1.time).then_with(|| a.0.cmp(b.0)));
        v.truncate(n);
        v
    }
}

impl Merge {
    /// A merge that keeps each class's rows too, for
    /// [`super::compare::compare`].
    pub fn keeping_samples() -> Merge {
        Merge { samples: Some(Default::default()), ..Default::default() }
    }

    /// This merge keeping only the plan flags and time series `keep`
    /// says: a read of some columns ([`super::file::profile_columns`])
    /// keeps the flags it read.
    pub fn keeping(self, keep: Keep) -> Merge {
        Merge { keep, ..self }
    }

    /// Add the rows the question wants, as a record batch of them would
    /// add them (what a row holds beyond the stored columns is not kept).
    #[cfg(test)]
    pub fn add(&mut self, rows: Vec<super::Row>, q: &Question) -> Result<(), Error> {
        if rows.is_empty() {
            return Ok(());
        }
        self.add_batch(&super::rows::to_batch(&rows, super::Samples::Full)?, q)
    }

    /// Add the rows of a record batch of the stored schema that the
    /// question wants, column by column: no row is made, a class and a
    /// host are looked up once per run of rows that share them (a
    /// compacted file's rows come by host, then class).
    pub fn add_batch(&mut self, b: &RecordBatch, q: &Question) -> Result<(), Error> {
        let v = View::new(b)?;
        // The last row's host and class (its row, and their places): a
        // run of rows of one host or class is looked up once.
        let mut last_host: Option<(usize, Option<usize>)> = None;
        let mut last_class: Option<(usize, usize)> = None;
        let mut minutes = HostMinutes::default();
        // The rows of one class on one host in a row, merged together.
        let mut run: (usize, usize, Vec<usize>) = (0, 0, vec![]);
        for i in 0..v.len() {
            let minute = v.minute(i);
            if !(q.since..q.until).contains(&minute) {
                continue;
            }
            let h = match last_host {
                Some((j, h)) if v.same_host(i, j) => h,
                _ => self.host_of(v.host(i), q),
            };
            last_host = Some((i, h));
            let Some(h) = h else { continue };
            // A host's labels from the first of its rows that has some.
            if self.hosts[h].1.labels.is_empty() && v.has_labels(i) {
                self.hosts[h].1.labels = v.labels(i);
            }
            let c = match last_class {
                Some((j, c)) if v.same_class(i, j) => c,
                _ => self.class_of(v.fingerprint(i)),
            };
            last_class = Some((i, c));
            if (h, c) != (run.0, run.1) {
                self.merge_run(&v, &run);
                run = (h, c, vec![]);
            }
            run.2.push(i);
            self.rows += 1;
            self.span = Some(self.span.map_or((minute, minute), |(a, b)| (a.min(minute), b.max(minute))));
            minutes.add(h, minute);
            if let Some(s) = self.samples.as_mut() {
                s[c].push((v.count(i), v.query_time(i)));
            }
        }
        self.merge_run(&v, &run);
        for (h, m) in minutes.each() {
            self.hosts[h].1.minutes.insert(m);
        }
        Ok(())
    }

    /// A run of rows of class `c` on host `h` merged.
    fn merge_run(&mut self, v: &View, (h, c, rows): &(usize, usize, Vec<usize>)) {
        if rows.is_empty() {
            return;
        }
        let cost =
            Cost { count: rows.iter().map(|&i| v.count(i)).sum(), time: rows.iter().map(|&i| v.query_time(i)).sum() };
        self.hosts[*h].1.total.plus(cost);
        self.by_host[*c].entry(*h).or_default().plus(cost);
        let names = &mut self.names;
        v.merge_rows(rows, &mut self.classes[*c], &self.keep, &mut |db| match names.get(db) {
            Some(n) => n.clone(),
            None => names.entry(db.to_string()).or_insert_with(|| Name::from(db.as_bytes())).clone(),
        });
    }

    /// The place of host `name`, or none when the question leaves it out.
    fn host_of(&mut self, name: &str, q: &Question) -> Option<usize> {
        if let Some(&h) = self.host_at.get(name) {
            return h;
        }
        let h = q.wants_host(name).then(|| self.new_host(name, vec![]));
        self.host_at.insert(name.to_string(), h);
        h
    }

    /// A host's place, made for it (with `labels`).
    fn new_host(&mut self, name: &str, labels: Vec<(String, String)>) -> usize {
        self.hosts.push((name.to_string(), Host { labels, ..Default::default() }));
        self.host_at.insert(name.to_string(), Some(self.hosts.len() - 1));
        self.hosts.len() - 1
    }

    /// The place of the class of fingerprint `fp`, made when new.
    fn class_of(&mut self, fp: &str) -> usize {
        match self.class_at.get(fp.as_bytes()) {
            Some(c) => *c,
            None => self.new_class(Class::new(fp.as_bytes().into())),
        }
    }

    /// A class's place, made for it: its hosts' costs, and its rows when
    /// kept.
    fn new_class(&mut self, c: Class) -> usize {
        self.class_at.insert(c.fingerprint.clone(), self.classes.len());
        self.classes.push(c);
        self.by_host.push(HashMap::default());
        if let Some(s) = self.samples.as_mut() {
            s.push(vec![]);
        }
        self.classes.len() - 1
    }

    /// Another thread's rows joined to these.
    pub fn join(&mut self, o: Merge) {
        self.rows += o.rows;
        self.span = match (self.span, o.span) {
            (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
            (a, b) => a.or(b),
        };
        // Their hosts' places here.
        let mut at = Vec::with_capacity(o.hosts.len());
        for (name, h) in o.hosts {
            let mine = match self.host_at.get(&name).copied().flatten() {
                Some(m) => m,
                None => self.new_host(&name, vec![]),
            };
            let m = &mut self.hosts[mine].1;
            if m.labels.is_empty() {
                m.labels = h.labels;
            }
            m.total.plus(h.total);
            m.minutes.extend(h.minutes);
            at.push(mine);
        }
        let mut samples = o.samples.map(Vec::into_iter);
        for (c, theirs) in o.classes.into_iter().zip(o.by_host) {
            let mine = match self.class_at.get(&c.fingerprint) {
                Some(m) => {
                    self.classes[*m].merge(&c);
                    *m
                }
                None => self.new_class(c),
            };
            for (h, cost) in theirs {
                self.by_host[mine].entry(at[h]).or_default().plus(cost);
            }
            if let (Some(mine_s), Some(rows)) = (self.samples.as_mut(), samples.as_mut().and_then(Iterator::next)) {
                mine_s[mine].extend(rows);
            }
        }
    }

    /// Rows merged.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The digest of every row merged: classes ranked by time, "other"
    /// (what hosts counted past their class limit) apart; `inputs`: what
    /// was read, `bytes` its size.
    pub fn finish(self, inputs: Vec<String>, bytes: u64) -> Merged {
        let names: Vec<&str> = self.hosts.iter().map(|(n, _)| n.as_str()).collect();
        let by_class = self
            .classes
            .iter()
            .zip(self.by_host)
            .map(|(c, hs)| {
                let mut v: Vec<(String, Cost)> = hs.into_iter().map(|(h, cost)| (names[h].to_string(), cost)).collect();
                v.sort_by(|a, b| b.1.time.total_cmp(&a.1.time).then_with(|| a.0.cmp(&b.0)));
                (c.fingerprint.clone(), v)
            })
            .collect();
        let samples = self.samples.map(|s| self.classes.iter().map(|c| c.fingerprint.clone()).zip(s).collect());
        let hosts = self.hosts.into_iter().collect();
        let mut classes = self.classes;
        let other = classes.iter().position(|c| &*c.fingerprint == OTHER).map(|i| classes.swap_remove(i));
        crate::rank::sort(&mut classes, crate::rank::Rank::Time);
        let mut seen = [false; N_ATTRS];
        for c in classes.iter().chain(other.as_ref()) {
            for (i, _) in c.stats() {
                seen[i] = true;
            }
        }
        let events = classes.iter().chain(other.as_ref()).map(|c| c.count).sum();
        let max_classes = classes.len().max(1);
        Merged {
            digest: Digest {
                inputs,
                events,
                bytes,
                classes,
                other,
                max_classes,
                problems: vec![],
                problem_count: 0,
                seen,
                notes: vec![],
                minutes: None,
            },
            hosts: Hosts { hosts, by_class, span: self.span, labels: self.keep.labels },
            samples,
        }
    }
}

/// A moment as `--since` and `--until` take it, in Unix seconds: a length
/// of time before `now` (`90s`, `30m`, `1h`, `2d`, `1w`), or a date and
/// time in UTC (`2026-11-30T04:00:00Z`, `2026-11-30 04:00`, `2026-11-30`);
/// `now` itself.
pub fn parse_when(s: &str, now: i64) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now);
    }
    let unit = s.chars().last().and_then(|u| match u {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3600),
        'd' => Some(86_400),
        'w' => Some(604_800),
        _ => None,
    });
    if let Some(mul) = unit {
        if let Ok(n) = s[..s.len() - 1].parse::<f64>() {
            if n.is_finite() && n >= 0.0 {
                return Ok(now - (n * mul as f64).round() as i64);
            }
        }
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp());
    }
    // UTC either way: a Z is allowed without seconds too (04:00Z).
    let naive = s.strip_suffix(['Z', 'z']).unwrap_or(s);
    for f in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(naive, f) {
            return Ok(t.and_utc().timestamp());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight").and_utc().timestamp());
    }
    Err(format!("'{s}' is neither a time ago (30m, 1h, 2d) nor a UTC time (2026-11-30T04:00Z, 2026-11-30 04:00)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_are_times_ago_or_utc_times() {
        let now = 1_796_014_800; // 2026-11-30T05:00:00Z
        assert_eq!(parse_when("1h", now), Ok(now - 3600));
        assert_eq!(parse_when("90m", now), Ok(now - 5400));
        assert_eq!(parse_when("2d", now), Ok(now - 172_800));
        assert_eq!(parse_when("now", now), Ok(now));
        assert_eq!(parse_when("2026-11-30T04:00:00Z", now), Ok(now - 3600));
        assert_eq!(parse_when("2026-11-30 04:00", now), Ok(now - 3600));
        // The examples --help gives.
        assert_eq!(parse_when("2026-11-30T04:00Z", now), Ok(now - 3600));
        assert_eq!(parse_when("2026-11-30T04:00", now), Ok(now - 3600));
        assert_eq!(parse_when("2026-11-30", now), Ok(now - 5 * 3600));
        assert!(parse_when("yesterday", now).unwrap_err().contains("neither a time ago"));
    }

    #[test]
    fn a_batchs_minutes_are_each_hosts_distinct_minutes() {
        let h = 1_796_011_200; // 04:00
                               // Rows by host, class and minute: the minutes again for each class,
                               // across an hour's end, another host between, and a time that is
                               // not a minute's start.
        let rows: Vec<(usize, i64)> = (0..3)
            .flat_map(|_| (55..65).map(move |m| (0, h + m * 60)))
            .chain([(1, h + 120), (0, h + 180), (1, h + 120), (0, h + 181), (0, h + 181), (1, h - 3600)])
            .collect();
        let mut m = HostMinutes::default();
        for &(host, minute) in &rows {
            m.add(host, minute);
        }
        let mut got: Vec<(usize, i64)> = m.each().collect();
        let mut want = rows.clone();
        want.sort_unstable();
        want.dedup();
        assert_eq!(got.len(), want.len(), "each once: {got:?}");
        got.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn a_question_reads_the_hours_its_minutes_are_in() {
        let h = 1_796_011_200; // 04:00
        let q = Question { since: h + 1800, until: h + 7200, hosts: None };
        assert_eq!(q.hours(), vec![h, h + 3600]);
        let q = Question { since: h, until: h + 3601, hosts: None };
        assert_eq!(q.hours(), vec![h, h + 3600]);
        let glob = globset::Glob::new("db-{a,c}*").unwrap().compile_matcher();
        let q = Question { since: h, until: h + 60, hosts: Some(glob) };
        assert!(q.wants_host("db-a1") && q.wants_host("db-c") && !q.wants_host("db-b"));
    }
}
