//! A fleet's stored rows merged into one digest, with the hosts as a
//! dimension: per class, the hosts it costs most on; per host, its top
//! classes.
//!
//! Rows are added as files arrive ([`Merge::add`]), on several threads
//! each with its own [`Merge`], joined at the end ([`Merge::join`]); only
//! rows of the question's minutes and hosts count ([`Question`]).

use std::collections::{BTreeMap, HashMap};

use super::Row;
use crate::aggregate::OTHER;
use crate::attr::{A, N_ATTRS};
use crate::class::Class;
use crate::Digest;

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

    pub fn wants(&self, r: &Row) -> bool {
        (self.since..self.until).contains(&r.minute) && self.wants_host(&r.host)
    }

    /// The hours (their start, Unix seconds) whose partitions can hold
    /// the question's minutes.
    pub fn hours(&self) -> Vec<i64> {
        let first = self.since - self.since.rem_euclid(3600);
        (0..).map(|i| first + i * 3600).take_while(|h| *h < self.until).collect()
    }
}

/// A class's time and count on one host.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    pub count: u64,
    pub time: f64,
}

impl Cost {
    fn add(&mut self, c: &Class) {
        self.count += c.count;
        self.time += c.sum(A::QueryTime);
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

/// Rows merged so far.
#[derive(Default, Debug)]
pub struct Merge {
    classes: HashMap<Box<[u8]>, Class>,
    /// Per class, per host.
    by_host: HashMap<Box<[u8]>, HashMap<String, Cost>>,
    hosts: BTreeMap<String, Host>,
    rows: u64,
    /// Minutes with rows (of any host), for the report's span.
    span: Option<(i64, i64)>,
    /// Each class's rows as (executions, time), when kept for a
    /// comparison ([`Merge::keeping_samples`]).
    samples: Option<super::compare::Samples>,
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

    /// Add the rows the question wants.
    pub fn add(&mut self, rows: Vec<Row>, q: &Question) {
        for r in rows.into_iter().filter(|r| q.wants(r)) {
            self.rows += 1;
            self.span = Some(self.span.map_or((r.minute, r.minute), |(a, b)| (a.min(r.minute), b.max(r.minute))));
            let h = self.hosts.entry(r.host.clone()).or_default();
            if h.labels.is_empty() {
                h.labels = r.labels;
            }
            h.total.add(&r.class);
            h.minutes.insert(r.minute);
            if let Some(s) = self.samples.as_mut() {
                let row = (r.class.count, r.class.sum(A::QueryTime));
                s.entry(r.class.fingerprint.clone()).or_default().push(row);
            }
            self.by_host.entry(r.class.fingerprint.clone()).or_default().entry(r.host).or_default().add(&r.class);
            match self.classes.get_mut(&r.class.fingerprint) {
                Some(c) => c.merge(&r.class),
                None => {
                    self.classes.insert(r.class.fingerprint.clone(), r.class);
                }
            }
        }
    }

    /// Another thread's rows joined to these.
    pub fn join(&mut self, o: Merge) {
        self.rows += o.rows;
        if let (Some(mine), Some(theirs)) = (self.samples.as_mut(), o.samples) {
            for (fp, rows) in theirs {
                mine.entry(fp).or_default().extend(rows);
            }
        }
        self.span = match (self.span, o.span) {
            (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
            (a, b) => a.or(b),
        };
        for (name, h) in o.hosts {
            let mine = self.hosts.entry(name).or_default();
            if mine.labels.is_empty() {
                mine.labels = h.labels;
            }
            mine.total.count += h.total.count;
            mine.total.time += h.total.time;
            mine.minutes.extend(h.minutes);
        }
        for (fp, hs) in o.by_host {
            let mine = self.by_host.entry(fp).or_default();
            for (h, c) in hs {
                let m = mine.entry(h).or_default();
                m.count += c.count;
                m.time += c.time;
            }
        }
        for (fp, c) in o.classes {
            match self.classes.get_mut(&fp) {
                Some(m) => m.merge(&c),
                None => {
                    self.classes.insert(fp, c);
                }
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
        let mut classes: Vec<Class> = self.classes.into_values().collect();
        let other = classes.iter().position(|c| &*c.fingerprint == OTHER).map(|i| classes.swap_remove(i));
        crate::rank::sort(&mut classes, crate::rank::Rank::Time);
        let mut seen = [false; N_ATTRS];
        for c in classes.iter().chain(other.as_ref()) {
            for (i, _) in c.stats() {
                seen[i] = true;
            }
        }
        let events = classes.iter().chain(other.as_ref()).map(|c| c.count).sum();
        let by_class = self
            .by_host
            .into_iter()
            .map(|(fp, hs)| {
                let mut v: Vec<(String, Cost)> = hs.into_iter().collect();
                v.sort_by(|a, b| b.1.time.total_cmp(&a.1.time).then_with(|| a.0.cmp(&b.0)));
                (fp, v)
            })
            .collect();
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
            hosts: Hosts { hosts: self.hosts, by_class, span: self.span },
            samples: self.samples,
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
